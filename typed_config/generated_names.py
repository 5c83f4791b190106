"""Every AWS name the product derives from ``project`` and ``env``, one definition each, and the
config rule that keeps all of them within AWS's limits (typed_config/aws_limits.py).

Below the loader (it takes the two strings, not a DeploymentConfig), so ``DeploymentConfig``
can refuse a project and env whose names AWS would refuse, at synth, naming the longest
``project`` the ``env`` leaves room for; ``stack_names`` and ``derived`` (above the loader) build
their names through these functions, so the rule and the names cannot drift apart.

Each name is linear in ``len(project) + len(env)``: :func:`max_project_env_length` is the
largest sum every name fits, computed from the limits (tests/infra/test_name_limits.py
synthesizes dev and prod at it and refuses one character more).
"""

from __future__ import annotations

import re

from typed_config.aws_limits import (
    BEDROCK_IMPORTED_MODEL,
    CLOUDFORMATION_STACK,
    IAM_MANAGED_POLICY,
    S3_BUCKET,
    SAGEMAKER_TRAINING_JOB,
    NameLimit,
)

#: The stacks of one environment, ``<project>-<env>-<part>`` (typed_config/stack_names.py).
STACK_SUFFIXES = ("image", "endpoint", "model-release", "deploy-access", "execution-policy")
#: The CloudFormation execution policies, ``<project>-<env>-cfn-exec-<part>``.
EXECUTION_POLICY_PARTS = ("iam", "serving", "control")
#: A preparation job's creation time in its name (tools/prepare_model.py: ``time.strftime``).
JOB_TIME_FORMAT = "%m%d%H%M%S"
#: The longest values of the parts a name adds besides project and env: a 12-digit account id,
#: a release version (``m-`` and 16 hex: container/model_prep/release.py), a job's time.
LONGEST_ACCOUNT = "123456789012"
LONGEST_VERSION = "m-" + "f" * 16
LONGEST_TIME = "1231235959"


def env_prefix(project: str, env: str) -> str:
    """``<project>-<env>``: what every name of one environment starts with."""
    return f"{project}-{env}"


def stack_name(project: str, env: str, part: str) -> str:
    return f"{env_prefix(project, env)}-{part}"


def execution_policy_name(project: str, env: str, part: str) -> str:
    return f"{env_prefix(project, env)}-cfn-exec-{part}"


def models_bucket_name(project: str, env: str, account: str) -> str:
    """The artifact bucket when ``model_prep.artifact_bucket`` names none."""
    return f"{env_prefix(project, env)}-models-{account}"


def capture_bucket_name(project: str, env: str, account: str) -> str:
    return f"{env_prefix(project, env)}-capture-{account}"


def preparation_job_prefix(project: str, env: str) -> str:
    return f"{env_prefix(project, env)}-prep-"


def preparation_job_version_prefix(project: str, env: str, version: str) -> str:
    return f"{preparation_job_prefix(project, env)}{version[2:]}-"


def bedrock_package_job_prefix(project: str, env: str, version: str) -> str:
    return f"{preparation_job_prefix(project, env)}bedrock-{version[2:]}-"


def training_job_name(prefix: str, stamp: str) -> str:
    """A preparation or packaging job: its prefix, then its creation time
    (:data:`JOB_TIME_FORMAT`)."""
    return f"{prefix}{stamp}"


#: Hex digits of the Bedrock package's digest in an imported model's name.
BEDROCK_DIGEST_CHARS = 12


def name_slug(text: str) -> str:
    """Runs of anything but letters and digits as one ``-`` (Bedrock's names hold hyphen-separated
    runs of letters and digits)."""
    return re.sub(r"[^0-9a-zA-Z]+", "-", text).strip("-")


def bedrock_model_prefix(project: str, env: str) -> str:
    """What every imported model of this environment is named with."""
    return f"{name_slug(project)}-{name_slug(env)}-"


def imported_model_name(project: str, env: str, model: str, digest: str) -> str:
    """``<project>-<env>-<model>-<12 hex of the digest>``, within Bedrock's 63 characters (the
    model part is shortened, never the digest: it is what makes a re-run find its import)."""
    tail = f"-{digest[:BEDROCK_DIGEST_CHARS]}"
    head = bedrock_model_prefix(project, env)
    room = BEDROCK_IMPORTED_MODEL.max_length - len(head) - len(tail)
    return f"{head}{name_slug(model)[:room].strip('-')}{tail}"


