"""ModelReleaseStack: the bucket of prepared model releases and the preparation job's role.

The prod template is built once through ``build_stacks`` (as ``make synth`` does); variants of
the config build the stack alone, which needs nothing from the other stacks."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from stacks.app_builder import build_stacks, cdk_json_context
from stacks.constructs.model_release import ecr_repository_arn, s3_sources
from stacks.model_release_stack import BEDROCK_IMPORT_ROLE_OUTPUT, ModelReleaseStack
from typed_config import DeploymentConfig

from .conftest import REPO_ROOT

STACK_ID = "mangaassist-prod-model-release"


@pytest.fixture(scope="module")
def prod_app(prod_cfg: DeploymentConfig) -> cdk.App:
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    build_stacks(app, prod_cfg)
    return app


@pytest.fixture(scope="module")
def template(prod_app: cdk.App) -> Template:
    stack = prod_app.node.find_child(STACK_ID)
    assert isinstance(stack, ModelReleaseStack)
    return Template.from_stack(stack)


def release_stack(cfg: DeploymentConfig, *, nag: bool = False) -> ModelReleaseStack:
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    env = cdk.Environment(account=cfg.account, region=cfg.region)
    stack = ModelReleaseStack(app, f"{cfg.project}-{cfg.env}-model-release", cfg=cfg, env=env)
    if nag:
        cdk.Aspects.of(app).add(AwsSolutionsChecks())
    return stack


def with_prep(cfg: DeploymentConfig, **update: Any) -> DeploymentConfig:
    return cfg.model_copy(update={"model_prep": cfg.model_prep.model_copy(update=update)})


def statements(template: Template) -> list[dict[str, Any]]:
    """The preparation job role's policy statements (the Bedrock import role has its own)."""
    (policy,) = template.find_resources(
        "AWS::IAM::Policy",
        {"Properties": {"PolicyName": Match.string_like_regexp("PreparationJob")}},
    ).values()
    found: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def with_action(template: Template, action: str) -> list[dict[str, Any]]:
    def actions(s: dict[str, Any]) -> list[str]:
        a = s["Action"]
        return a if isinstance(a, list) else [a]

    return [s for s in statements(template) if action in actions(s)]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_stack_sits_beside_image_and_endpoint_tagged_and_depending_on_neither(prod_app) -> None:
    """The release bucket must deploy first (a build-mode image bakes a published release), so
    it may not wait on the image stack."""
    stack = prod_app.node.find_child(STACK_ID)
    assert stack.dependencies == []
    tags = Template.from_stack(stack).find_resources("AWS::S3::Bucket")
    (bucket,) = tags.values()
    assert {"Key": "project", "Value": "mangaassist"} in bucket["Properties"]["Tags"]
    assert {"Key": "env", "Value": "prod"} in bucket["Properties"]["Tags"]


def test_bucket_is_versioned_kms_encrypted_private_and_owner_enforced(template) -> None:
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": {
                "Fn::Join": ["", ["mangaassist-prod-models-", {"Ref": "AWS::AccountId"}]]
            },
            "VersioningConfiguration": {"Status": "Enabled"},
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "BucketKeyEnabled": True,
                        "ServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": {
                                "Fn::GetAtt": [Match.string_like_regexp("Key"), "Arn"]
                            },
                        },
                    }
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
        },
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_bucket_refuses_plain_http(template) -> None:
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Principal": {"AWS": "*"},
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_lifecycle_expires_old_versions_and_abandoned_uploads(template) -> None:
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": [
                    Match.object_like(
                        {
                            "Status": "Enabled",
                            "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
                            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
                        }
                    )
                ]
            }
        },
    )


def _bucket_statement(template: Template, sid: str) -> dict[str, Any]:
    (policy,) = template.find_resources("AWS::S3::BucketPolicy").values()
    (found,) = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == sid
    ]
    return dict(found)


def _object_suffix(resource: Any) -> str:
    """The literal tail of ``Fn::Join ["", [<bucket arn>, "/suffix"]]`` (or a plain string)."""
    if isinstance(resource, str):
        return resource
    parts = resource["Fn::Join"][1]
    assert isinstance(parts[-1], str)
    return parts[-1]


def test_a_manifest_is_only_ever_created_with_if_none_match(template) -> None:
    """Nobody may overwrite a published manifest: a PutObject of ``<prefix>/*/manifest.json``
    without the If-None-Match header is denied (multipart parts exempted, as AWS documents)."""
    deny = _bucket_statement(template, "ManifestsOnlyByConditionalCreate")
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert deny["Action"] == "s3:PutObject"
    assert _object_suffix(deny["Resource"]) == "/models/*/manifest.json"
    assert deny["Condition"] == {
        "Null": {"s3:if-none-match": "true"},
        "Bool": {"s3:ObjectCreationOperation": "true"},
    }


