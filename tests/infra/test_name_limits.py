"""Every name the product generates is within AWS's limits (typed_config/aws_limits.py) for the
longest ``project``, ``env`` and ``endpoint_name`` the config accepts, and one character more
is refused at synth naming the file, the field and the fix (issue 41, item 5).

Each limit is read back from botocore's service model where the model carries it (the copy the
SDKs validate against), and each test names the page that states it. docs/limits.md, "Generated
names", lists them with what the product does at each.
"""

from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace
from typing import Any, cast

import aws_cdk as cdk
import botocore.loaders
import pytest

from lambdas.canary_controller import settings
from lambdas.canary_controller.names import controller_function_name, state_machine_name
from stacks.app_builder import build_stacks, cdk_json_context
from stacks.constructs.scaling import resource_id
from tools import bedrock_import, bedrock_package
from typed_config import ConfigError, DeploymentConfig, bedrock_package_job_prefix
from typed_config import aws_limits as lim
from typed_config import generated_names as gn

from .conftest import REPO_ROOT, parse, raw_config

#: The longest name each config field allows: ``project`` ``^[a-z][a-z0-9-]{1,30}$``, ``env``
#: ``^[a-z][a-z0-9]{1,15}$`` (2-16), ``endpoint_name`` SageMaker's 63 (typed_config/loader.py).
PROJECT_MAX, ENV_MIN, ENV_MAX, ENDPOINT_MAX = 31, 2, 16, 63
BUDGET = gn.max_project_env_length()
#: The two ends of what the config accepts: the longest env with the project it leaves room for,
#: and the longest project with the shortest env.
LONGEST = {
    "long-env": ("p" * (BUDGET - ENV_MAX), "e" * ENV_MAX),
    "long-project": ("p" * min(PROJECT_MAX, BUDGET - ENV_MIN), "e" * ENV_MIN),
}
ENDPOINT = "e" * (ENDPOINT_MAX - 1) + "9"
SCHEDULE = "s" * 63  # typed_config.base.NAME_PATTERN's longest


def _botocore_shape(service: str, shape: str) -> dict[str, Any]:
    model = botocore.loaders.Loader().load_service_model(service, "service-2")
    found: dict[str, Any] = model["shapes"][shape]
    return found


@pytest.mark.parametrize(
    "limit", [x for x in lim.ALL_LIMITS if x.botocore_shape], ids=lambda x: x.what
)
def test_each_limit_is_the_one_in_botocores_service_model(limit: lim.NameLimit) -> None:
    """The length (and, where the model has one, the pattern) each API parameter's shape carries:
    each limit's page is in its ``source`` (typed_config/aws_limits.py)."""
    assert limit.botocore_shape is not None
    shape = _botocore_shape(*limit.botocore_shape)
    assert shape["max"] == limit.max_length, limit.source
    assert shape.get("min", 1) in (0, limit.min_length), limit.source
    pattern = shape.get("pattern")
    if pattern and limit is not lim.SCALING_POLICY and limit is not lim.SCALABLE_TARGET_RESOURCE_ID:
        # SageMaker's {0,62} repeats the length, which max_length holds
        assert pattern.replace("{0,62}", "*") == limit.pattern, limit.source


def test_the_step_functions_name_is_the_narrower_set_logging_needs() -> None:
    """Step Functions API reference, CreateStateMachine ``name``
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html):
    "To enable logging with CloudWatch Logs, the name should only contain 0-9, A-Z, a-z, - and _";
    botocore's model carries the 80 and no pattern."""
    assert lim.STEP_FUNCTIONS_STATE_MACHINE.problems("a" * 80) == []
    assert lim.STEP_FUNCTIONS_STATE_MACHINE.problems("a.b")
    assert lim.STEP_FUNCTIONS_STATE_MACHINE.problems("a" * 81)