def bedrock_model_name_errors(project: str, env: str, models: list[str]) -> list[str]:
    """``bedrock.models: why`` where two models would import under one name: the name keeps
    letters and digits only (``jp_style`` and ``jp-style`` are one) and the model part is cut to
    what Bedrock's 63 characters leave beside project and env. The second import would find
    the first's model and skip, and the first's would be deleted as no longer named."""
    errors: list[str] = []
    seen: dict[str, str] = {}
    for model in models:
        name = imported_model_name(project, env, model, "0" * BEDROCK_DIGEST_CHARS)
        if name in seen:
            errors.append(
                f"bedrock.models: {seen[name]!r} and {model!r} would both import as "
                f"{name[: -BEDROCK_DIGEST_CHARS - 1]!r} (Bedrock's names keep letters and "
                f"digits, {BEDROCK_IMPORTED_MODEL.max_length} characters at most: "
                f"{BEDROCK_IMPORTED_MODEL.source}); rename one adapter"
            )
        seen.setdefault(name, model)
    return errors


def project_env_names(project: str, env: str) -> list[tuple[str, NameLimit]]:
    """Every name built from ``project`` and ``env``, each at its longest, with AWS's limit."""
    account, version, stamp = LONGEST_ACCOUNT, LONGEST_VERSION, LONGEST_TIME
    names = [(stack_name(project, env, s), CLOUDFORMATION_STACK) for s in STACK_SUFFIXES]
    names += [
        (execution_policy_name(project, env, p), IAM_MANAGED_POLICY) for p in EXECUTION_POLICY_PARTS
    ]
    names += [
        (models_bucket_name(project, env, account), S3_BUCKET),
        (capture_bucket_name(project, env, account), S3_BUCKET),
    ]
    for prefix in (
        preparation_job_version_prefix(project, env, version),
        bedrock_package_job_prefix(project, env, version),
    ):
        names.append((training_job_name(prefix, stamp), SAGEMAKER_TRAINING_JOB))
    return names


def max_project_env_length() -> int:
    """The most characters ``project`` and ``env`` may have together: every name is the two
    plus fixed parts, so the tightest limit less its name's fixed part."""
    return min(limit.max_length - (len(name) - 2) for name, limit in project_env_names("p", "e"))


def project_env_name_errors(project: str, env: str) -> list[str]:
    """``project: why`` for each name AWS would refuse, with the fix."""
    budget = max_project_env_length()
    errors = []
    if len(project) + len(env) > budget:
        name, limit = max(
            project_env_names(project, env), key=lambda n: len(n[0]) - n[1].max_length
        )
        errors.append(
            f"project: {project!r} ({len(project)} characters) with env {env!r} "
            f"({len(env)}) makes the {limit.what} {name!r} {len(name)} characters, beyond "
            f"AWS's {limit.max_length} ({limit.source}); project and env may have "
            f"{budget} characters together: shorten project to at most "
            f"{max(budget - len(env), 0)} characters"
        )
    refused: set[str] = set()
    for name, limit in project_env_names(project, env):
        shape = limit.shape_problems(name)
        if shape and limit.what not in refused:  # one line per kind of name
            refused.add(limit.what)
            errors.append(
                f"project: {project!r} with env {env!r} makes the {limit.what} {name!r}, "
                f"which AWS refuses: {'; '.join(shape)} ({limit.source}); choose another "
                "project name"
            )
    return errors


def base_component_name(project: str, env: str) -> str:
    """The base model's inference component, ``<project>-<env>-base`` (issue 45)."""
    return f"{env_prefix(project, env)}-base"


def adapter_component_name(project: str, env: str, adapter: str) -> str:
    """One adapter's inference component, ``<project>-<env>-lora-<adapter>`` with ``_`` as ``-``
    (an InferenceComponentName is letters, digits and hyphens; issue 45)."""
    return f"{env_prefix(project, env)}-lora-{adapter.replace('_', '-')}"


#: The one object an adapter version is published as (:func:`adapter_artifact_key`).
ADAPTER_ARCHIVE = "adapter.tar.gz"


def adapter_artifact_key(adapter: str, version: str) -> str:
    """Where one adapter version is published on its own in the models bucket (issue 45):
    the archive ``adapters/<adapter>/<version>/adapter.tar.gz`` (its ``manifest.json`` beside it).

    An archive, not a prefix: an adapter component's ``Container.ArtifactUrl`` "must point to a
    single gzip compressed tar archive (.tar.gz suffix)" (SageMaker API reference,
    InferenceComponentContainerSpecification, and botocore's sagemaker service model;
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentContainerSpecification.html).
    tools/adapter_release/publish.py builds and uploads it."""
    return f"adapters/{adapter}/{version}/{ADAPTER_ARCHIVE}"
