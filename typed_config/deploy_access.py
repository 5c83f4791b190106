"""The deploy_access section: who may release this environment from GitHub Actions (OIDC).

Optional. Without it the app has no ``<project>-<env>-deploy-access`` stack, and ``make
deploy-access`` stops naming the fields to set. With it, DeployAccessStack
(stacks/deploy_access_stack.py) creates one IAM role for this environment that only jobs of the
named GitHub environments of the named repository can assume, with exact subject claims
(GitHub docs, "OpenID Connect", filtering for a specific environment:
``repo:<orgName/repoName>:environment:<environmentName>``,
https://docs.github.com/en/actions/concepts/security/openid-connect).

No placeholder belongs in a committed config: a role that trusts ``your-org/...`` trusts
whoever owns that GitHub name. Hence no default repository and no section in config/*.yaml
until someone names the real one.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from typed_config.base import Strict, worded

#: A GitHub owner (user or organization): letters, digits and single inner hyphens, at most 39
#: characters; a repository name: letters, digits, ``.``, ``_``, ``-``, at most 100, never
#: ``.`` or ``..`` (the names GitHub lets one create).
_OWNER = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_SCHEMA_REPOSITORY = r"^[A-Za-z0-9]+(-[A-Za-z0-9]+)*/[A-Za-z0-9._-]{1,100}$"

#: A GitHub environment name as it appears in the subject claim. GitHub allows more (spaces,
#: up to 255 characters); this keeps names that no IAM or shell quoting can misread: no ``*``
#: or ``?`` (wildcards under StringLike), no ``:`` (the claim's separator).
GitHubEnvironment = Annotated[
    str,
    Field(
        pattern=worded(
            r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
            "a GitHub environment name: up to 100 letters, digits, dots, _ and -, e.g. prod",
        )
    ),
]


class ImmutableIds(Strict):
    """The numeric ids GitHub puts in an immutable subject claim
    (``repo:<owner>@<owner_id>/<name>@<repository_id>:...``): on by default for repositories
    created or renamed from 2026-07-15, opt-in for older ones (GitHub changelog, "Immutable
    subject claims for GitHub Actions OIDC tokens",
    https://github.blog/changelog/2026-04-23-immutable-subject-claims-for-github-actions-oidc-tokens/).
    The ids never change and are never reused, so a renamed or recreated name cannot match."""

    owner_id: Annotated[int, Field(ge=1)]
    """The numeric id of the repository's owner (GitHub's API: ``owner.id``)."""
    repository_id: Annotated[int, Field(ge=1)]
    """The repository's numeric id (GitHub's API: ``id``)."""


class DeployAccessConfig(Strict):
    """The GitHub Actions deploy role of this environment (DeployAccessStack)."""

    repository: Annotated[str, Field(json_schema_extra={"pattern": _SCHEMA_REPOSITORY})]
    """The repository whose workflows deploy: OWNER/NAME, spelled as GitHub shows it (the subject
    claim carries it, and the trust policy compares it exactly). The pattern is for editors
    (config/schema.json); the validator below is the rule, with its message."""
    oidc_provider: Literal["create", "existing"]
    """``create``: this environment's stack creates the account's GitHub OIDC provider;
    ``existing``: it imports the one already there. IAM holds one provider per URL per account, so
    where dev and prod share an account exactly one of them says ``create`` (deploy that one first),
    and every other says ``existing``."""
    github_environments: (
        Annotated[list[GitHubEnvironment], Field(min_length=1, max_length=10)] | None
    ) = None
    """The GitHub environments whose jobs may assume the role, each an exact subject (default: the
    config's env name). Prod typically lists the canary deploy's environment and the promotion's,
    e.g. [prod, prod-promote], each with its own required reviewers."""
    immutable_ids: ImmutableIds | None = None
    """Set when the repository emits immutable subject claims (see ImmutableIds)."""
    max_session_hours: Annotated[int, Field(ge=1, le=12)] = 1
    """A floor for the role's MaxSessionDuration (IAM allows 1 to 12 hours). The role gets at least
    the longest session its release jobs ask for (sizing/release_jobs.py: each job's bound from its
    steps' own limits), so this is only for a longer hand-run session."""

    @field_validator("repository")
    @classmethod
    def _owner_slash_name(cls, value: str) -> str:
        owner, slash, name = value.partition("/")
        if (
            not slash
            or not _OWNER.fullmatch(owner)
            or len(owner) > 39
            or not _NAME.fullmatch(name)
            or len(name) > 100
            or name in (".", "..")
        ):
            raise ValueError(
                f"{value!r} is not OWNER/NAME of a GitHub repository (OWNER: letters, digits "
                "and single inner hyphens, at most 39; NAME: letters, digits, '.', '_', '-', "
                "at most 100), e.g. my-org/mangaassist-serving"
            )
        return value

    @field_validator("github_environments")
    @classmethod
    def _unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len({v.lower() for v in value}) != len(value):
            # GitHub environment names are case-insensitive: two spellings are one environment.
            raise ValueError(f"lists an environment twice: {value}")
        return value
