"""Shared moto world for the Lambda tests: an InService endpoint with primary/canary variants."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

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
        yield


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
                "InitialInstanceCount": 1,
                "InstanceType": "ml.g4dn.xlarge",  # moto knows no g5,
                "InitialVariantWeight": weight,
            }
            for variant, weight in (("primary", 95.0), ("canary", 5.0))
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="cfg-1")
    return ENDPOINT


def set_endpoint_status(status: str) -> None:
    """Move the fake endpoint into another state (moto keeps endpoints InService)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION].endpoints[ENDPOINT].endpoint_status = status


def weights(name: str = ENDPOINT) -> dict[str, float]:
    sm = boto3.client("sagemaker", region_name=REGION)
    desc = sm.describe_endpoint(EndpointName=name)
    return {v["VariantName"]: v["CurrentWeight"] for v in desc["ProductionVariants"]}
