"""Monitoring: an encrypted SNS topic, the alarms per variant, SLO alarms, the dashboard.

Alarm thresholds come from the config's ``monitoring`` section.
Every alarm is built through ``EndpointRef.metric`` (``variant_metric``) so it watches a metric of
the metrics contract or one SageMaker publishes. The rollback alarms (5XX, ModelLatency p99)
are reused: they get the topic as action.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from constructs import Construct

from container.serving import metrics_contract as mc
from sizing.rollout_alarms import rule_period
from stacks.constructs.alarm_rules import Rule, variant_rules
from stacks.constructs.dashboard import ServingDashboard
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.rollback_alarms import RollbackAlarms
from typed_config import GATE_SLOS, VARIANT_NAMES, MonitoringConfig, VariantName

GT = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
LT = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
#: Burn rates of the availability error budget (Google SRE workbook): 1 h fast, 6 h slow.
BURN_RATES = {"fast": (1, 14.4), "slow": (6, 6.0)}


def _rule_period(rule: Rule, metrics_interval_seconds: int) -> int:
    """The alarm period of ``rule`` (sizing.rollout_alarms.rule_period, the figure the simulator's
    alarm replay uses): no shorter than the metric is published (the container's interval rounded
    up to whole minutes; SageMaker's own metrics: a minute), no longer than the rule's window; the
    whole window for counts "in the window" and SLO windows (one datapoint)."""
    published = metrics_interval_seconds if rule.metric in mc.BY_NAME else 60
    return rule_period(rule.window_s, published, count=rule.statistic == "Sum")


class Monitoring(Construct):
    """``topic``, ``alarms`` (by ``<variant>/<rule>`` or ``slo/<name>``), ``dashboard``.

    ``metrics_interval_seconds`` is how often the container publishes (engine section): no alarm
    period is shorter than that, rounded up to whole minutes. ``queue_step_variants``: the
    variants with a step scale-out policy on the queue depth (the queue-buildup alarm's text).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: EndpointRef,
        thresholds: MonitoringConfig,
        adapter_names: Sequence[str],
        metrics_interval_seconds: int,
        queue_step_variants: Collection[str] = (),
        emails: Sequence[str] = (),
        rollback_alarms: RollbackAlarms,
        key: kms.IKey,
        variant_names: Sequence[VariantName] = VARIANT_NAMES,
        idle_at_zero: bool = False,
        held_slos: Collection[str] = GATE_SLOS,
    ) -> None:
        """``variant_names``: the variants the endpoint has (the component shape has only
        ``primary``: a canary's alarms there would watch a variant that never exists, and its
        no-healthy-capacity alarm, breaching on missing data, would page forever).
        ``idle_at_zero``: the endpoint scales to zero, where no engine publishes by design, so
        the no-healthy-capacity alarm is not built (it would be in ALARM every idle hour); a
        request that finds nothing serving is the wake-from-zero alarm's
        (stacks/constructs/inference_components.py). ``held_slos``: the SLOs whose alarms are
        built (alarm_rules.variant_rules: the ones the fleet is sized to hold)."""
        super().__init__(scope, construct_id)
        self._endpoint = endpoint
        self.topic = self._encrypted_topic(key, emails)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self.critical: list[cloudwatch.Alarm] = [*rollback_alarms.all]
        for variant in variant_names:
            self._variant_alarms(
                variant,
                thresholds,
                adapter_names,
                metrics_interval_seconds,
                queue_step_scaling=variant in queue_step_variants,
                idle_at_zero=idle_at_zero,
                held_slos=held_slos,
            )
        self._slo_alarms(thresholds)
        self._notify(cw_actions.SnsAction(self.topic))
        self.dashboard = ServingDashboard(
            self,
            "Dashboard",
            endpoint=endpoint,
            adapter_names=adapter_names,
            alarms=[*rollback_alarms.all, *self.alarms.values()],
            per_gpu_period_seconds=thresholds.metrics_path.publish_frequency_seconds
            if thresholds.metrics_path.enhanced_metrics
            else None,
        )

    def _encrypted_topic(self, key: kms.IKey, emails: Sequence[str]) -> sns.Topic:
        """The alarms' topic, encrypted with ``key`` (which CloudWatch may use to publish), with
        an email subscription per address."""
        topic = sns.Topic(
            self,
            "Topic",
            master_key=key,
            enforce_ssl=True,
            display_name=self._endpoint.endpoint_name,
        )
        # CloudWatch publishes to the KMS-encrypted topic: it needs the key.
        key.grant(
            iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*"
        )
        for email in emails:
            topic.add_subscription(subs.EmailSubscription(email))
        return topic

    def _variant_alarms(
        self,
        variant: VariantName,
        thresholds: MonitoringConfig,
        adapter_names: Sequence[str],
        metrics_interval_seconds: int,
        *,
        queue_step_scaling: bool,
        idle_at_zero: bool = False,
        held_slos: Collection[str] = GATE_SLOS,
    ) -> None:
        """An alarm per rule of ``variant`` (alarm_rules.variant_rules), ``<variant>/<rule>``;
        at scale to zero none of those that breach on missing data (``__init__``)."""
        rules = variant_rules(
            thresholds, adapter_names, queue_step_scaling=queue_step_scaling, slos=held_slos
        )
        for rule in rules:
            if idle_at_zero and rule.missing == cloudwatch.TreatMissingData.BREACHING:
                continue
            period = _rule_period(rule, metrics_interval_seconds)
            metric = self._endpoint.metric(
                variant,
                rule.metric,
                statistic=rule.statistic,
                period=Duration.seconds(period),
                adapter=rule.adapter,
            )
            self._alarm(
                f"{variant}/{rule.key}",
                metric,
                rule.threshold,
                rule.above,
                max(1, rule.window_s // period),
                rule.critical,
                rule.why,
                rule.missing,
            )

    def _slo_alarms(self, thresholds: MonitoringConfig) -> None:
        """The availability SLO's error-budget burn alarms (:data:`BURN_RATES`) and the 24 h
        5XX rate, endpoint-wide: ``slo/<name>``."""
        for name, (hours, rate) in BURN_RATES.items():
            budget = round(100 - thresholds.slo_availability_percent, 6)
            self._alarm(
                f"slo/availability-{name}-burn",
                self._error_ratio(hours * 3600, True),
                round(budget * rate, 6),
                True,
                1,
                name == "fast",
                f"SLO availability {thresholds.slo_availability_percent}%: "
                f"error budget burning {rate}x over {hours} h",
                None,
            )
        self._alarm(
            "slo/error-rate-24h",
            self._error_ratio(86400, False),
            thresholds.slo_error_rate_percent,
            True,
            1,
            True,
            f"SLO: 5XX rate above {thresholds.slo_error_rate_percent}% over 24 h",
            None,
        )

    def _notify(self, action: cw_actions.SnsAction) -> None:
        """Critical alarms (the rollback alarms among them) notify on alarm and on OK, the others
        on alarm only."""
        for alarm in self.critical:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        for alarm in self.alarms.values():
            if alarm not in self.critical:
                alarm.add_alarm_action(action)

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        above: bool,
        evaluations: int,
        critical: bool,
        why: str,
        missing: cloudwatch.TreatMissingData | None,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            "".join(p.capitalize() for p in name.replace("/", "-").split("-")),
            metric=metric,
            threshold=threshold,
            comparison_operator=GT if above else LT,
            evaluation_periods=evaluations,
            treat_missing_data=missing or cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"[{'CRITICAL' if critical else 'WARNING'}] {name}: {why}",
        )
        self.alarms[name] = alarm
        if critical:
            self.critical.append(alarm)

    def _error_ratio(self, seconds: int, with_rejections: bool) -> cloudwatch.MathExpression:
        """Endpoint-wide percentage of failed invocations (5XX, plus 429s for availability)."""
        period = Duration.seconds(seconds)
        using: dict[str, cloudwatch.IMetric] = {}
        for v in VARIANT_NAMES:
            for prefix, name in (
                ("i", "Invocations"),
                ("e", "Invocation5XXErrors"),
                ("r", mc.ADMISSION_REJECTIONS.name),
            ):
                if prefix != "r" or with_rejections:
                    using[f"{prefix}{v}"] = self._endpoint.metric(
                        v, name, statistic="Sum", period=period
                    )
        total = "+".join(f"FILL({k},0)" for k in using if k.startswith("i"))
        bad = "+".join(f"FILL({k},0)" for k in using if not k.startswith("i"))
        return cloudwatch.MathExpression(
            expression=f"IF(({total}) > 0, 100*({bad})/({total}), 0)",
            using_metrics=using,
            period=period,
            label="failed invocations (%)",
        )