@pytest.mark.parametrize(
    "name, refused",
    [
        ("ab", True),  # 3 (min)
        ("a" * 63, False),
        ("a" * 64, True),  # 63 (max)
        ("My-bucket", True),  # lowercase only
        ("a..b", True),  # no two adjacent periods
        ("xn--abc", True),
        ("sthree-abc", True),
        ("amzn-s3-demo-abc", True),
        ("abc-s3alias", True),
        ("abc--ol-s3", True),
        ("abc--x-s3", True),
        ("abc-", True),  # begins and ends with a letter or number
        ("192.168.5.4", True),  # not formatted as an IP address
        ("v1.models.2", False),
    ],
)
def test_the_s3_rule_is_the_user_guides(name: str, refused: bool) -> None:
    """Amazon S3 user guide, "General purpose bucket naming rules"
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html); botocore's
    BucketName shape carries none of them."""
    assert bool(lim.S3_BUCKET.problems(name)) is refused


@pytest.mark.parametrize("name", ["a" * 128, "a-B-9"])
def test_the_cloudformation_stack_rule_is_the_api_references(name: str) -> None:
    """CloudFormation API reference, CreateStack ``StackName``
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html):
    alphanumerics and hyphens, starting with a letter, at most 128."""
    assert lim.CLOUDFORMATION_STACK.problems(name) == []
    assert lim.CLOUDFORMATION_STACK.problems(name + "a" * 128)
    assert lim.CLOUDFORMATION_STACK.problems("9" + name)


def test_the_budget_is_the_tightest_name_computed_from_the_limits() -> None:
    """The bedrock packaging job, ``<project>-<env>-prep-bedrock-<16 hex>-<MMDDhhmmss>``, leaves
    the least room of AWS's 63 for a training job name: 63 - 42 = 21."""
    assert BUDGET == 21
    for name, limit in gn.project_env_names("p" * (BUDGET - 2), "ee"):
        assert limit.problems(name) == [], name
    assert any(limit.problems(n) for n, limit in gn.project_env_names("p" * (BUDGET - 1), "ee"))


def _names(project: str, env: str) -> list[tuple[str, str, lim.NameLimit]]:
    return [(f"{limit.what} {n}", n, limit) for n, limit in gn.project_env_names(project, env)]


@pytest.mark.parametrize("case", LONGEST)
@pytest.mark.parametrize(
    "limit",
    [lim.CLOUDFORMATION_STACK, lim.IAM_MANAGED_POLICY, lim.S3_BUCKET, lim.SAGEMAKER_TRAINING_JOB],
    ids=lambda x: x.what,
)
def test_every_project_and_env_name_fits_at_the_longest_config(
    case: str, limit: lim.NameLimit
) -> None:
    """Stack names (CreateStack, 128), execution policies (IAM CreatePolicy, 128), the artifact
    and capture buckets (S3 naming rules, 63, lowercase), the preparation and packaging jobs
    (SageMaker CreateTrainingJob, 63): each limit's page is its ``source``."""
    names = [(n, x) for _, n, x in _names(*LONGEST[case]) if x is limit]
    assert names
    for name, _ in names:
        assert limit.problems(name) == [], (name, limit.source)


@pytest.mark.parametrize("case", LONGEST)
def test_the_tools_build_their_job_names_by_the_checked_definitions(case: str) -> None:
    """The packaging job's prefix is typed_config's (tools/bedrock_package.py), and the longest
    job name it makes fits CreateTrainingJob's 63."""
    project, env = LONGEST[case]
    cfg = _config("prod", project, env)
    version = gn.LONGEST_VERSION
    prefix = bedrock_package.package_job_prefix(cfg, version)
    assert prefix == bedrock_package_job_prefix(cfg, version)
    assert len(gn.training_job_name(prefix, gn.LONGEST_TIME)) == len(project) + len(env) + 42


@pytest.mark.parametrize("case", LONGEST)
def test_bedrock_import_names_fit_at_the_longest_config(case: str) -> None:
    """Bedrock API reference, CreateModelImportJob
    (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_CreateModelImportJob.html):
    ``importedModelName`` and ``jobName`` 1-63 with their patterns, for the longest adapter name
    (``^[a-zA-Z][a-zA-Z0-9_-]{0,62}$``) and a digest."""
    cfg = _config("prod", *LONGEST[case])
    model = bedrock_import.imported_model_name(cfg, "a_" * 31 + "a", "f" * 64)
    assert lim.BEDROCK_IMPORTED_MODEL.problems(model) == []
    assert lim.BEDROCK_IMPORT_JOB.problems(bedrock_import.job_name(model, 4102444799.0)) == []


