"""The bedrock section: Amazon Bedrock Custom Model Import as a second promotion target for the
same model release (docs/bedrock.md).

Optional and off by default: SageMaker with the product's own vLLM container stays the primary
target (seeds 002, section 11: multi-LoRA, prefix caching and the product's health logic are
SageMaker-only). With ``enabled: true``, ``make bedrock-package`` builds the release's package
(container/model_prep/bedrock_package.py) and ``make bedrock-import`` imports the ``models`` named
here, records each imported model's ARN against the release version and deletes the imports of
this environment that the config no longer names. The ModelReleaseStack then carries the import
job's service role (stacks/constructs/bedrock_import.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from container.model_prep.bedrock_rules import BASE_MODEL_DIR as BASE_MODEL
from typed_config.base import Strict, section_rule, worded

#: Regions Custom Model Import runs in ("Import a customized model into Amazon Bedrock", Bedrock
#: User Guide, https://docs.aws.amazon.com/bedrock/latest/userguide/model-customization-import-model.html:
#: US East (N. Virginia), US East (Ohio), US West (Oregon), Europe (Frankfurt)).
IMPORT_REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-central-1")

_MODEL_NAME = worded(
    r"^[A-Za-z0-9_-]+$", "an adapter name (letters, digits, _ and -) from adapters, e.g. support_ja"
)


class BedrockConfig(Strict):
    """Which of the release's Bedrock package models are imported, and what the plan assumes of
    a copy until an import reports its own figures."""

    enabled: bool = False
    """True: the release's Bedrock package is built and the named models imported as a fallback
    target."""
    models: Annotated[list[Annotated[str, Field(pattern=_MODEL_NAME)]], Field(min_length=1)] = [
        BASE_MODEL
    ]
    """The package's models to import: ``base`` and/or adapter names (each adapter's merged model).
    An imported model of this environment whose name is no longer here is deleted by ``make
    bedrock-import`` after the new imports pass their smoke check."""
    custom_model_units_per_copy: Annotated[int, Field(ge=1, le=64)] = 2
    """Custom Model Units one copy of a model takes. Bedrock decides it at import (GetImportedModel
    ``customModelUnits.customModelUnitsPerModelCopy``); the plan uses this until then. 2: what a
    Llama-3-8B-architecture import was given (a public measurement quoted in docs/bedrock.md); AWS
    publishes no rule for it."""
    copy_requests_per_minute: Annotated[float, Field(gt=0)] = 326.0
    """Requests per minute one model copy serves, for the plan's copies at the peak. AWS publishes
    no per-copy throughput; 326: a public measurement of an 8B Llama-architecture import (2 CMUs)
    answering 560 requests at concurrency 8 in 103 s (docs/bedrock.md cites it; its request lengths
    are not this product's). Replace it with a measurement of the imported model at the product's
    request shape."""
    import_timeout_seconds: Annotated[int, Field(ge=300, le=6 * 3600)] = 3600
    """Seconds the import job may take before make bedrock-import stops following it (the job runs
    on). AWS states no bound; a public 8B import took 10 minutes."""

    @section_rule
    def _unique_models(self) -> BedrockConfig:
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"models: each model once, got {self.models}")
        return self


def bedrock_errors(bedrock: BedrockConfig, *, region: str, adapters: list[str]) -> list[str]:
    """The bedrock section's rules across sections: a model that is neither the base nor an
    adapter, and a region Custom Model Import does not run in."""
    errors = []
    unknown = [m for m in bedrock.models if m != BASE_MODEL and m not in adapters]
    if unknown:
        errors.append(
            f"bedrock.models: {unknown} are neither {BASE_MODEL!r} nor an adapter ({adapters})"
        )
    if bedrock.enabled and region not in IMPORT_REGIONS:
        errors.append(
            f"bedrock.enabled: region {region} has no Custom Model Import (it runs in "
            f"{', '.join(IMPORT_REGIONS)})"
        )
    return errors
