"""The canary rollout's state machine: ``tick -> wait -> tick`` until the rollout ends, and the
EventBridge rule that tells the controller when one of its executions ended otherwise.

It only keeps time; the controller Lambda decides. Transient task failures are retried with the
same sequence number (a redelivery to the controller); a persistent one asks the Lambda to roll
back *this* rollout (the event carries ``rollout_id``, so a stale execution cannot roll back a
newer rollout), then keeps looping: the ticks drive the rollback (weight 0 until it lands, then
the canary's bounds) to ROLLED_BACK. Only if the rollback call itself keeps failing does the
execution fail. Built as children of the CanaryController (same construct ids).

Every way an execution ends is covered:

- Succeed: COMPLETED, SUPERSEDED, or handed on (below). Fail states (RolledBack, Abandoned) end
  an execution whose rollout already ended, notified by the controller.
- Failed otherwise (ControllerFailed: the rollback call kept failing; a runtime error), timed out,
  or stopped (StopExecution): :func:`execution_ended_rule` sends Step Functions' "Step Functions
  Execution Status Change" event (status FAILED, TIMED_OUT or ABORTED; EventBridge events
  reference, AWS Step Functions events: ``source`` aws.states, ``detail`` with ``executionArn``,
  ``stateMachineArn``, ``name``, ``status``) to the controller as ``execution-ended``; the
  controller rolls back with a new execution, or records FAILED (handler's docstring).
- Long rollouts continue as new executions: an execution's history holds at most 25,000 events
  (Step Functions service quotas, "Maximum execution history size"; the developer guide's
  "Continue long-running workflows" starts a new execution from a Task state). The loop counts its
  iterations (``$.iteration``, increased by ``States.MathAdd`` in each Tick's payload, echoed back
  by the controller) and after :data:`ITERATIONS_PER_EXECUTION` asks the controller to hand on
  (``continue``: StartExecution of this state machine at the recorded seq, the new name recorded);
  the old execution then succeeds (HandedOn). If the hand-on fails, it loops on and asks again.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from lambdas.canary_controller.names import (
    COMPLETED,
    CONTINUE,
    EXECUTION_ENDED,
    EXECUTION_ENDED_STATUSES,
    ROLLBACK,
    ROLLED_BACK,
    SUPERSEDED,
    TICK,
)
from stacks.constructs.python_lambda import decision_log_group

#: Retries of a failed Tick (same seq: a redelivery), then of the RollbackOnError call.
TICK_RETRIES, ROLLBACK_RETRIES = 3, 6
#: Each LambdaInvoke's own retrier (CDK's default ``retry_on_service_exceptions``): Lambda's
#: service errors (Lambda.ServiceException, ...) retried 6 times, 2 s doubling. Retriers count
#: apart, so errors that alternate between them get both counts.
LAMBDA_SERVICE_RETRIES = 6
#: Step Functions service quota: events in one execution's history.
HISTORY_EVENT_LIMIT = 25_000
#: History events of one Task attempt, at most: TaskScheduled, TaskStarted, TaskSubmitted (not
#: emitted by a request-response Lambda invoke; counted anyway), then TaskSucceeded, TaskFailed or
#: TaskTimedOut (HistoryEvent ``type``, Step Functions API reference).
EVENTS_PER_ATTEMPT = 4


def task_events(retries: int) -> int:
    """A Task state's events at most: TaskStateEntered, every attempt (the first, Lambda's
    service retries, ``retries`` of ours), TaskStateExited."""
    return 2 + (1 + LAMBDA_SERVICE_RETRIES + retries) * EVENTS_PER_ATTEMPT


#: One loop iteration at its worst: a Tick that fails every attempt (42 events), the
#: RollbackOnError call that succeeds on its last (54), the Done? Choice (ChoiceStateEntered and
#: Exited, 2) and the Bake Wait (WaitStateEntered and Exited, 2): 100 events. A quiet iteration
#: has 9 (Task 5, Choice 2, Wait 2).
EVENTS_PER_ITERATION = task_events(TICK_RETRIES) + task_events(ROLLBACK_RETRIES) + 2 + 2
#: Iterations before an execution hands the rollout on: worst-case iterations within 80 % of the
#: history limit (20,000 / 100 = 200; with prod's 5-minute check that is 16 h 40 min of loop, the
#: simulated prod rollout takes 68), the rest left for hand-on attempts that fail and loop on.
ITERATIONS_PER_EXECUTION = HISTORY_EVENT_LIMIT * 4 // 5 // EVENTS_PER_ITERATION


def rollout_state_machine(
    scope: Construct,
    *,
    function: lambda_.IFunction,
    endpoint_name: str,
    state_machine_name: str,
) -> sfn.StateMachine:
    """The loop ``Tick -> Done? -> Bake -> Tick``, with RollbackOnError behind a Tick that keeps
    failing and HandOn after :data:`ITERATIONS_PER_EXECUTION` (module docstring)."""
    tick = _tick(scope, function)
    rollback = _rollback_on_error(scope, function, endpoint_name)
    # Transient failures (throttling, a timeout) are retried with the same seq, which the
    # controller treats as a redelivery; only a persistent failure rolls back.
    _retry_transient(tick)
    tick.add_catch(rollback, result_path="$.error")
    wait = sfn.Wait(scope, "Bake", time=sfn.WaitTime.seconds_path("$.wait_seconds"))
    wait.next(tick)
    hand_on = _hand_on(scope, function, endpoint_name, wait)
    done = sfn.Choice(scope, "Done?")
    hand_on.next(_handed_on(scope, done=done, wait=wait))
    _branch_on_status(scope, done, hand_on=hand_on, wait=wait)
    rollback.next(done)
    # Step Functions adds a logging state machine's log group to the account's CloudWatch Logs
    # resource policy (5,120 characters) unless its name starts with /aws/vendedlogs/ (Step
    # Functions developer guide, "Avoiding Amazon CloudWatch Logs resource policy size
    # restrictions", https://docs.aws.amazon.com/step-functions/latest/dg/bp-cwl.html).
    rollout_logs = decision_log_group(
        scope, "RolloutLogs", name=f"/aws/vendedlogs/states/{state_machine_name}"
    )
    return sfn.StateMachine(
        scope,
        "Rollout",
        state_machine_name=state_machine_name,
        definition_body=sfn.DefinitionBody.from_chainable(tick.next(done)),
        timeout=Duration.days(30),
        tracing_enabled=True,
        logs=sfn.LogOptions(destination=rollout_logs, level=sfn.LogLevel.ALL),
    )


def _invoke(
    scope: Construct, function: lambda_.IFunction, name: str, payload: dict[str, object]
) -> tasks.LambdaInvoke:
    """A Task state ``name`` that calls the controller with ``payload`` and keeps its answer."""
    return tasks.LambdaInvoke(
        scope,
        name,
        lambda_function=function,
        payload=sfn.TaskInput.from_object(payload),
        payload_response_only=True,
    )


def _iteration() -> float:
    """The loop's iteration count in the state (``$.iteration``)."""
    return sfn.JsonPath.number_at("$.iteration")


