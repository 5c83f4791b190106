"""The model_prep section: the SageMaker job that prepares a model release, and where releases live.

A prepared model (container/model_prep/release.py) is published under
``s3://<artifact bucket>/<artifact_prefix>/<version>/``; its version is derived from the config's
model inputs (``typed_config.derived.release_inputs``), so ``make prepare-model`` and ``make
build-image`` agree on it without anyone copying a version around. ``model.artifact`` pins
another one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator

from typed_config.aws_limits import S3_BUCKET
from typed_config.base import Strict, section_rule, worded

#: CreateTrainingJob StoppingCondition: MaxRuntimeInSeconds is at most 28 days (SageMaker API
#: reference, StoppingCondition).
MAX_TRAINING_RUNTIME_SECONDS = 28 * 24 * 3600
#: Where releases are downloaded to and verified before a build bakes one (ignored by git):
#: ``build/model-artifacts/<version>/`` in the clone (parents[1]: typed_config/ sits at its root),
#: the image build's ``model-artifact`` context.
ARTIFACTS_DIR = Path(__file__).resolve().parents[1] / "build" / "model-artifacts"
_BUCKET = worded(
    r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
    "an S3 bucket name: 3-63 lowercase letters, digits, dots and dashes, starting and ending with "
    "a letter or digit, e.g. shop-models-123456789012 (a name, not an s3:// URI)",
)

_INSTANCE_TYPE = worded(
    r"^ml\.[a-z0-9]+\.[a-z0-9]+$", "a SageMaker instance type, e.g. ml.g6e.xlarge or ml.g5.2xlarge"
)
_PREFIX = worded(
    r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$",
    "an S3 key prefix of up to 201 letters, digits, dots, _, - and /, without a leading /, e.g. "
    "models or teams/shop/models",
)
_SECRET = worded(
    r"^[A-Za-z0-9/_+=.@-]{1,512}$",
    "a Secrets Manager secret name: letters, digits and /_+=.@-, e.g. shop/hf-token",
)
_JOB_IMAGE = worded(
    r"^[0-9]{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[a-z0-9._/-]+:[A-Za-z0-9_.-]+$",
    "an ECR image URI with its tag: <account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>, "
    "e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/shop-vllm:model-prep-1",
)


class ModelPrepConfig(Strict):
    """The preparation job (``make prepare-model``) and the artifact bucket.

    Defaults sized by measurement (docs/measurements/model_prep_h100.md, an 8B-architecture
    model on one H100): the quality gate peaks at 16.8 GiB of GPU memory (the whole bf16 model),
    quantization at 20.3 GiB of host memory (the bf16 weights; one layer at a time on the GPU);
    the job took 529 s there. An ml.g6e.xlarge (L40S 48 GB, 32 GiB) holds both with room; its
    time, ~24 min, is extrapolated by dense bf16 compute (362 vs 990 TFLOP/s). max_runtime is
    about 3x that; the volume holds the bf16 base (16.06 GB), the W4A16 result (5.73 GB) and
    working space, x1.5.
    """

    instance_type: Annotated[str, Field(pattern=_INSTANCE_TYPE)] = "ml.g6e.xlarge"
    """The SageMaker training instance the preparation job runs on (``ml.<family>.<size>``, e.g.
    ml.g6e.xlarge): its GPU must hold the bf16 model for the quality gate."""
    volume_size_gb: Annotated[int, Field(ge=30, le=16384)] = 40
    """The job's EBS volume in GB: the bf16 base, the quantized result and working space."""
    max_runtime_seconds: Annotated[int, Field(ge=600, le=MAX_TRAINING_RUNTIME_SECONDS)] = 4500
    """The job's time limit in seconds (SageMaker StoppingCondition MaxRuntimeInSeconds)."""
    use_spot: bool = False
    """Managed spot training: cheaper, may wait for capacity; max_wait_seconds bounds it."""
    max_wait_seconds: Annotated[int, Field(ge=600, le=MAX_TRAINING_RUNTIME_SECONDS)] | None = None
    """With use_spot: seconds to wait for spot capacity and run, together (MaxWaitTimeInSeconds, at
    least max_runtime_seconds)."""
    artifact_bucket: Annotated[str, Field(pattern=_BUCKET)] | None = None
    """The bucket the ModelReleaseStack creates (default ``<project>-<env>-models-<account>``)."""
    artifact_prefix: Annotated[str, Field(pattern=_PREFIX)] = "models"
    """Key prefix of the model releases in the artifact bucket (``<prefix>/<version>/``)."""
    hf_token_secret: Annotated[str, Field(pattern=_SECRET)] | None = None
    """Secrets Manager secret (name) with the Hugging Face token for gated base models."""
    job_image: (
        Annotated[
            str,
            Field(pattern=_JOB_IMAGE),
        ]
        | None
    ) = None
    """The job image (an ECR URI); default: built from container/Dockerfile.model-prep and pushed to
    the serving repository as ``model-prep-<digest>``."""

    @field_validator("artifact_bucket")
    @classmethod
    def _bucket_s3_accepts(cls, value: str | None) -> str | None:
        """S3's rules beyond the pattern: no ``..``, no IP address, no reserved prefix or
        suffix (typed_config/aws_limits.py S3_BUCKET, its page)."""
        problems = [] if value is None else S3_BUCKET.shape_problems(value)
        if problems:
            raise ValueError(
                f"{value!r}: S3 refuses it ({'; '.join(problems)}; {S3_BUCKET.source})"
            )
        return value

    @section_rule
    def _spot_wait(self) -> ModelPrepConfig:
        # CreateTrainingJob: MaxWaitTimeInSeconds is for managed spot training only and must be
        # at least MaxRuntimeInSeconds (SageMaker API reference, StoppingCondition).
        if self.max_wait_seconds is not None and not self.use_spot:
            raise ValueError("max_wait_seconds: only used with use_spot: true")
        if self.use_spot and (self.max_wait_seconds or 0) < self.max_runtime_seconds:
            raise ValueError(
                f"max_wait_seconds: with use_spot it must be >= max_runtime_seconds "
                f"({self.max_runtime_seconds})"
            )
        return self


#: Hugging Face model repositories that are gated: a download needs the token of an account that
#: accepted the model's license on its page ("Gated models", Hugging Face Hub documentation; the
#: Llama and Gemma model cards ask for the license to be accepted before access). The rule is
#: this list of ``hf://`` prefixes, decided here from those model cards, not asked of Hugging Face
#: (synth is offline): a gated model outside it still fails in the job, with a 401, so name
#: ``model_prep.hf_token_secret`` for it as well.
GATED_HF_PREFIXES = ("hf://meta-llama/", "hf://google/gemma")


def is_gated(source: str) -> bool:
    """Whether ``source`` is a gated Hugging Face model by :data:`GATED_HF_PREFIXES`."""
    return source.startswith(GATED_HF_PREFIXES)


def gated_source_errors(model_source: str, model_prep: ModelPrepConfig) -> list[str]:
    """A gated base model with no token secret: the job would start its GPU instance, then fail
    its download with 401. Refused at synth instead, naming the field."""
    if is_gated(model_source) and model_prep.hf_token_secret is None:
        return [
            f"model_prep.hf_token_secret: model.source {model_source} is gated on Hugging "
            "Face (its license must be accepted): name the Secrets Manager secret holding a "
            "token of an account that accepted it (the preparation job reads it; `make "
            "preflight` checks the secret exists and that the job role may read it)"
        ]
    return []


def artifact_dir(version: str) -> Path:
    return ARTIFACTS_DIR / version