@pytest.mark.parametrize(
    "limit, name",
    [
        (lim.SAGEMAKER_ENDPOINT, ENDPOINT),
        (lim.LAMBDA_FUNCTION, controller_function_name(ENDPOINT)),
        (lim.STEP_FUNCTIONS_STATE_MACHINE, state_machine_name(ENDPOINT)),
        (lim.LOG_GROUP, f"/aws/sagemaker/Endpoints/{ENDPOINT}"),
        (lim.SCALABLE_TARGET_RESOURCE_ID, resource_id(ENDPOINT, "primary")),
        (lim.SCALING_POLICY, f"{ENDPOINT}-canary-target-tracking"),
        (lim.SCHEDULED_ACTION, f"{SCHEDULE}-prescale"),
        (lim.SCHEDULED_ACTION, f"{SCHEDULE}-restore"),
    ],
    ids=lambda x: x.what if isinstance(x, lim.NameLimit) else "",
)
def test_every_endpoint_name_fits_at_the_longest_endpoint_name(
    limit: lim.NameLimit, name: str
) -> None:
    """The names derived from a 63-character endpoint name (and a 63-character schedule name),
    each against its page (``limit.source``): Lambda's 64, Step Functions' 80, CloudWatch
    Logs' 512, Application Auto Scaling's 1600 and 256."""
    assert limit.problems(name) == [], (name, limit.source)


def test_every_execution_name_the_controller_starts_is_one_step_functions_accepts() -> None:
    """StartExecution ``name`` (Step Functions API reference,
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html):
    1-80, and only ``0-9A-Za-z-_`` with logging. The controller names an execution by the
    rollout id (at most 80 of those, lambdas/canary_controller/settings.py), a retry
    ``<id, 60>-<epoch>``, a rollback driver ``<id, 60>-rb-<epoch>``
    (lambdas/canary_controller/executions.py)."""
    longest = "r" + "_" * 79
    assert settings._ID.fullmatch(longest) and not settings._ID.fullmatch(longest + "r")
    epoch = 9_999_999_999  # ten digits until the year 2286
    for name in (longest, f"{longest[:60]}-{epoch}", f"{longest[:60]}-rb-{epoch}"):
        assert lim.STEP_FUNCTIONS_EXECUTION.problems(name) == [], name


def test_long_endpoint_names_get_distinct_controller_functions() -> None:
    """Lambda names are at most 64 characters (Lambda API reference, CreateFunction): an
    endpoint name over 46 characters is shortened with a digest of the whole, so two that share
    their first 46 characters do not name one function; a short one keeps its plain name."""
    a, b = "x" * 50 + "-a", "x" * 50 + "-b"
    assert controller_function_name(a) != controller_function_name(b)
    assert controller_function_name("mangaassist-vllm-prod") == (
        "mangaassist-vllm-prod-canary-controller"
    )
    assert len(controller_function_name("y" * 46)) == 64
    assert controller_function_name("y" * 46) == "y" * 46 + "-canary-controller"


# -- the config: the longest accepted synthesizes within every limit, one more is refused --------


def _raw(env_file: str, project: str, env: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw_config(env_file))
    raw.update(project=project, env=env, endpoint_name=ENDPOINT)
    raw["deploy_access"] = {"repository": "my-org/serving", "oidc_provider": "existing"}
    return raw


def _config(env_file: str, project: str, env: str) -> DeploymentConfig:
    return parse(_raw(env_file, project, env), env=env)


