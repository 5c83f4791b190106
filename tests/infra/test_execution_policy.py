"""The product's CloudFormation execution policies (stacks/constructs/execution_policy.py) against
what the stacks create: every resource type in the synthesized templates of dev and prod (each
with a deploy_access section, so the deploy-access stack is among them) and of the component
shape's dev example (config/examples/dev-components.yaml: inference components and their copy
scaling, issue 45) is covered, every
permission its CloudFormation handlers need is granted or said why not, and nothing else is.

The handlers' permissions are the CloudFormation registry schemas (``handlers``: create, read,
update, delete) and the actions' resource types the Service Authorization Reference, both as
the pinned cfn-lint ships them (cfnlint/data/schemas, cfnlint/data/AdditionalSpecs/Policies.json).
Adding a resource type to a stack without extending the grants fails
``test_every_resource_type_of_dev_and_prod_is_covered``."""

from __future__ import annotations

import fnmatch
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cfnlint
import pytest
import yaml

from stacks.app_builder import build_stacks, cdk_json_context
from stacks.constructs import execution_policy as ep
from typed_config import (
    DeploymentConfig,
    artifact_bucket_name,
    execution_policy_names,
    execution_policy_stack_name,
)

from .conftest import REPO_ROOT, make_rule, parse, raw_config

CFNLINT_DATA = Path(cfnlint.__file__).parent / "data"
ACCOUNT = "123456789012"
REGION = "us-east-1"
#: Granted though no handler lists them: who needs each.
NOT_HANDLER_PERMISSIONS = {
    "lambda:InvokeFunction": "CloudFormation invokes a custom resource's service token "
    "(Custom::EndpointSmokeGate: the Provider framework's onEvent function)",
    "ssm:GetParameters": "the templates' BootstrapVersion parameter "
    "(AWS::SSM::Parameter::Value<String>), resolved by CloudFormation",
    "iam:CreateServiceLinkedRole": "also listed by the ScalableTarget handler; kept to the "
    "scaling service-linked role",
    "sagemaker:UpdateEndpointWeightsAndCapacities": "Application Auto Scaling's guide lists it for "
    "the principal that registers a SageMaker variant (tests/infra/test_authorization.py)",
}
#: ``*`` for an action that lists a resource type, and why.
STAR_DESPITE_RESOURCE_TYPE = {
    "cloudwatch:GetMetricData": "its one resource type is a CloudWatch dataset, none of which "
    "the product has; the scaling policy's handler reads metrics with it",
}


@cache
def schema_handlers(resource_type: str) -> dict[str, list[str]]:
    providers = json.loads((CFNLINT_DATA / "schemas/providers/us-east-1.json").read_text())
    schema = json.loads(
        (CFNLINT_DATA / "schemas/resources" / f"{providers[resource_type]}.json").read_text()
    )
    return {
        op: list(schema.get("handlers", {}).get(op, {}).get("permissions", []))
        for op in ("create", "read", "update", "delete")
    }


@cache
def action_resource_types(action: str) -> list[str] | None:
    """The action's resource types (Service Authorization Reference); None: no such action."""
    policies = json.loads((CFNLINT_DATA / "AdditionalSpecs/Policies.json").read_text())
    service, name = action.split(":")
    found = policies.get(service, {}).get("Actions", {}).get(name.lower())
    return None if found is None else list(found.get("Resources", []))


#: Apps checked besides each environment's: ``{name: its config}`` (the component shape).
EXAMPLES = {"dev-components": REPO_ROOT / "config" / "examples" / "dev-components.yaml"}
#: Every app the execution policies are checked against.
APPS = ("dev", "prod", *EXAMPLES)


def with_access(env: str) -> DeploymentConfig:
    """``env``'s config (or an example's, by its :data:`EXAMPLES` name) with a deploy_access
    section."""
    example = EXAMPLES.get(env)
    raw = raw_config(env) if example is None else yaml.safe_load(example.read_text())
    raw["deploy_access"] = {
        "repository": "my-org/mangaassist-serving",
        "oidc_provider": "create",
    }
    return parse(raw, env=raw["env"])


@cache
def synth(env: str) -> tuple[DeploymentConfig, dict[str, dict[str, Any]]]:
    """``(cfg, {stack name: template})`` of ``env``'s whole app, as ``make synth`` builds it."""
    cfg = with_access(env)
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    build_stacks(app, cfg)
    return cfg, {s.stack_name: s.template for s in app.synth().stacks}


@pytest.fixture(params=APPS)
def synthesized(request) -> tuple[DeploymentConfig, dict[str, dict[str, Any]]]:
    return synth(request.param)


