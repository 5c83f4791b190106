"""Shared moto world for the Lambda tests: an InService endpoint with primary/canary variants."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from moto import mock_aws

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from lambdas.canary_controller import handler as ctl  # noqa: E402 - after the path setup
from lambdas.canary_controller import names, rules  # noqa: E402
from lambdas.canary_controller.state import HistoryEntry, Intent, RolloutState  # noqa: E402
from sizing.rollout_plan import build_plan  # noqa: E402
from tests.fixtures import config_fixture  # noqa: E402
from tests.lambdas.aws_calls import AWS_CALLS  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    AWS_CALLS.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    AWS_CALLS.uninstall()


REGION = "us-east-1"
ENDPOINT = "mangaassist-vllm-test"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        _partial_variant_updates(monkeypatch)
        yield


def _partial_variant_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's UpdateEndpointWeightsAndCapacities writes None into a field the request leaves
    out; SageMaker leaves it unchanged (DesiredWeightAndCapacity: both fields optional)."""
    from moto.sagemaker.models import SageMakerModelBackend

    real = SageMakerModelBackend.update_endpoint_weights_and_capacities

    def update(self: Any, endpoint_name: str, desired_weights_and_capacities: Any) -> str:
        endpoint = self.endpoints.get(endpoint_name)
        if endpoint is not None:
            current = {v["VariantName"]: v for v in endpoint.production_variants}
            filled = []
            for item in desired_weights_and_capacities:
                v = current.get(item.get("VariantName"), {})
                filled.append(
                    {
                        "DesiredWeight": v.get("CurrentWeight"),
                        "DesiredInstanceCount": v.get("CurrentInstanceCount"),
                        **item,
                    }
                )
            desired_weights_and_capacities = filled
        return real(self, endpoint_name, desired_weights_and_capacities)

    monkeypatch.setattr(SageMakerModelBackend, "update_endpoint_weights_and_capacities", update)


@pytest.fixture
def endpoint(aws: Any) -> str:
    sm = boto3.client("sagemaker", region_name=REGION)
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:1"
    role = "arn:aws:iam::123456789012:role/sm"
    for variant in ("primary", "canary"):
        sm.create_model(
            ModelName=f"m-{variant}", ExecutionRoleArn=role, PrimaryContainer={"Image": image}
        )
    sm.create_endpoint_config(
        EndpointConfigName="cfg-1",
        ProductionVariants=[
            {
                "VariantName": variant,
                "ModelName": f"m-{variant}",
                "InitialInstanceCount": count,
                "InstanceType": "ml.g4dn.xlarge",  # moto knows no g5,
                "InitialVariantWeight": weight,
            }
            for variant, weight, count in (("primary", 95.0, PRIMARY_COUNT), ("canary", 5.0, 1))
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="cfg-1")
    return ENDPOINT


def _backend() -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION]


def validation_error(message: str = "Cannot update in-progress endpoint") -> ClientError:
    """What SageMaker answers UpdateEndpointWeightsAndCapacities while the endpoint is Updating."""
    return ClientError(
        {"Error": {"Code": "ValidationException", "Message": message}},
        "UpdateEndpointWeightsAndCapacities",
    )


def refuse_while_updating(client: Any) -> list[dict[str, Any]]:
    """Patch ``client.update_endpoint_weights_and_capacities`` to raise ValidationException, as
    SageMaker does, whenever the (moto) endpoint is not InService; returns the refused calls."""
    real = client.update_endpoint_weights_and_capacities
    refused: list[dict[str, Any]] = []

    def update(**kwargs: Any) -> Any:
        if _backend().endpoints[kwargs["EndpointName"]].endpoint_status != "InService":
            refused.append(kwargs)
            raise validation_error()
        return real(**kwargs)

    client.update_endpoint_weights_and_capacities = update
    return refused


def set_endpoint_status(status: str) -> None:
    """Move the fake endpoint into another state (moto keeps endpoints InService)."""
    _backend().endpoints[ENDPOINT].endpoint_status = status


def instances(name: str = ENDPOINT) -> dict[str, int]:
    sm = boto3.client("sagemaker", region_name=REGION)
    desc = sm.describe_endpoint(EndpointName=name)
    return {v["VariantName"]: v["CurrentInstanceCount"] for v in desc["ProductionVariants"]}


def canary_bounds() -> tuple[int, int] | None:
    aas = boto3.client("application-autoscaling", region_name=REGION)
    found = aas.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[f"endpoint/{ENDPOINT}/variant/canary"]
    )["ScalableTargets"]
    return (found[0]["MinCapacity"], found[0]["MaxCapacity"]) if found else None