def _retry_transient(task: tasks.LambdaInvoke) -> None:
    """``task`` retried :data:`TICK_RETRIES` times on a failure or a timeout (20 s, doubling)."""
    task.add_retry(
        errors=["States.TaskFailed", "States.Timeout"],
        interval=Duration.seconds(20),
        max_attempts=TICK_RETRIES,
        backoff_rate=2,
    )


def _tick(scope: Construct, function: lambda_.IFunction) -> tasks.LambdaInvoke:
    """Tick: the controller's next step of the rollout, the iteration counted up by one."""
    return _invoke(
        scope,
        function,
        "Tick",
        {
            "action": TICK,
            "endpoint_name": sfn.JsonPath.string_at("$.endpoint_name"),
            "rollout_id": sfn.JsonPath.string_at("$.rollout_id"),
            "seq": sfn.JsonPath.number_at("$.seq"),
            "iteration": sfn.JsonPath.math_add(_iteration(), 1),
        },
    )


def _rollback_on_error(
    scope: Construct, function: lambda_.IFunction, endpoint_name: str
) -> tasks.LambdaInvoke:
    """RollbackOnError: a Tick that kept failing asks the controller to roll *this* rollout
    back, retried :data:`ROLLBACK_RETRIES` times; if that too keeps failing, ControllerFailed."""
    rollback = _invoke(
        scope,
        function,
        "RollbackOnError",
        {
            "action": ROLLBACK,
            "endpoint_name": endpoint_name,
            "rollout_id": sfn.JsonPath.string_at("$.rollout_id"),
            "reason": sfn.JsonPath.format(
                "controller error, rolled back: {}", sfn.JsonPath.string_at("$.error.Cause")
            ),
            "requested_by": "state-machine",
            "iteration": _iteration(),
        },
    )
    rollback.add_retry(
        errors=["States.TaskFailed", "States.Timeout"],
        interval=Duration.seconds(30),
        max_attempts=ROLLBACK_RETRIES,
        backoff_rate=2,
    )
    rollback.add_catch(
        sfn.Fail(scope, "ControllerFailed", error="CanaryControllerError"), result_path="$.error"
    )
    return rollback


