"""The controller's AWS clients, made once per Lambda instance and shared by its parts.

One object, so that every part (the record, the endpoint, the shadow stage, the executions, the
notifications) calls AWS through the same client, and a client replaced after construction (the
tests' Stubbers and fakes: ``controller.s3 = ...``) is the one every part uses from then on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import boto3

from . import probes


@dataclass
class Clients:
    sm: Any
    cw: Any
    sns: Any
    sfn: Any
    aas: Any
    s3: Any
    #: The shadow stage's probes (``probes``): no retries, short timeouts.
    runtime: Any
    #: The rollout record's DynamoDB table (``record.RolloutRecord``).
    table: Any

    @classmethod
    def create(cls, table_name: str, given: Mapping[str, Any]) -> Clients:
        """Each client from ``given`` by its boto3 service name, else a new one."""

        def client(name: str, **kw: Any) -> Any:
            return given.get(name) or boto3.client(name, **kw)

        ddb = given.get("dynamodb") or boto3.resource("dynamodb")
        return cls(
            sm=client("sagemaker"),
            cw=client("cloudwatch"),
            sns=client("sns"),
            sfn=client("stepfunctions"),
            aas=client("application-autoscaling"),
            s3=client("s3"),
            runtime=client("sagemaker-runtime", config=probes.RUNTIME_CONFIG),
            table=ddb.Table(table_name),
        )
