"""The fake account's inference components, their invocations and CloudWatch's view of them (a
part of :class:`tests.infra.fake_account.Account`; issue 45).

- SageMaker: CreateInferenceComponent, UpdateInferenceComponent, DeleteInferenceComponent and
  DescribeInferenceComponent, each request refused as SageMaker refuses it
  (tests/sagemaker_refusals.py ``component_refusal``: the service model's constraints, then the
  documented rules: an adapter needs its base, a name exists once, a component changes only when
  settled). A component is ``Creating`` for :data:`CREATE_SECONDS`, ``Updating`` for
  :data:`UPDATE_SECONDS`, ``Deleting`` for :data:`DELETE_SECONDS` of the account's clock, then
  InService (or Failed, for an artifact in :attr:`ComponentsMixin.unloadable` and for an adapter
  whose ``ArtifactUrl`` is not a ``.tar.gz``: the API reference's InferenceComponentContainer-
  Specification says it "must point to a single gzip compressed tar archive (.tar.gz suffix)";
  AWS does not say whether the call refuses another URL or the copy fails to load it, so the
  fake takes the call and fails the load, the later of the two) or gone.
- SageMaker runtime: InvokeEndpoint naming a component answers from the version it runs: an
  artifact in :attr:`ComponentsMixin.bad_artifacts` answers a model error (the container's 5XX,
  ModelError), the others 200; each invocation is counted for CloudWatch at the account's time.
- CloudWatch: GetMetricData sums AWS/SageMaker ``Invocations`` and ``Invocation5XXErrors`` of a
  component over the window asked; DescribeAlarms answers :attr:`ComponentsMixin.alarms_at`:
  an alarm is in ALARM from the time given there, OK before.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

from ..sagemaker_refusals import component_refusal

#: How long each component change takes on the account's clock (the fake's figures, not AWS's).
CREATE_SECONDS = 180
UPDATE_SECONDS = 60
DELETE_SECONDS = 30
SETTLING = {"Creating": "InService", "Updating": "InService", "Deleting": None}


class ComponentsMixin:
    """State and handlers (module docstring); the account calls :meth:`_init_components`."""

    now: float
    cfg: Any

    def _init_components(self) -> None:
        #: ``{name: {"endpoint", "base", "artifact", "spec", "status", "settles_at"}}``.
        self.components: dict[str, dict[str, Any]] = {}
        #: Artifacts whose component fails to load (Failed) / whose answers are 5XX.
        self.unloadable: set[str] = set()
        self.bad_artifacts: set[str] = set()
        #: ``{component: [(time, ok)]}``: every invocation, for GetMetricData.
        self.invocations: dict[str, list[tuple[float, bool]]] = {}
        #: ``{alarm name: time it goes to ALARM (None: never)}``.
        self.alarms_at: dict[str, float | None] = {}

    def seed_component(
        self,
        name: str,
        *,
        artifact: str | None = None,
        base: str | None = None,
        model: str | None = None,
    ) -> None:
        """A component the stacks created (InService): the base (``model``) or an adapter."""
        spec: dict[str, Any] = {}
        if model is not None:
            spec.update(
                ModelName=model,
                ComputeResourceRequirements={
                    "NumberOfAcceleratorDevicesRequired": 1,
                    "MinMemoryRequiredInMb": 1024,
                },
            )
        if base is not None:
            spec["BaseInferenceComponentName"] = base
        self.components[name] = {
            "endpoint": self.cfg.endpoint_name,
            "base": base,
            "artifact": artifact,
            "spec": spec,
            "status": "InService",
            "settles_at": self.now,
        }

    def _settle(self) -> None:
        for name, c in list(self.components.items()):
            if c["status"] in SETTLING and self.now >= c["settles_at"]:
                if c["status"] == "Deleting":
                    del self.components[name]
                else:
                    artifact = c["artifact"]
                    failed = artifact in self.unloadable or not (
                        artifact is None or artifact.endswith(".tar.gz")
                    )
                    c["status"] = "Failed" if failed else "InService"

    def _component_call(self, operation: str, p: dict[str, Any]) -> Any:
        from .fake_account import error

        self._settle()
        refused = component_refusal(operation, p, self.components, [self.cfg.endpoint_name])
        return error("ValidationException", refused) if refused else None

    def _sagemaker_CreateInferenceComponent(self, p: dict[str, Any]) -> Any:
        from .fake_account import arn

        refused = self._component_call("CreateInferenceComponent", p)
        if refused:
            return refused
        spec = p.get("Specification") or {}
        self.components[p["InferenceComponentName"]] = {
            "endpoint": p["EndpointName"],
            "base": spec.get("BaseInferenceComponentName"),
            "artifact": (spec.get("Container") or {}).get("ArtifactUrl"),
            "spec": spec,
            "status": "Creating",
            "settles_at": self.now + CREATE_SECONDS,
        }
        return {
            "InferenceComponentArn": arn(
                "sagemaker", "inference-component", p["InferenceComponentName"]
            )
        }

    def _sagemaker_UpdateInferenceComponent(self, p: dict[str, Any]) -> Any:
        from .fake_account import arn

        refused = self._component_call("UpdateInferenceComponent", p)
        if refused:
            return refused
        c = self.components[p["InferenceComponentName"]]
        spec = p.get("Specification")
        if spec is not None:
            c["spec"] = spec
            c["artifact"] = (spec.get("Container") or {}).get("ArtifactUrl", c["artifact"])
        c.update(status="Updating", settles_at=self.now + UPDATE_SECONDS)
        return {
            "InferenceComponentArn": arn(
                "sagemaker", "inference-component", p["InferenceComponentName"]
            )
        }

    def _sagemaker_DeleteInferenceComponent(self, p: dict[str, Any]) -> Any:
        refused = self._component_call("DeleteInferenceComponent", p)
        if refused:
            return refused
        c = self.components[p["InferenceComponentName"]]
        c.update(status="Deleting", settles_at=self.now + DELETE_SECONDS)
        return {}

    def _sagemaker_DescribeInferenceComponent(self, p: dict[str, Any]) -> Any:
        from .fake_account import arn, error

        self._settle()
        name = p["InferenceComponentName"]
        if name not in self.components:
            return error("ValidationException", f'Could not find inference component "{name}".')
        c, when = self.components[name], datetime.fromtimestamp(self.now, UTC)
        spec = {k: v for k, v in c["spec"].items() if k != "Container"}
        if c["artifact"] is not None:
            spec["Container"] = {"ArtifactUrl": c["artifact"]}
        return {
            "InferenceComponentName": name,
            "InferenceComponentArn": arn("sagemaker", "inference-component", name),
            "EndpointName": c["endpoint"],
            "EndpointArn": arn("sagemaker", "endpoint", c["endpoint"]),
            "Specification": spec,
            "InferenceComponentStatus": c["status"],
            "CreationTime": when,
            "LastModifiedTime": when,
        }

    def _sagemaker_runtime_InvokeEndpoint(self, p: dict[str, Any]) -> Any:
        from .fake_account import error

        self._settle()
        name = p.get("InferenceComponentName")
        c = self.components.get(name or "")
        if (
            p["EndpointName"] != self.cfg.endpoint_name
            or c is None
            or c["status"]
            not in (
                "InService",
                "Updating",
            )
        ):
            return error("ValidationException", f"Inference component {name} is not available.")
        ok = c["artifact"] not in self.bad_artifacts
        self.invocations.setdefault(str(name), []).append((self.now, ok))
        if not ok:
            return error("ModelError", "Received server error (500) from primary", 424)
        return {
            "Body": io.BytesIO(json.dumps({"text": "ok"}).encode()),
            "ContentType": "application/json",
        }

    def _cloudwatch_GetMetricData(self, p: dict[str, Any]) -> Any:
        start, end = p["StartTime"].timestamp(), p["EndTime"].timestamp()
        results = []
        for q in p["MetricDataQueries"]:
            metric = q["MetricStat"]["Metric"]
            (dim,) = metric["Dimensions"]
            seen = [ok for t, ok in self.invocations.get(dim["Value"], []) if start <= t <= end]
            count = len(seen) if metric["MetricName"] == "Invocations" else seen.count(False)
            results.append(
                {
                    "Id": q["Id"],
                    "Label": metric["MetricName"],
                    "StatusCode": "Complete",
                    "Timestamps": [datetime.fromtimestamp(end, UTC)],
                    "Values": [float(count)],
                }
            )
        return {"MetricDataResults": results}

    def _cloudwatch_DescribeAlarms(self, p: dict[str, Any]) -> Any:
        from .fake_account import ACCOUNT_ID, REGION

        alarms = []
        for name in p.get("AlarmNames", []):
            if name not in self.alarms_at:
                continue
            at = self.alarms_at[name]
            state = "ALARM" if at is not None and self.now >= at else "OK"
            alarms.append(
                {
                    "AlarmName": name,
                    "AlarmArn": f"arn:aws:cloudwatch:{REGION}:{ACCOUNT_ID}:alarm:{name}",
                    "StateValue": state,
                    "StateReason": f"injected {state}",
                }
            )
        return {"MetricAlarms": alarms}