@pytest.mark.parametrize(
    "env_file, case, grown",
    [
        ("prod", "long-env", "project"),
        ("dev", "long-project", "project"),
        ("dev", "long-project", "env"),
    ],
    ids=["prod-project", "dev-project", "dev-env"],
)
def test_one_character_more_is_refused_naming_the_file_field_and_fix(
    env_file: str, case: str, grown: str
) -> None:
    """The budget is the tightest name's room (CreateTrainingJob's 63, the packaging job): one
    character more in either field is refused, naming the file, ``project``, the name that would
    break, AWS's page and the longest project the env leaves room for."""
    project, env = LONGEST[case]
    project, env = (project + "p", env) if grown == "project" else (project, env + "e")
    with pytest.raises(ConfigError) as err:
        parse(_raw(env_file, project, env), env=env)
    message = str(err.value)
    assert f"config/{env}.yaml" in message
    assert re.search(r"^  project: .*SageMaker training job name .* 64 characters", message, re.M)
    assert f"shorten project to at most {BUDGET - len(env)} characters" in message
    assert lim.SAGEMAKER_TRAINING_JOB.source in message


@pytest.mark.parametrize("bucket", ["my..models", "192.168.5.4", "xn--models", "models--ol-s3"])
def test_an_artifact_bucket_s3_refuses_is_refused_at_synth(bucket: str) -> None:
    """``model_prep.artifact_bucket`` names the bucket the release stack creates: S3's bucket
    naming rules (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)
    beyond the field's pattern (adjacent periods, an IP address, reserved affixes)."""
    raw = _raw("prod", "mangaassist", "prod")
    raw.setdefault("model_prep", {})["artifact_bucket"] = bucket
    with pytest.raises(ConfigError, match=r"model_prep\.artifact_bucket: .*S3 refuses it"):
        parse(raw, env="prod")


@pytest.mark.parametrize("project", ["xn--manga", "sthree-manga", "amzn-s3-demo-x", "manga-prod"])
def test_a_project_with_a_dash_is_refused(project: str) -> None:
    """No dash in ``project``: S3's reserved prefixes (bucket naming rules) cannot begin a bucket
    name, and ``<project>-<env>-`` names one environment only (the next test)."""
    with pytest.raises(ConfigError, match=r"project: .*no dashes"):
        parse(_raw("prod", project, "prod"), env="prod")


def test_an_endpoint_name_in_upper_case_is_refused() -> None:
    """SageMaker API reference, CreateEndpoint ``EndpointName``
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpoint.html): "The
    name is case-insensitive in CreateEndpoint, but the case is preserved"; the endpoint's ARN
    holds it in lower case (stacks/constructs/endpoint_ref.py), the log group, the scalable
    target and its alarms as written, and IAM compares ARNs case-sensitively."""
    raw = _raw("prod", "mangaassist", "prod")
    raw["endpoint_name"] = "MangaAssist-vllm-prod"
    with pytest.raises(ConfigError, match=r"endpoint_name: .*upper case.*'mangaassist-vllm-prod'"):
        parse(raw, env="prod")


@pytest.mark.parametrize("repository", ["team-", "a..b", "a/-b", "Upper"])
def test_an_ecr_repository_name_ecr_refuses_is_refused_at_synth(repository: str) -> None:
    """ECR API reference, CreateRepository ``repositoryName``
    (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_CreateRepository.html)."""
    raw = _raw("prod", "mangaassist", "prod")
    raw["image"]["repository_name"] = repository
    with pytest.raises(ConfigError, match=r"image\.repository_name"):
        parse(raw, env="prod")