def _hand_on(
    scope: Construct, function: lambda_.IFunction, endpoint_name: str, wait: sfn.Wait
) -> tasks.LambdaInvoke:
    """HandOn: the controller starts a new execution at the recorded seq; if that fails, this
    execution goes on (``wait``) and asks again."""
    hand_on = _invoke(
        scope,
        function,
        "HandOn",
        {
            "action": CONTINUE,
            "endpoint_name": endpoint_name,
            "rollout_id": sfn.JsonPath.string_at("$.rollout_id"),
            "seq": sfn.JsonPath.number_at("$.seq"),
            "execution_name": sfn.JsonPath.string_at("$$.Execution.Name"),
            "iteration": _iteration(),
        },
    )
    _retry_transient(hand_on)
    hand_on.add_catch(wait, result_path="$.error")  # this execution goes on; it asks again
    return hand_on


def _handed_on(scope: Construct, *, done: sfn.Choice, wait: sfn.Wait) -> sfn.Choice:
    """After HandOn: succeed once a new execution drives the rollout; else on to ``done`` when
    the rollout ended meanwhile, or back to ``wait``."""
    return (
        sfn.Choice(scope, "HandedOn?")
        .when(
            sfn.Condition.and_(
                sfn.Condition.is_present("$.handed_on"),
                sfn.Condition.boolean_equals("$.handed_on", True),
            ),
            sfn.Succeed(scope, "HandedOn", comment="a new execution drives the rollout"),
        )
        .when(sfn.Condition.boolean_equals("$.done", True), done)
        .otherwise(wait)
    )


def _branch_on_status(
    scope: Construct, done: sfn.Choice, *, hand_on: tasks.LambdaInvoke, wait: sfn.Wait
) -> None:
    """Done?: end the execution as the rollout ended (Completed, Superseded, RolledBack,
    Abandoned), hand on after :data:`ITERATIONS_PER_EXECUTION` iterations, else ``wait``."""
    (
        done.when(
            sfn.Condition.string_equals("$.status", COMPLETED), sfn.Succeed(scope, "Completed")
        )
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
        .when(
            sfn.Condition.and_(
                sfn.Condition.is_present("$.iteration"),
                sfn.Condition.number_greater_than_equals("$.iteration", ITERATIONS_PER_EXECUTION),
            ),
            hand_on,
        )
        .otherwise(wait)
    )


def execution_ended_rule(
    scope: Construct,
    *,
    state_machine: sfn.IStateMachine,
    function: lambda_.IFunction,
    endpoint_name: str,
) -> events.Rule:
    """The state machine's executions that end FAILED, TIMED_OUT or ABORTED, sent to the
    controller as ``execution-ended`` (module docstring). The target's invoke permission is the
    function's resource policy (``lambda:InvokeFunction`` for events.amazonaws.com, this rule)."""
    rule = events.Rule(
        scope,
        "ExecutionEnded",
        description=f"Canary rollout executions of {endpoint_name} that end without a Succeed "
        "state: the controller rolls back or records FAILED",
        event_pattern=events.EventPattern(
            source=["aws.states"],
            detail_type=["Step Functions Execution Status Change"],
            detail={
                "stateMachineArn": [state_machine.state_machine_arn],
                "status": list(EXECUTION_ENDED_STATUSES),
            },
        ),
    )
    rule.add_target(
        targets.LambdaFunction(
            function,
            event=events.RuleTargetInput.from_object(
                {
                    "action": EXECUTION_ENDED,
                    "endpoint_name": endpoint_name,
                    "execution_arn": events.EventField.from_path("$.detail.executionArn"),
                    "execution_name": events.EventField.from_path("$.detail.name"),
                    "execution_status": events.EventField.from_path("$.detail.status"),
                }
            ),
        )
    )
    return rule