def test_a_manifest_is_never_deleted_except_by_the_account_root(template) -> None:
    deny = _bucket_statement(template, "ManifestsNeverDeleted")
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert sorted(deny["Action"]) == ["s3:DeleteObject", "s3:DeleteObjectVersion"]
    assert _object_suffix(deny["Resource"]) == "/models/*/manifest.json"
    root = deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]["Fn::Join"][1]
    assert root[-1] == ":root"


def test_job_role_trusts_only_sagemaker_training_jobs_of_this_account(template) -> None:
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": "sts:AssumeRole",
                        "Principal": {"Service": "sagemaker.amazonaws.com"},
                        "Condition": {
                            "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                            "ArnLike": {
                                "aws:SourceArn": {
                                    "Fn::Join": [
                                        "",
                                        [
                                            "arn:aws:sagemaker:us-east-1:",
                                            {"Ref": "AWS::AccountId"},
                                            ":training-job/*",
                                        ],
                                    ]
                                }
                            },
                        },
                    }
                ]
            }
        },
    )


def test_job_role_writes_releases_only_under_the_prefix(template) -> None:
    """No ``<bucket>/*`` write: every PutObject resource lies under ``models/``."""
    (write,) = with_action(template, "s3:PutObject")
    assert [_object_suffix(r) for r in as_list(write["Resource"])] == ["/models/*"]
    assert "s3:DeleteObject" not in str(statements(template))
    (listing,) = [
        s for s in with_action(template, "s3:ListBucket") if isinstance(s["Resource"], dict)
    ]
    assert listing["Condition"] == {"StringLikeIfExists": {"s3:prefix": ["models/*"]}}


def test_job_role_uses_the_bucket_key_only_through_s3(template) -> None:
    (kms,) = with_action(template, "kms:GenerateDataKey")
    assert sorted(kms["Action"]) == ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
    assert kms["Resource"]["Fn::GetAtt"][0].startswith("ModelArtifactsKey")
    assert kms["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}


def test_s3_adapter_sources_become_read_only_grants_on_their_prefixes(template) -> None:
    source_bucket = "arn:aws:s3:::mangaassist-model-artifacts"
    reads = [s for s in with_action(template, "s3:GetObject") if source_bucket in str(s)]
    (read,) = reads
    assert read["Action"] == "s3:GetObject"
    assert sorted(as_list(read["Resource"])) == [
        f"{source_bucket}/lora/general_support_v2/*",
        f"{source_bucket}/lora/jp_style_v1/*",
        f"{source_bucket}/lora/manga_domain_v3/*",
    ]
    (listing,) = [
        s for s in with_action(template, "s3:ListBucket") if s["Resource"] == source_bucket
    ]
    assert sorted(listing["Condition"]["StringLike"]["s3:prefix"]) == sorted(
        [p for n in ("manga_domain_v3", "general_support_v2", "jp_style_v1")
         for p in (f"lora/{n}", f"lora/{n}/*")]
    )  # fmt: skip
    assert not [
        s for s in statements(template) if source_bucket in str(s) and s not in (read, listing)
    ]


def test_a_config_without_s3_sources_grants_no_other_bucket(prod_cfg) -> None:
    hf = [a.model_copy(update={"source": f"hf://org/{a.name}"}) for a in prod_cfg.adapters]
    template = Template.from_stack(release_stack(prod_cfg.model_copy(update={"adapters": hf})))
    assert "arn:aws:s3:::" not in str(statements(template))
    assert len(with_action(template, "s3:ListBucket")) == 1  # the artifact bucket's own


def test_an_s3_base_model_is_a_read_only_source_too(prod_cfg) -> None:
    model = prod_cfg.model.model_copy(update={"source": "s3://base-weights/llama3/8b"})
    template = Template.from_stack(release_stack(prod_cfg.model_copy(update={"model": model})))
    (read,) = [s for s in with_action(template, "s3:GetObject") if "base-weights" in str(s)]
    assert read["Action"] == "s3:GetObject"  # merged with the adapters' reads by CDK
    assert "arn:aws:s3:::base-weights/llama3/8b/*" in read["Resource"]
    (listing,) = [s for s in with_action(template, "s3:ListBucket") if "base-weights" in str(s)]
    assert listing["Resource"] == "arn:aws:s3:::base-weights"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["llama3/8b", "llama3/8b/*"]}}


