"""The canary rollout's state machine: ``tick -> wait -> tick`` until the rollout ends.

It only keeps time; the controller Lambda decides. Transient task failures are retried with the
same sequence number (a redelivery to the controller); a persistent one asks the Lambda to roll
back *this* rollout (the event carries ``rollout_id``, so a stale execution cannot roll back a
newer rollout), then keeps looping: the ticks drive the rollback (weight 0 until it lands, then
the canary's bounds) to ROLLED_BACK. Only if the rollback call itself keeps failing does the
execution fail. Built as children of the CanaryController (same construct ids).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from lambdas.canary_controller.names import COMPLETED, ROLLED_BACK, SUPERSEDED
from stacks.constructs.python_lambda import decision_log_group


def rollout_state_machine(
    scope: Construct,
    *,
    function: lambda_.IFunction,
    endpoint_name: str,
    state_machine_name: str,
) -> sfn.StateMachine:
    def invoke(name: str, payload: dict[str, object]) -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke(
            scope,
            name,
            lambda_function=function,
            payload=sfn.TaskInput.from_object(payload),
            payload_response_only=True,
        )

    tick = invoke(
        "Tick",
        {
            "action": "tick",
            "endpoint_name": sfn.JsonPath.string_at("$.endpoint_name"),
            "rollout_id": sfn.JsonPath.string_at("$.rollout_id"),
            "seq": sfn.JsonPath.number_at("$.seq"),
        },
    )
    rollback = invoke(
        "RollbackOnError",
        {
            "action": "rollback",
            "endpoint_name": endpoint_name,
            "rollout_id": sfn.JsonPath.string_at("$.rollout_id"),
            "reason": sfn.JsonPath.format(
                "controller error, rolled back: {}", sfn.JsonPath.string_at("$.error.Cause")
            ),
            "requested_by": "state-machine",
        },
    )
    rollback.add_retry(
        errors=["States.TaskFailed", "States.Timeout"],
        interval=Duration.seconds(30),
        max_attempts=6,
        backoff_rate=2,
    )
    rollback.add_catch(
        sfn.Fail(scope, "ControllerFailed", error="CanaryControllerError"), result_path="$.error"
    )
    # Transient failures (throttling, a timeout) are retried with the same seq, which the
    # controller treats as a redelivery; only a persistent failure rolls back.
    tick.add_retry(
        errors=["States.TaskFailed", "States.Timeout"],
        interval=Duration.seconds(20),
        max_attempts=3,
        backoff_rate=2,
    )
    tick.add_catch(rollback, result_path="$.error")
    wait = sfn.Wait(scope, "Bake", time=sfn.WaitTime.seconds_path("$.wait_seconds"))
    wait.next(tick)
    done = (
        sfn.Choice(scope, "Done?")
        .when(sfn.Condition.string_equals("$.status", COMPLETED), sfn.Succeed(scope, "Completed"))
        .when(
            sfn.Condition.string_equals("$.status", SUPERSEDED),
            sfn.Succeed(scope, "Superseded", comment="a newer rollout owns the endpoint"),
        )
        .when(
            sfn.Condition.string_equals("$.status", ROLLED_BACK),
            sfn.Fail(scope, "RolledBack", error="CanaryRolledBack", cause_path="$.last_reason"),
        )
        .when(
            sfn.Condition.boolean_equals("$.done", True),
            sfn.Fail(scope, "Abandoned", error="CanaryAbandoned", cause_path="$.last_reason"),
        )
        .otherwise(wait)
    )
    rollback.next(done)
    rollout_logs = decision_log_group(scope, "RolloutLogs")
    return sfn.StateMachine(
        scope,
        "Rollout",
        state_machine_name=state_machine_name,
        definition_body=sfn.DefinitionBody.from_chainable(tick.next(done)),
        timeout=Duration.days(30),
        tracing_enabled=True,
        logs=sfn.LogOptions(destination=rollout_logs, level=sfn.LogLevel.ALL),
    )