def weights(name: str = ENDPOINT) -> dict[str, float]:
    sm = boto3.client("sagemaker", region_name=REGION)
    desc = sm.describe_endpoint(EndpointName=name)
    return {v["VariantName"]: v["CurrentWeight"] for v in desc["ProductionVariants"]}


# ------------------------------------------------------------- canary controller world

STEPS = (5, 25, 50, 75, 100)
BAKE = 3600
CHECK = 300
PRIMARY_COUNT = 4
MIN_INVOCATIONS = 100
#: prod-like plan: primary 2..8, canary 1..2, same instance type.
PLAN = build_plan(
    STEPS, primary_min=2, primary_max=8, canary_min=1, canary_max=2,
    primary_concurrency=81, canary_concurrency=81,
)  # fmt: skip
RULES = rules.Rules(
    steps=STEPS, bake_seconds=BAKE, check_seconds=CHECK,
    evidence=rules.EvidenceRules(MIN_INVOCATIONS, max_error_rate_increase_percent=0.5),
    evidence_timeout_seconds=BAKE, plan=PLAN,
)  # fmt: skip
ALARMS = ("canary-5xx", "canary-model-latency", "canary-ttft")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        """The controller's backoff: time passes on this clock, not on the wall's."""
        self.now += seconds


@dataclass
class World:
    controller: ctl.Controller
    clock: Clock
    queue_url: str
    state_machine_arn: str
    #: The shadow stage's ground as SageMaker and CloudWatch show it (shadow_world.Ground).
    shadow_ground: Any = None
    #: SageMaker Runtime as the shadow stage's probes see it (shadow_world.Runtime).
    runtime: Any = None

    def run(self, event: dict[str, Any]) -> dict[str, Any]:
        return ctl.handler(event, None, controller=self.controller)

    def tick(self, rollout_id: str, seq: int) -> dict[str, Any]:
        return self.run(
            {"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": rollout_id, "seq": seq}
        )

    def start(self, rollout_id: str = "r1") -> dict[str, Any]:
        return self.run(
            {"action": "start", "endpoint_name": ENDPOINT, "rollout_id": rollout_id,
             "requested_by": "alice"}
        )  # fmt: skip

    def traffic(
        self,
        canary: float = 1000,
        primary: float = 19000,
        canary_5xx: float = 0,
        primary_5xx: float = 0,
    ) -> None:
        """Publish one minute of AWS/SageMaker invocation metrics just before now."""
        when = datetime.fromtimestamp(self.clock.now - 30, UTC)
        data = [
            (variant, metric, value)
            for variant, inv, err in (("canary", canary, canary_5xx),
                                      ("primary", primary, primary_5xx))
            for metric, value in (("Invocations", inv), ("Invocation5XXErrors", err))
        ]  # fmt: skip
        boto3.client("cloudwatch", region_name=REGION).put_metric_data(
            Namespace="AWS/SageMaker",
            MetricData=[
                {"MetricName": metric, "Timestamp": when, "Value": value,
                 "Dimensions": [{"Name": "EndpointName", "Value": ENDPOINT},
                                {"Name": "VariantName", "Value": variant}]}
                for variant, metric, value in data
            ],
        )  # fmt: skip

    def executions(self) -> list[dict[str, Any]]:
        """The rollout state machine's executions (each start and rollback driver is one)."""
        sfn = boto3.client("stepfunctions", region_name=REGION)
        found = sfn.list_executions(stateMachineArn=self.state_machine_arn)["executions"]
        return list(found)

    def notifications(self) -> list[dict[str, Any]]:
        sqs = boto3.client("sqs", region_name=REGION)
        got = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        return [json.loads(m["Body"]) for m in got.get("Messages", [])]


def set_alarm(name: str, state: str, reason: str = "test") -> None:
    boto3.client("cloudwatch", region_name=REGION).set_alarm_state(
        AlarmName=name, StateValue=state, StateReason=reason
    )