def test_the_secret_grant_appears_only_with_hf_token_secret(prod_cfg) -> None:
    # model_copy skips validation: an s3 base needs no token, and without one there is no grant.
    model = prod_cfg.model.model_copy(update={"source": "s3://base-weights/llama3/8b"})
    untokened = with_prep(prod_cfg.model_copy(update={"model": model}), hf_token_secret=None)
    assert with_action(Template.from_stack(release_stack(untokened)),
                       "secretsmanager:GetSecretValue") == []  # fmt: skip
    secret = Template.from_stack(release_stack(with_prep(prod_cfg, hf_token_secret="hf/token")))
    (read,) = with_action(secret, "secretsmanager:GetSecretValue")
    assert read["Action"] == "secretsmanager:GetSecretValue"
    assert read["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:aws:secretsmanager:us-east-1:",
                {"Ref": "AWS::AccountId"},
                ":secret:hf/token-??????",
            ],
        ]
    }


def test_logs_and_metrics_are_the_training_jobs_own(template) -> None:
    (logs,) = with_action(template, "logs:PutLogEvents")
    tails = [r["Fn::Join"][1][-1] for r in logs["Resource"]]
    assert tails == [
        ":log-group:/aws/sagemaker/TrainingJobs",
        ":log-group:/aws/sagemaker/TrainingJobs:log-stream:*",
    ]
    (metrics,) = with_action(template, "cloudwatch:PutMetricData")
    assert metrics["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}
    }


def test_the_job_image_repository_comes_from_config(prod_cfg, template) -> None:
    """Named by ``model_prep.job_image``, else ``image.repository_name``; with neither there is
    no pull grant (and synth warns), never a wildcard repository."""
    (pull,) = with_action(template, "ecr:BatchGetImage")  # prod names its repository
    assert pull["Resource"]["Fn::Join"][1][-1] == ":repository/mangaassist-vllm-prod"
    unnamed = prod_cfg.image.model_copy(update={"repository_name": None})
    bare = Template.from_stack(release_stack(prod_cfg.model_copy(update={"image": unnamed})))
    assert with_action(bare, "ecr:BatchGetImage") == []
    uri = "111122223333.dkr.ecr.us-east-1.amazonaws.com/mangaassist/model-prep:model-prep-abc"
    by_uri = Template.from_stack(release_stack(with_prep(prod_cfg, job_image=uri)))
    (pull,) = with_action(by_uri, "ecr:BatchGetImage")
    assert (
        pull["Resource"] == "arn:aws:ecr:us-east-1:111122223333:repository/mangaassist/model-prep"
    )
    (token,) = with_action(by_uri, "ecr:GetAuthorizationToken")
    assert token["Resource"] == "*"
    image = prod_cfg.image.model_copy(update={"repository_name": "mangaassist-serving"})
    by_name = Template.from_stack(release_stack(prod_cfg.model_copy(update={"image": image})))
    (pull,) = with_action(by_name, "ecr:BatchGetImage")
    assert pull["Resource"]["Fn::Join"][1][-1] == ":repository/mangaassist-serving"


def test_ecr_repository_arn_reads_the_image_uri() -> None:
    assert ecr_repository_arn("123456789012.dkr.ecr.eu-west-1.amazonaws.com/a/b:t1") == (
        "arn:aws:ecr:eu-west-1:123456789012:repository/a/b"
    )
    assert ecr_repository_arn("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/r:t") == (
        "arn:aws-cn:ecr:cn-north-1:123456789012:repository/r"
    )


def test_s3_sources_groups_prefixes_by_bucket_and_ignores_other_schemes() -> None:
    assert s3_sources(["hf://org/m", "s3://b/x/y/", "s3://b/z", "s3://c/w", "s3://b/z"]) == {
        "b": ["x/y", "z"],
        "c": ["w"],
    }


def test_bucket_and_key_outlive_the_stack_but_not_a_failed_create(template) -> None:
    for kind in ("AWS::S3::Bucket", "AWS::KMS::Key"):
        (res,) = template.find_resources(kind).values()
        assert res["DeletionPolicy"] == "RetainExceptOnCreate", kind
        assert res["UpdateReplacePolicy"] == "Retain", kind


