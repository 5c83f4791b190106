"""The promotion section: where an environment's releases come from, never built there.

Optional. With it (prod's ``promotion: {from_env: dev}``), the release workflow builds nothing
for this environment: it copies the image the source environment's job pushed, by its digest,
into this environment's repository (``make promote-image``), and the model release that image
bakes, by its manifest, into this environment's bucket (``make promote-model``), verifying each
against the digests the source job recorded (``make release-record``); then it deploys that
digest (tools/release_artifacts.py; docs/release-from-ci.md, "Build once, promote by digest").

The source environment's config (``config/<from_env>.yaml``) names its repository, bucket and
region. Both environments in one account and region: the deploy role of this environment reads
the source's repository and release prefix (stacks/deploy_access_stack.py). A source in another
account or region is refused (the source's repository, bucket and key policies would have to
let this account read: not built).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from typed_config.base import ENV_PATTERN, Strict


class PromotionConfig(Strict):
    """Promote the source environment's release here instead of building one."""

    from_env: Annotated[str, Field(pattern=ENV_PATTERN)]
    """The environment whose release is promoted (config/<from_env>.yaml): it built the image and
    prepared the model release, and its deploy ran them first."""
