"""Issue 20 item 3.2, the construct: the EventBridge rule on the rollout state machine's ended
executions, its Lambda permission, the loop count and the continuation, and the capacity timeout
handed to the controller (same test stack as test_constructs.py).

AWS behaviour relied on: Step Functions sends "Step Functions Execution Status Change" events
(``source`` aws.states; ``detail.stateMachineArn``, ``detail.status``, ``detail.executionArn``,
``detail.name``) to the default event bus (EventBridge events reference, AWS Step Functions
events); an EventBridge rule invokes a Lambda function only if the function's resource policy lets
events.amazonaws.com invoke it for that rule (EventBridge user guide, "Using resource-based
policies for Amazon EventBridge": Lambda permissions). An execution's history holds at most 25,000
events (Step Functions service quotas); each state adds its Entered/Exited events and each Task
attempt its TaskScheduled/TaskStarted/TaskSucceeded|TaskFailed (HistoryEvent types, Step
Functions API reference).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from lambdas.canary_controller.names import EXECUTION_ENDED, EXECUTION_ENDED_STATUSES
from sizing.fit_checks import load_config
from sizing.ready_bound import rollout_waits
from stacks.constructs.rollout_state_machine import (
    EVENTS_PER_ITERATION,
    HISTORY_EVENT_LIMIT,
    ITERATIONS_PER_EXECUTION,
    LAMBDA_SERVICE_RETRIES,
    ROLLBACK_RETRIES,
    TICK_RETRIES,
)
from tests.fixtures import config_fixture
from tests.lambdas.test_constructs import build, controller_env, rollout_states

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Template:
    cfg = load_config(config_fixture("prod"), env="prod")
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    return Template.from_stack(build(app, "Prod", cfg))


def logical_id(template: Template, kind: str, props: dict[str, Any]) -> str:
    [found] = template.find_resources(kind, {"Properties": props})
    return str(found)


def controller_id(template: Template) -> str:
    return logical_id(
        template,
        "AWS::Lambda::Function",
        {"FunctionName": "mangaassist-vllm-prod-canary-controller"},
    )


def test_the_rule_sends_this_machines_ended_executions_to_the_controller(prod: Template) -> None:
    machine = logical_id(
        prod,
        "AWS::StepFunctions::StateMachine",
        {"StateMachineName": "mangaassist-vllm-prod-canary-rollout"},
    )
    prod.resource_count_is("AWS::Events::Rule", 1)
    prod.has_resource_properties(
        "AWS::Events::Rule",
        {
            "State": "ENABLED",
            "EventPattern": {
                "source": ["aws.states"],
                "detail-type": ["Step Functions Execution Status Change"],
                "detail": {
                    "stateMachineArn": [{"Ref": machine}],
                    "status": ["FAILED", "TIMED_OUT", "ABORTED"],
                },
            },
            "Targets": [
                Match.object_like(
                    {
                        "Arn": {"Fn::GetAtt": [controller_id(prod), "Arn"]},
                        "InputTransformer": Match.any_value(),
                    }
                )
            ],
        },
    )
    assert list(EXECUTION_ENDED_STATUSES) == ["FAILED", "TIMED_OUT", "ABORTED"]


def test_the_event_the_controller_gets_names_the_execution(prod: Template) -> None:
    [rule] = prod.find_resources("AWS::Events::Rule").values()
    transformer = rule["Properties"]["Targets"][0]["InputTransformer"]
    paths = transformer["InputPathsMap"]
    assert sorted(paths.values()) == ["$.detail.executionArn", "$.detail.name", "$.detail.status"]
    by_path = {v: k for k, v in paths.items()}
    template = transformer["InputTemplate"]
    for key, path in (("execution_arn", "$.detail.executionArn"),
                      ("execution_name", "$.detail.name"),
                      ("execution_status", "$.detail.status")):  # fmt: skip
        assert f'"{key}":<{by_path[path]}>' in template
    assert f'"action":"{EXECUTION_ENDED}"' in template
    assert '"endpoint_name":"mangaassist-vllm-prod"' in template


def test_events_may_invoke_the_controller_for_this_rule_only(prod: Template) -> None:
    rule = next(iter(prod.find_resources("AWS::Events::Rule")))
    prod.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "Principal": "events.amazonaws.com",
            "FunctionName": {"Fn::GetAtt": [controller_id(prod), "Arn"]},
            "SourceArn": {"Fn::GetAtt": [rule, "Arn"]},
        },
    )


def test_the_loop_counts_its_iterations_and_hands_on_before_the_history_limit(
    prod: Template,
) -> None:
    # One worst iteration: a Tick failing every attempt, RollbackOnError succeeding on its last,
    # the Done? choice and the Bake wait, each Task attempt counted at 4 events. The attempts are
    # read from the template: the first, plus every retrier's MaxAttempts (they count apart).
    states = rollout_states(prod)
    attempts = {
        name: 1 + sum(r["MaxAttempts"] for r in states[name]["Retry"])
        for name in ("Tick", "RollbackOnError")
    }
    assert (
        attempts
        == {
            "Tick": 1 + LAMBDA_SERVICE_RETRIES + TICK_RETRIES,
            "RollbackOnError": 1 + LAMBDA_SERVICE_RETRIES + ROLLBACK_RETRIES,
        }
        == {"Tick": 10, "RollbackOnError": 13}
    )
    assert EVENTS_PER_ITERATION == (2 + 4 * 10) + (2 + 4 * 13) + 2 + 2 == 100
    assert ITERATIONS_PER_EXECUTION == 200
    assert ITERATIONS_PER_EXECUTION * EVENTS_PER_ITERATION <= 0.8 * HISTORY_EVENT_LIMIT
    # A quiet iteration (9 events: Task 5, Choice 2, Wait 2) is far below that.
    assert states["Tick"]["Parameters"]["iteration.$"] == "States.MathAdd($.iteration, 1)"
    assert states["RollbackOnError"]["Parameters"]["iteration.$"] == "$.iteration"
    [hand_on] = [c for c in states["Done?"]["Choices"] if c.get("Next") == "HandOn"]
    assert hand_on["And"] == [
        {"Variable": "$.iteration", "IsPresent": True},
        {"Variable": "$.iteration", "NumericGreaterThanEquals": ITERATIONS_PER_EXECUTION},
    ]
    # ... after the rollout's end states, so an ended rollout ends its execution.
    nexts = [c["Next"] for c in states["Done?"]["Choices"]]
    assert nexts == ["Completed", "Superseded", "RolledBack", "Abandoned", "HandOn"]
    assert states["Done?"]["Default"] == "Bake"


def test_the_hand_on_starts_a_new_execution_and_ends_this_one(prod: Template) -> None:
    states = rollout_states(prod)
    params = states["HandOn"]["Parameters"]
    assert params["action"] == "continue" and params["execution_name.$"] == "$$.Execution.Name"
    assert (params["rollout_id.$"], params["seq.$"]) == ("$.rollout_id", "$.seq")
    assert states["HandOn"]["Next"] == "HandedOn?"
    # A hand-on that keeps failing goes back to the loop: this execution goes on.
    assert states["HandOn"]["Catch"][0]["Next"] == "Bake"
    handed = states["HandedOn?"]
    assert [c["Next"] for c in handed["Choices"]] == ["HandedOn", "Done?"]
    assert handed["Default"] == "Bake" and states["HandedOn"]["Type"] == "Succeed"


def test_the_capacity_timeout_reaches_the_controller(prod: Template) -> None:
    env = controller_env(prod)
    cfg = load_config(config_fixture("prod"), env="prod")
    assert env["CAPACITY_TIMEOUT_SECONDS"] == str(rollout_waits(cfg).capacity_timeout_seconds)
    assert json.loads(env["STEPS_PERCENT"]) == [5, 25, 50, 75, 100]
