"""Deploy smoke gate: a custom resource that fails the deployment if the endpoint does not answer.

The resource depends on the endpoint and carries the endpoint config name among its properties,
so it runs after every Create and after every Update that changes the endpoint (a new config),
and CloudFormation rolls the stack back when it fails. ``gate.enabled: false`` creates nothing
(``enabled`` is then False and the attributes are None).

The gate is an asynchronous Provider-framework resource (AWS CDK ``custom_resources`` README,
"Asynchronous Providers: isComplete"; "Timeouts": a user handler should stay below 14 minutes,
the framework's own functions stop at Lambda's 15, and longer work belongs in ``is_complete``
with ``query_interval``/``total_timeout``). ``on_event`` only starts the check; ``is_complete``
is polled by the framework's waiter state machine every :func:`query_interval_seconds` until the
gate's ``timeout_seconds`` (``total_timeout``, at most 1 hour per ``ProviderProps``), and each
poll is one bounded round whose Lambda timeout is :func:`round_timeout_seconds`. How the two
handlers answer the framework: lambdas/smoke_gate/handler.py.

Both functions share one role, one log group and one asset (the ``is_complete`` function runs
``smoke_gate.handler.is_complete``); the framework's three functions write to that log group
too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aws_cdk import CfnResource, CustomResource, Duration, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from cdk_nag import NagSuppressions
from constructs import Construct

from lambdas.smoke_gate.checks import call_count
from lambdas.smoke_gate.handler import query_interval_seconds, round_timeout_seconds
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.python_lambda import (
    lambda_role,
    python_function,
    tidy_function,
)
from typed_config import SmokeGateConfig

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "smoke_gate"
#: on_event validates the event and returns: no AWS call, seconds at most.
ON_EVENT_TIMEOUT = Duration.seconds(30)
#: The Provider framework's functions, by their construct ids under the Provider.
FRAMEWORK_FUNCTIONS = ("framework-onEvent", "framework-isComplete", "framework-onTimeout")
#: The Provider's waiter state machine is one Task that calls is_complete until it answers.
#: It is a Standard workflow (no StateMachineType), whose execution history Step Functions
#: keeps for 90 days (Step Functions developer guide, "Execution guarantees").
WAITER_WHY = (
    "The Provider framework's waiter is one Task that calls the gate's is_complete function "
    "until it answers; "
)
WAITER_NAG_SUPPRESSIONS = [
    {
        "id": "AwsSolutions-SF1",
        "reason": WAITER_WHY + "every call's outcome and the gate's failure reason are logged by "
        "the gate's and the framework's functions in the gate's log group, and Step Functions "
        "keeps each execution's event history for 90 days.",
    },
    {
        "id": "AwsSolutions-SF2",
        "reason": WAITER_WHY + "a trace would show one Lambda call per poll. The Provider has no "
        "tracing option for it.",
    },
]


class SmokeGate(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        gate: SmokeGateConfig,
        endpoint: sagemaker.CfnEndpoint,
        endpoint_name: str,
        variant_names: Sequence[str],
        adapter_names: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.enabled = gate.enabled
        self.function: lambda_.Function | None = None
        self.is_complete_function: lambda_.Function | None = None
        self.provider: cr.Provider | None = None
        self.resource: CustomResource | None = None
        if not gate.enabled:
            return
        self.role, log_group = lambda_role(
            self,
            description=f"Smoke gate for {endpoint_name}: describe and invoke this endpoint only",
        )
        EndpointRef.of(self, endpoint_name).grant_invoke(self.role)
        self.function = python_function(
            self,
            package_dir=PACKAGE_DIR,
            role=self.role,
            log_group=log_group,
            timeout=ON_EVENT_TIMEOUT,
            description=f"Deploy smoke gate for {endpoint_name}: starts the check",
        )
        calls = call_count(len(variant_names), len(adapter_names))
        self.is_complete_function = python_function(
            Construct(self, "IsComplete"),
            package_dir=PACKAGE_DIR,
            role=self.role,
            log_group=log_group,
            timeout=Duration.seconds(round_timeout_seconds(calls)),
            description=f"Deploy smoke gate for {endpoint_name}: one round (every adapter + "
            "streaming)",
            handler="handler.is_complete",
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.function,
            is_complete_handler=self.is_complete_function,
            query_interval=Duration.seconds(query_interval_seconds(gate.timeout_seconds)),
            total_timeout=Duration.seconds(gate.timeout_seconds),
            log_group=log_group,
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type="Custom::EndpointSmokeGate",
            properties={
                "EndpointName": endpoint_name,
                # A new endpoint config (any model/variant change) re-runs the gate.
                "EndpointConfigName": endpoint.endpoint_config_name,
                "Variants": list(variant_names),
                "Adapters": list(adapter_names),
                "Prompt": gate.prompt,
                "MaxTokens": gate.max_tokens,
                "TimeoutSeconds": gate.timeout_seconds,
            },
        )
        self.resource.node.add_dependency(endpoint)
        for function in (self.function, self.is_complete_function):
            tidy_function(function, self.role)
        for name in FRAMEWORK_FUNCTIONS:
            framework = self.provider.node.find_child(name)
            tidy_function(framework, framework.node.find_child("ServiceRole"))
        self._waiter_after_its_policy_only()
        self._suppress_framework_findings()

    def _waiter_after_its_policy_only(self) -> None:
        """The waiter state machine depends on its role and the role's policy; the ``RoleArn``
        GetAtt already orders it after the role (cfn-lint W3005 flags the duplicate)."""
        assert self.provider is not None
        waiter = self.provider.node.find_child("waiter-state-machine")
        policy = waiter.node.find_child("Role").node.find_child("DefaultPolicy").node.default_child
        machine = waiter.node.find_child("Resource")
        assert isinstance(policy, CfnResource) and isinstance(machine, CfnResource)
        machine.add_override("DependsOn", [Stack.of(self).get_logical_id(policy)])

    def _suppress_framework_findings(self) -> None:
        assert self.provider is not None
        NagSuppressions.add_resource_suppressions(
            self.provider,
            [
                {
                    "id": "AwsSolutions-IAM4",
                    "reason": "CDK Provider framework functions: AWSLambdaBasicExecutionRole only "
                    "lets them write their own logs; their other permissions are invoking the "
                    "gate's two functions and starting the waiter state machine.",
                    "applies_to": [
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AWSLambdaBasicExecutionRole"
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "CDK Provider framework may invoke the gate's functions and their "
                    "versions (<function arn>:*), nothing else.",
                    "applies_to": [{"regex": "/^Resource::<[A-Za-z0-9]+\\.Arn>:\\*$/g"}],
                },
            ],
            apply_to_children=True,
        )
        NagSuppressions.add_resource_suppressions(
            self.provider.node.find_child("waiter-state-machine"),
            WAITER_NAG_SUPPRESSIONS,
            apply_to_children=True,
        )