#: (resource type, property) -> the limit of each name the templates set; a named property of
#: another kind fails :func:`test_the_longest_config_synthesizes_with_every_name_in_its_limits`.
TEMPLATE_NAMES: dict[tuple[str, str], lim.NameLimit] = {
    ("AWS::S3::Bucket", "BucketName"): lim.S3_BUCKET,
    ("AWS::IAM::ManagedPolicy", "ManagedPolicyName"): lim.IAM_MANAGED_POLICY,
    ("AWS::Lambda::Function", "FunctionName"): lim.LAMBDA_FUNCTION,
    ("AWS::StepFunctions::StateMachine", "StateMachineName"): lim.STEP_FUNCTIONS_STATE_MACHINE,
    ("AWS::Logs::LogGroup", "LogGroupName"): lim.LOG_GROUP,
    ("AWS::SageMaker::Endpoint", "EndpointName"): lim.SAGEMAKER_ENDPOINT,
    ("Custom::EndpointSmokeGate", "EndpointName"): lim.SAGEMAKER_ENDPOINT,
    ("AWS::ECR::Repository", "RepositoryName"): lim.ECR_REPOSITORY,
    ("AWS::ApplicationAutoScaling::ScalableTarget", "ResourceId"): lim.SCALABLE_TARGET_RESOURCE_ID,
    ("AWS::ApplicationAutoScaling::ScalingPolicy", "PolicyName"): lim.SCALING_POLICY,
}
#: Named properties that are not names AWS limits as such, and why.
NOT_NAMES = {
    "DisplayName": "SNS topic display name (the endpoint's name, 63 at most; 100 allowed)",
    "MetricName": "the container's and SageMaker's metric names, fixed strings, not generated",
    "VariantName": "the fixed variant names (primary, canary, shadow)",
    "AttributeName": "the controller table's key attribute, a fixed string",
}


def _resolve(value: Any) -> str | None:
    """A name as deployed: ``Fn::Join`` of strings and the account id, else None (a reference
    to a name CloudFormation generates within its own limits)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        resolved = [gn.LONGEST_ACCOUNT if p == {"Ref": "AWS::AccountId"} else p for p in parts]
        return sep.join(resolved) if all(isinstance(p, str) for p in resolved) else None
    return None


def _template_names(template: dict[str, Any]) -> list[tuple[str, str, str]]:
    found = []
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        for key, value in props.items():
            if key.endswith("Name") or key == "ResourceId":
                name = _resolve(value)
                if name is not None and not re.fullmatch(r"[A-Za-z0-9]+[0-9A-F]{8}", name):
                    found.append((resource["Type"], key, name))
        for action in props.get("ScheduledActions", []):
            found.append(("ScheduledAction", "ScheduledActionName", action["ScheduledActionName"]))
    return found


@pytest.fixture(scope="module", params=[("prod", "long-env"), ("dev", "long-project")],
                ids=["prod", "dev"])  # fmt: skip
def longest_assembly(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    env_file, case = request.param
    cfg = _config(env_file, *LONGEST[case])
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    build_stacks(app, cfg)
    return {s.stack_name: s.template for s in app.synth().stacks}


def test_the_longest_config_synthesizes_with_every_name_in_its_limits(
    longest_assembly: dict[str, dict[str, Any]],
) -> None:
    """dev and prod at the longest project, env and endpoint name the config accepts: every
    stack name (CreateStack) and every name the templates set, against its limit's page."""
    limits = {**TEMPLATE_NAMES, ("ScheduledAction", "ScheduledActionName"): lim.SCHEDULED_ACTION}
    broken, unknown = [], []
    for stack, template in longest_assembly.items():
        broken += [(stack, p) for p in lim.CLOUDFORMATION_STACK.problems(stack)]
        for rtype, key, name in _template_names(template):
            if key in NOT_NAMES:
                continue
            limit = limits.get((rtype, key))
            if limit is None:
                unknown.append((rtype, key, name))
            else:
                broken += [(name, f"{p} ({limit.source})") for p in limit.problems(name)]
    assert not unknown, f"names with no limit in TEMPLATE_NAMES: {unknown}"
    assert not broken, json.dumps(broken, indent=1)
    assert any(len(s) == max(len(x) for x in longest_assembly) for s in longest_assembly)


def test_the_longest_config_names_the_buckets_and_functions_it_was_checked_for(
    longest_assembly: dict[str, dict[str, Any]],
) -> None:
    """The synthesized names are the ones typed_config.generated_names checks (one definition):
    the buckets, the execution policies, the controller function."""
    names = {n for t in longest_assembly.values() for _, _, n in _template_names(t)}
    stacks = set(longest_assembly)
    project, env = next(iter(stacks)).split("-")[:2]
    assert gn.models_bucket_name(project, env, gn.LONGEST_ACCOUNT) in names
    assert {gn.stack_name(project, env, s) for s in gn.STACK_SUFFIXES} == stacks
    assert controller_function_name(ENDPOINT) in names