def names(cfg: DeploymentConfig, **overrides: str) -> ep.Names:
    values = {
        "partition": "aws",
        "region": cfg.region,
        "account": ACCOUNT,
        "prefix": f"{cfg.project}-{cfg.env}",
        "endpoint": cfg.endpoint_name,
        "repository": str(cfg.image.repository_name),
        "bucket": artifact_bucket_name(cfg, ACCOUNT),
        "qualifier": "hnb659fds",
    }
    return ep.Names(**{**values, **overrides})


def statements(cfg: DeploymentConfig) -> list[dict[str, Any]]:
    return [s for doc in ep.policy_documents(names(cfg)).values() for s in doc["Statement"]]


def granted(cfg: DeploymentConfig) -> set[str]:
    return {a for s in statements(cfg) for a in s["Action"]}


def deployed_through_bootstrap(
    cfg: DeploymentConfig, templates: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The templates CloudFormation deploys with the execution role: all but the policies'."""
    return {n: t for n, t in templates.items() if n != execution_policy_stack_name(cfg)}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def resource_types(templates: dict[str, dict[str, Any]]) -> set[str]:
    return {r["Type"] for t in templates.values() for r in t.get("Resources", {}).values()}


# --- coverage ------------------------------------------------------------------------------


def test_every_resource_type_of_dev_and_prod_is_covered(synthesized) -> None:
    cfg, templates = synthesized
    types = resource_types(deployed_through_bootstrap(cfg, templates))
    assert {"AWS::SageMaker::Endpoint", "AWS::IAM::OIDCProvider", "AWS::S3::Bucket"} <= types
    allowed = granted(cfg)
    uncovered: dict[str, list[str]] = {}
    for rtype in sorted(types):
        if rtype.startswith("Custom::"):
            continue  # test_custom_resources_are_invoked_through_a_granted_function
        needed = {p for perms in schema_handlers(rtype).values() for p in perms}
        assert needed, f"no handler permissions known for {rtype}"
        missing = sorted(needed - allowed - set(ep.NOT_GRANTED))
        if missing:
            uncovered[rtype] = missing
    assert uncovered == {}, (
        "resource types whose CloudFormation handlers need permissions the execution policy "
        "neither grants nor explains: extend GRANTS (or NOT_GRANTED, saying why) in "
        "stacks/constructs/execution_policy.py: " + json.dumps(uncovered)
    )


@pytest.mark.parametrize("env", ["dev", "prod"])  # the component shape has no smoke gate
def test_custom_resources_are_invoked_through_a_granted_function(env: str) -> None:
    cfg, templates = synth(env)
    functions = [s for s in statements(cfg) if "lambda:InvokeFunction" in s["Action"]]
    found = 0
    for stack, template in deployed_through_bootstrap(cfg, templates).items():
        resources = template["Resources"]
        for r in resources.values():
            if not r["Type"].startswith("Custom::"):
                continue
            (target, _) = r["Properties"]["ServiceToken"]["Fn::GetAtt"]
            assert resources[target]["Type"] == "AWS::Lambda::Function"
            arn = physical_arn("AWS::Lambda::Function", stack, target, resources[target], cfg)
            assert any(fnmatch.fnmatchcase(arn, p) for s in functions for p in s["Resource"])
            found += 1
    assert found >= 1


def test_nothing_is_granted_that_no_resource_type_needs() -> None:
    """Each environment's policies grant the same actions (only names differ), so what dev's,
    prod's and the component shape's resource types need, together, bounds them."""
    needed: set[str] = set()
    for env in APPS:
        cfg, templates = synth(env)
        for rtype in resource_types(deployed_through_bootstrap(cfg, templates)):
            if not rtype.startswith("Custom::"):
                needed |= {p for perms in schema_handlers(rtype).values() for p in perms}
    for env in ("dev", "prod"):
        cfg, _ = synth(env)
        extra = granted(cfg) - needed - set(NOT_HANDLER_PERMISSIONS)
        assert extra == set(), f"granted, but no resource type needs: {extra}"
        assert not set(ep.NOT_GRANTED) & granted(cfg)


# --- scope ---------------------------------------------------------------------------------


def test_star_is_only_for_actions_without_a_resource_type() -> None:
    for s in statements(with_access("prod")):
        if "*" not in s["Resource"]:
            for action in s["Action"]:
                assert action_resource_types(action), f"{action} has no resource type: use *"
            continue
        assert s["Resource"] == ["*"], s["Sid"]
        for action in s["Action"]:
            types = action_resource_types(action)
            assert types == [] or action in STAR_DESPITE_RESOURCE_TYPE, (action, types)


def test_every_named_resource_is_the_products_or_said_account_wide() -> None:
    cfg = with_access("prod")
    ours = (
        f"{cfg.project}-{cfg.env}-",
        cfg.endpoint_name,
        str(cfg.image.repository_name),
        artifact_bucket_name(cfg, ACCOUNT),
        "cdk-hnb659fds-",
        "/cdk-bootstrap/hnb659fds/",
        ep.GITHUB_OIDC_HOST,
        ep.SCALING_ROLE_PATH,
    )
    for s in statements(cfg):
        if s["Resource"] == ["*"]:
            continue
        for arn in s["Resource"]:
            assert ACCOUNT in arn or ":s3:::" in arn, arn  # never another account's
            if s["Sid"] in ep.ACCOUNT_WIDE:
                assert arn.endswith("/*") or arn.endswith(":*"), arn
            else:
                assert any(n in arn for n in ours), f"{s['Sid']}: {arn} names nothing of ours"
    assert set(ep.ACCOUNT_WIDE) <= {s["Sid"] for s in statements(cfg)}


#: How each named type's ARN is made from its name, and the property that names it.
ARNS = {
    "AWS::IAM::Role": ("RoleName", "arn:aws:iam::{a}:role/{n}", "iam:CreateRole"),
    "AWS::Lambda::Function": (
        "FunctionName", "arn:aws:lambda:{r}:{a}:function:{n}", "lambda:CreateFunction",
    ),
    "AWS::Logs::LogGroup": (
        "LogGroupName", "arn:aws:logs:{r}:{a}:log-group:{n}", "logs:CreateLogGroup",
    ),
    "AWS::DynamoDB::Table": ("TableName", "arn:aws:dynamodb:{r}:{a}:table/{n}",
                             "dynamodb:CreateTable"),
    "AWS::SNS::Topic": ("TopicName", "arn:aws:sns:{r}:{a}:{n}", "sns:CreateTopic"),
    "AWS::Events::Rule": ("Name", "arn:aws:events:{r}:{a}:rule/{n}", "events:PutRule"),
    "AWS::CloudWatch::Alarm": (
        "AlarmName", "arn:aws:cloudwatch:{r}:{a}:alarm:{n}", "cloudwatch:PutMetricAlarm",
    ),
    "AWS::StepFunctions::StateMachine": (
        "StateMachineName", "arn:aws:states:{r}:{a}:stateMachine:{n}",
        "states:CreateStateMachine",
    ),
    "AWS::SageMaker::Endpoint": (
        "EndpointName", "arn:aws:sagemaker:{r}:{a}:endpoint/{n}", "sagemaker:CreateEndpoint",
    ),
    "AWS::ECR::Repository": (
        "RepositoryName", "arn:aws:ecr:{r}:{a}:repository/{n}", "ecr:CreateRepository",
    ),
    "AWS::S3::Bucket": ("BucketName", "arn:aws:s3:::{n}", "s3:CreateBucket"),
}  # fmt: skip


def literal(value: Any) -> str:
    """A name property as text: ``Fn::Join`` parts joined, the account id filled in."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        return "".join(literal(v) for v in value["Fn::Join"][1])
    if value == {"Ref": "AWS::AccountId"}:
        return ACCOUNT
    if value == {"Ref": "AWS::Partition"}:
        return "aws"
    raise AssertionError(f"a name the test cannot read: {value}")


def physical_arn(
    rtype: str, stack: str, logical_id: str, resource: dict[str, Any], cfg: DeploymentConfig
) -> str:
    """The resource's ARN: its name where the template gives one, else the name CloudFormation
    generates, ``<stack name>-<logical id>-<random>`` cut to 64 characters."""
    prop, template, _ = ARNS[rtype]
    given = resource.get("Properties", {}).get(prop)
    name = literal(given) if given is not None else f"{stack}-{logical_id}-ABCDEFGHIJKL"[:64]
    if rtype == "AWS::SageMaker::Endpoint":
        name = name.lower()
    return template.format(r=cfg.region, a=ACCOUNT, n=name)


def test_each_resource_is_created_on_an_arn_its_grant_names(synthesized) -> None:
    """The round trip: the ARN each resource gets (its configured name, or the generated
    ``<stack name>-...``) is one the grant of its create action names."""
    cfg, templates = synthesized
    checked = 0
    for stack, template in deployed_through_bootstrap(cfg, templates).items():
        for lid, r in template["Resources"].items():
            if r["Type"] not in ARNS:
                continue
            arn = physical_arn(r["Type"], stack, lid, r, cfg)
            action = ARNS[r["Type"]][2]
            patterns = [p for s in statements(cfg) if action in s["Action"] for p in s["Resource"]]
            if r["Type"] == "AWS::StepFunctions::StateMachine" and "StateMachineName" not in r.get(
                "Properties", {}
            ):
                assert "StateMachines" in ep.ACCOUNT_WIDE  # generated from the logical id
            assert any(fnmatch.fnmatchcase(arn, p) for p in patterns), (lid, arn, patterns)
            checked += 1
    assert checked >= 20


def test_roles_are_passed_only_to_the_services_that_assume_them(synthesized) -> None:
    cfg, templates = synthesized
    services: set[str] = set()
    attached: set[str] = set()
    for template in deployed_through_bootstrap(cfg, templates).values():
        for r in template["Resources"].values():
            if r["Type"] != "AWS::IAM::Role":
                continue
            props = r["Properties"]
            assert "PermissionsBoundary" not in props  # NOT_GRANTED says none has one
            for st in props["AssumeRolePolicyDocument"]["Statement"]:
                services |= set(as_list(st["Principal"].get("Service", [])))
            attached |= {
                literal(a).split(":policy/")[1] for a in props.get("ManagedPolicyArns", [])
            }
    assert services <= set(ep.PASSED_TO) | set(ep.TRUSTED_NOT_PASSED)
    assert not set(ep.PASSED_TO) & set(ep.TRUSTED_NOT_PASSED)
    assert attached <= set(ep.ATTACHABLE_POLICIES)
    [attach] = [s for s in statements(cfg) if "iam:AttachRolePolicy" in s["Action"]]
    assert attach["Action"] == ["iam:AttachRolePolicy"]
    assert attach["Condition"] == {
        "ArnEquals": {
            "iam:PolicyARN": ["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]
        }
    }
    [pass_role] = [s for s in statements(cfg) if s["Sid"] == "PassRolesToTheirServices"]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": list(ep.PASSED_TO)}}


def test_no_grant_may_change_the_execution_policies_themselves() -> None:
    """A person deploys them (LegacyStackSynthesizer, own credentials): the role they limit may
    not create or edit any managed policy, or any cdk deploy could widen its own permissions."""
    for s in statements(with_access("prod")):
        assert not [a for a in s["Action"] if re.fullmatch(r"iam:\w+Policy(Version)?", a)
                    and "Role" not in a], s["Sid"]  # fmt: skip
        assert not [r for r in s["Resource"] if ":policy/" in r], s["Sid"]


# --- the policies and their stack ----------------------------------------------------------


def test_each_policy_fits_the_iam_managed_policy_size_in_the_longest_partition_and_region() -> None:
    """IAM quotas: a managed policy holds at most 6,144 characters, whitespace not counted
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html)."""
    cfg = with_access("prod")
    longest = names(cfg, partition="aws-us-gov", region="ap-southeast-5")
    for part, doc in ep.policy_documents(longest).items():
        size = len(re.sub(r"\s", "", json.dumps(doc)))
        assert size <= 6144, f"{part}: {size} characters"


def test_the_stack_deploys_before_bootstrap_with_the_callers_credentials(tmp_path) -> None:
    cfg = with_access("prod")
    app = cdk.App(context=cdk_json_context(REPO_ROOT), outdir=str(tmp_path))
    build_stacks(app, cfg)
    assembly = app.synth()
    stack = assembly.get_stack_by_name(execution_policy_stack_name(cfg))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    props = manifest["artifacts"][stack.stack_name]["properties"]
    bootstrap_needs = {
        "assumeRoleArn",
        "cloudFormationExecutionRoleArn",
        "requiresBootstrapStackVersion",
        "stackTemplateAssetObjectUrl",
    }
    assert not bootstrap_needs & set(props)
    template = stack.template
    assert "Parameters" not in template and "Rules" not in template  # no BootstrapVersion
    # The CDK CLI sends a template of at most 50 KiB without the bootstrap bucket.
    assert len(json.dumps(template)) <= 50 * 1024
    policies = {
        r["Properties"]["ManagedPolicyName"]: r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
    }
    assert (
        list(policies)
        == execution_policy_names(cfg)
        == [
            "mangaassist-prod-cfn-exec-iam",
            "mangaassist-prod-cfn-exec-serving",
            "mangaassist-prod-cfn-exec-control",
        ]
    )
    assert {r["Type"] for r in template["Resources"].values()} == {"AWS::IAM::ManagedPolicy"}
    output = template["Outputs"]["ExecutionPolicyArns"]
    refs = [p for p in output["Value"]["Fn::Join"][1] if isinstance(p, dict)]
    assert len(refs) == 3 and all("Ref" in r for r in refs)
    assert "--cloudformation-execution-policies" in output["Description"]


def test_make_deploy_execution_policy_runs_before_bootstrap_and_asks_before_broadening() -> None:
    recipe = make_rule("deploy-execution-policy")
    assert "tools.stack_name --env $(ENV) execution-policy" in recipe
    assert "--for deploy-execution-policy" in recipe
    assert "--require-approval broadening" in recipe and "--exclusively" in recipe
    assert "preflight" not in recipe.split("\n")[0]  # no bootstrap-checking prerequisite