def test_outputs_export_bucket_key_and_role_for_the_tools(template) -> None:
    outputs = template.to_json()["Outputs"]
    assert {o["Export"]["Name"]: name for name, o in outputs.items()} == {
        "mangaassist-prod-model-artifact-bucket": "ArtifactBucketName",
        "mangaassist-prod-model-artifact-key-arn": "ArtifactKeyArn",
        "mangaassist-prod-model-prep-role-arn": "PrepRoleArn",
        "mangaassist-prod-bedrock-import-role-arn": BEDROCK_IMPORT_ROLE_OUTPUT,
    }
    assert outputs["ArtifactBucketName"]["Value"]["Ref"].startswith("ModelArtifactsBucket")
    assert outputs["ArtifactKeyArn"]["Value"]["Fn::GetAtt"][0].startswith("ModelArtifactsKey")
    assert outputs["PrepRoleArn"]["Value"]["Fn::GetAtt"][0].startswith("PreparationJobRole")


def test_a_configured_bucket_and_prefix_are_used_and_nag_still_passes(prod_cfg) -> None:
    """Every option on at once (custom bucket and prefix, job image, secret, an S3 base model):
    each wildcard the role gains is covered by a suppression with its reason, none more."""
    model = prod_cfg.model.model_copy(update={"source": "s3://base-weights/llama3/8b"})
    cfg = with_prep(
        prod_cfg.model_copy(update={"model": model}),
        artifact_bucket="team-llm-releases",
        artifact_prefix="releases/v1.x",
        hf_token_secret="hf/token",
        job_image="111122223333.dkr.ecr.us-east-1.amazonaws.com/prep:model-prep-abc",
    )
    stack = release_stack(cfg, nag=True)
    assembly = cdk.Stage.of(stack).synth()  # type: ignore[union-attr]
    errors = [
        m.entry.data
        for s in assembly.stacks
        for m in s.messages
        if m.level == cdk.cx_api.SynthesisMessageLevel.ERROR
    ]
    assert errors == []
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::S3::Bucket", {"BucketName": "team-llm-releases"})
    (write,) = with_action(template, "s3:PutObject")
    assert [_object_suffix(r) for r in as_list(write["Resource"])] == ["/releases/v1.x/*"]
    deny = _bucket_statement(template, "ManifestsOnlyByConditionalCreate")
    assert _object_suffix(deny["Resource"]) == "/releases/v1.x/*/manifest.json"


# ---------------------------------------------------------------------------- Bedrock import


def bedrock_role(template: Template) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (role,) = template.find_resources(
        "AWS::IAM::Role", {"Properties": {"Description": Match.string_like_regexp("Bedrock")}}
    ).values()
    (policy,) = template.find_resources(
        "AWS::IAM::Policy",
        {"Properties": {"PolicyName": Match.string_like_regexp("BedrockImport")}},
    ).values()
    return role, policy["Properties"]["PolicyDocument"]["Statement"]


def test_the_bedrock_import_role_trusts_only_import_jobs_of_this_account(template) -> None:
    role, _ = bedrock_role(template)
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "bedrock.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source = json.dumps(trust["Condition"]["ArnEquals"]["aws:SourceArn"])
    assert ":bedrock:" in source and ":model-import-job/*" in source


def test_the_bedrock_import_role_reads_only_the_packages_through_s3(template) -> None:
    _, found = bedrock_role(template)
    by_action = {s["Action"]: s for s in found}
    assert set(by_action) == {"s3:GetObject", "s3:ListBucket", "kms:Decrypt"}
    get = by_action["s3:GetObject"]
    assert get["Resource"]["Fn::Join"][1][-1] == "/models/bedrock-v1/*"
    listing = by_action["s3:ListBucket"]["Condition"]
    assert listing["StringLike"] == {"s3:prefix": ["models/bedrock-v1", "models/bedrock-v1/*"]}
    for statement in (get, by_action["s3:ListBucket"]):
        assert statement["Condition"]["StringEquals"] == {
            "aws:ResourceAccount": {"Ref": "AWS::AccountId"}
        }
    kms = by_action["kms:Decrypt"]
    assert kms["Resource"]["Fn::GetAtt"][0].startswith("ModelArtifactsKey")
    assert kms["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}


def test_without_bedrock_there_is_no_import_role(prod_cfg) -> None:
    cfg = prod_cfg.model_copy(
        update={"bedrock": prod_cfg.bedrock.model_copy(update={"enabled": False})}
    )
    template = Template.from_stack(release_stack(cfg))
    assert "BedrockImportRoleArn" not in template.to_json()["Outputs"]
    assert not template.find_resources(
        "AWS::IAM::Role", {"Properties": {"Description": Match.string_like_regexp("Bedrock")}}
    )