# -- log groups where the resource-policy size limit expects them --------------------------------


def test_the_state_machine_logs_under_aws_vendedlogs(
    longest_assembly: dict[str, dict[str, Any]],
) -> None:
    """Step Functions developer guide, "Avoiding Amazon CloudWatch Logs resource policy size
    restrictions" (https://docs.aws.amazon.com/step-functions/latest/dg/bp-cwl.html): "CloudWatch
    Logs resource policies are limited to 5120 characters ... When you create a state machine
    with logging enabled, Step Functions must update your CloudWatch Logs resource policy with
    the log group you specify. To avoid reaching the CloudWatch Logs resource policy size limit,
    prefix your CloudWatch Logs log group names with /aws/vendedlogs/"."""
    for template in longest_assembly.values():
        resources = template["Resources"]
        for machine in resources.values():
            logging = machine.get("Properties", {}).get("LoggingConfiguration")
            if machine["Type"] != "AWS::StepFunctions::StateMachine" or not logging:
                continue
            arn = logging["Destinations"][0]["CloudWatchLogsLogGroup"]["LogGroupArn"]
            group = resources[arn["Fn::GetAtt"][0]]["Properties"].get("LogGroupName", "")
            assert group.startswith("/aws/vendedlogs/states/"), group


# -- Bedrock imported model names ------------------------------------------------------------------


def test_two_models_that_would_import_under_one_name_are_refused() -> None:
    """Bedrock API reference, CreateModelImportJob ``importedModelName``
    (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_CreateModelImportJob.html):
    ``([0-9a-zA-Z][_-]?)+``, 63 at most. The name keeps runs of letters and digits, so
    ``manga_domain`` and ``manga-domain`` are one name: the second import would find the first's
    model, and make bedrock-import would delete neither as stale nor import the second."""
    raw = _raw("prod", "mangaassist", "prod")
    raw["endpoint_name"] = "mangaassist-vllm-prod"
    second = raw["adapters"][1]["name"]  # renamed wherever the file names it
    raw = json.loads(json.dumps(raw).replace(f'"{second}"', '"manga-domain"'))
    raw["bedrock"]["models"] = ["manga_domain", "manga-domain"]
    with pytest.raises(ConfigError, match=r"bedrock\.models: 'manga_domain' and 'manga-domain'"):
        parse(raw, env="prod")


def test_models_cut_to_one_name_at_the_longest_project_and_env_are_refused() -> None:
    project, env = LONGEST["long-env"]
    long = ["a" * 40 + "x", "a" * 40 + "y"]
    errors = gn.bedrock_model_name_errors(project, env, long)
    assert len(errors) == 1 and "rename one adapter" in errors[0]
    assert gn.bedrock_model_name_errors(project, env, ["a" * 26 + "x", "a" * 26 + "y"]) == []


class _ListedModels:
    """Bedrock's ListImportedModels (``nameContains``) over a fixed list; records deletions."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.deleted: list[str] = []

    def list_imported_models(self, nameContains: str) -> dict[str, Any]:
        found = [n for n in self.names if nameContains in n]
        return {"modelSummaries": [{"modelName": n, "modelArn": f"arn:{n}"} for n in found]}

    def delete_imported_model(self, modelIdentifier: str) -> None:
        self.deleted.append(modelIdentifier)


def test_bedrock_cleanup_never_deletes_another_environments_model() -> None:
    """make bedrock-import deletes this environment's imported models the config no longer
    names, found by the name prefix ``<project>-<env>-``. With no dash in project or env, the
    prefix of (``manga``, ``prod``) matches none of another environment's: not (``manga``,
    ``prodeu``)'s, and a project ``manga-prod`` is refused (the test above)."""
    cfg = _config("prod", "manga", "prod")
    other = gn.imported_model_name("manga", "prodeu", "manga_domain", "f" * 64)
    bedrock = _ListedModels([other])
    bedrock_import.cleanup(cast(Any, SimpleNamespace(bedrock=bedrock)), cfg, keep=set())
    assert bedrock.deleted == []