@pytest.fixture
def world(endpoint: str) -> World:
    cw = boto3.client("cloudwatch", region_name=REGION)
    for name in ALARMS:
        cw.put_metric_alarm(
            AlarmName=name, Namespace="AWS/SageMaker", MetricName="Invocation5XXErrors",
            Dimensions=[{"Name": "EndpointName", "Value": ENDPOINT},
                        {"Name": "VariantName", "Value": "canary"}],
            Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=5,
            ComparisonOperator="GreaterThanThreshold",
        )  # fmt: skip
        set_alarm(name, "OK")
    ddb = boto3.client("dynamodb", region_name=REGION)
    ddb.create_table(
        TableName="rollout-state",
        KeySchema=[{"AttributeName": "endpoint_name", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "endpoint_name", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    sns = boto3.client("sns", region_name=REGION)
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"],
        Attributes={"RawMessageDelivery": "true"},
    )  # fmt: skip
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name=f"{ENDPOINT}-canary-rollout",
        definition=json.dumps({"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    boto3.client("application-autoscaling", region_name=REGION).register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=f"endpoint/{ENDPOINT}/variant/canary",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", MinCapacity=1, MaxCapacity=2,
    )  # fmt: skip
    settings = ctl.Settings(
        endpoint_name=ENDPOINT, table_name="rollout-state", topic_arn=topic,
        state_machine_arn=machine, alarm_names=ALARMS, rules=RULES,
    )  # fmt: skip
    clock = Clock()
    controller = ctl.Controller(settings, clock=clock, sleep=clock.sleep)
    _typed_records_only(controller)
    return World(controller, clock, queue_url, machine)


def _typed_records_only(controller: ctl.Controller) -> None:
    """Every record the controller writes in these tests has only the keys its type names
    (state.RolloutState, with its history entries and intent): mypy checks the code that builds
    records, this checks the records themselves."""
    real = controller._save
    known = RolloutState.__required_keys__ | RolloutState.__optional_keys__

    def save(state: Any, *, expect_seq: int | None) -> None:
        assert not set(state) - known, f"not in RolloutState: {sorted(set(state) - known)}"
        for entry in state.get("history", []):
            assert set(entry) == HistoryEntry.__required_keys__, entry
        if state.get("intent") is not None:
            assert set(state["intent"]) == Intent.__required_keys__, state["intent"]
        real(state, expect_seq=expect_seq)

    controller._save = save


# ------------------------------------------------------------- the state machine's loop


def advance(world: World, result: dict[str, Any], rollout_id: str = "r1") -> dict[str, Any]:
    """One loop turn of the state machine: wait what the controller asked, traffic flows, tick."""
    world.clock.now += result["wait_seconds"]
    world.traffic()
    return world.tick(rollout_id, result["seq"])


def to_percent(
    world: World, result: dict[str, Any], percent: int, rollout_id: str = "r1"
) -> dict[str, Any]:
    while not (result["last_decision"] == "shift" and result["current_percent"] == percent):
        assert not result["done"], result
        result = advance(world, result, rollout_id)
    return result


def walk(world: World, result: dict[str, Any]) -> dict[str, Any]:
    """Follow the loop until the rollout ends; record the canary's instances at every shift."""
    seen: list[tuple[int, int]] = []
    while not result["done"]:
        before = instances()["canary"]
        result = advance(world, result)
        if result["last_decision"] == "shift":
            pct = result["current_percent"]
            assert weights() == {"canary": pct, "primary": 100 - pct}
            # Capacity came first: the instances were already there before the weight moved.
            assert instances()["canary"] == before
            seen.append((pct, before))
    result["walked"] = seen
    return result


def race(world: World, on_call: int, action: Any) -> None:
    """Run ``action`` just before the ``on_call``-th DynamoDB write reaches the table."""
    table, real, count = world.controller.table, world.controller.table.put_item, [0]

    def put_item(**kw: Any) -> Any:
        count[0] += 1
        if count[0] == on_call:
            table.put_item = real
            action()
        return real(**kw)

    table.put_item = put_item


def write_test_config(root: Path) -> Path:
    """``root/config/test.yaml``: prod.yaml with env ``test`` and the world's endpoint name."""
    raw = yaml.safe_load((config_fixture("prod")).read_text())
    raw.update(env="test", endpoint_name=ENDPOINT)
    # these deploys are about rollouts, not images: CDK may build (prod itself refuses it)
    raw["image"]["deploy_builds"] = True
    (root / "config").mkdir(exist_ok=True)
    path = root / "config" / "test.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class FakeLambda:
    """Lambda's Invoke on the real controller handler, in its real response format: an
    unhandled error comes back as FunctionError with errorType/errorMessage."""

    def __init__(self, w: World) -> None:
        self.world, self.calls = w, []  # type: ignore[var-annotated]

    def invoke(self, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        assert FunctionName == names.controller_function_name(ENDPOINT)
        assert InvocationType == "RequestResponse"
        event = json.loads(Payload)
        self.calls.append(event)
        try:
            body: Any = ctl.handler(event, None, controller=self.world.controller)
            extra = {}
        except Exception as exc:  # what the Lambda runtime reports for an unhandled error
            body = {"errorType": type(exc).__name__, "errorMessage": str(exc)}
            extra = {"FunctionError": "Unhandled"}
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(body).encode()), **extra}
