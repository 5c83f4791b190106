"""Every AWS call the release tools make in this suite, by the principal that makes it in a release
(one instance, imported by its full name, as tests/lambdas/aws_calls.py).

Which principal runs each tool, from the workflows' steps and the make targets they call
(.github/workflows/release.yml, pull-request.yml; Makefile, mk/*.mk; docs/release-from-ci.md,
"What each job does, and what it refuses"):

- ``deploy role`` (DeployAccessStack's ``Deploy``, each environment's own): every AWS call of the
  release jobs ``dev``, ``prod-canary``, ``canary-wait`` and ``promote``: tools/deploy.py (``make
  deploy``), tools/canary.py (``canary-start``, ``canary-wait``), tools/promote.py (``make
  promote``), tools/push_image.py (``push-image``), tools/model_release.py (``fetch-model``,
  push-image's prerequisite), tools/release_artifacts.py (``release-record``, ``promote-image``,
  ``promote-model``), tools/prepare_model.py (``prepare-model``), tools/live_images.py
  (``deploy-repository``'s keep-tags), tools/adapter_release/ (``make release-adapter``: a
  release of one adapter, run by the same deploy jobs as ``make deploy``), and the preflight's
  token secret check (tools/preflight.py ``token_secret_check`` and the ``release_stack_output``
  it calls: ``--for prepare-model`` only).
- ``preflight`` (judged as both roles): the rest of tools/preflight.py, which ``make diff`` runs
  under the read-only ``diff role`` too (pull-request.yml ``diff-dev``: ``make diff ENV=dev``,
  whose preflight is ``--for deploy``: credentials, bootstrap, the execution role, quotas, the
  scaling role).
- ``canary controller``: what the rehearsal's fake account (tests/infra/fake_account.py) does as
  the controller Lambda, with the controller's own code; its role is judged by
  tests/lambdas/test_zz_authorization.py, not here. The controller's modules called by a tool
  (tools/deploy.py releasing the canary's scaling) are that tool's calls.
- ``bedrock-import caller``: tools/bedrock_import.py. Not a product role: no workflow runs
  ``make bedrock-import`` and the deploy role does not grant it (docs/bedrock.md, "The role"): a
  person's credentials. Recorded because its CreateModelImportJob says what the Bedrock import
  role (the product's) reads.
- tools/bedrock_package.py is judged as the deploy role's: no workflow runs it yet, but its
  packaging job is named as a preparation job "so the deploy role may run it" (docs/bedrock.md,
  "Where it runs"); the job itself runs under the preparation job's role (judged from the job's
  code, tools/authorization/jobs.py).

Not recorded, being no product role's: ``make deploy-execution-policy``, ``deploy-model-release``,
``deploy-access`` and ``cdk bootstrap`` (a person's own credentials: docs/release-from-ci.md,
"One-time set-up"), and tools/model_release.py ``local`` (a local S3 API, no AWS).
"""

from __future__ import annotations

from pathlib import Path

from tools.authorization.recorder import Recorder

_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_ROLE = "deploy role"
DIFF_ROLE = "diff role"
PREFLIGHT = "preflight"
CONTROLLER = "canary controller"
BEDROCK_IMPORT_CALLER = "bedrock-import caller"
NOT_A_ROLE = "no product role"
#: ``{fragment of <file>:<function>: principal}``; the first that matches a frame wins, so the
#: function-specific fragments come before their file's.
PRINCIPALS = {
    # A test's own stand-in called by a tool (a Stubber's hook writing the job's logs): the test's.
    f"{_ROOT}/tests/infra/test_": NOT_A_ROLE,
    f"{_ROOT}/tools/model_release.py:cmd_local": NOT_A_ROLE,
    f"{_ROOT}/tools/preflight.py:token_secret_check": DEPLOY_ROLE,
    f"{_ROOT}/tools/preflight.py:release_stack_output": DEPLOY_ROLE,  # token_secret_check's
    f"{_ROOT}/tools/preflight.py:": PREFLIGHT,
    **{
        f"{_ROOT}/tools/{tool}.py:": DEPLOY_ROLE
        for tool in (
            "deploy",
            "canary",
            "promote",
            "push_image",
            "model_release",
            "release_artifacts",
            "prepare_model",
            "live_images",
        )
    },
    # make release-adapter: a release step of the deploy jobs, as make deploy (issue 45).
    f"{_ROOT}/tools/adapter_release/": DEPLOY_ROLE,
    f"{_ROOT}/tools/bedrock_import.py:": BEDROCK_IMPORT_CALLER,
    f"{_ROOT}/tools/bedrock_package.py:": DEPLOY_ROLE,
    f"{_ROOT}/tests/infra/fake_account.py:": CONTROLLER,
}

#: Installed by conftest.py for the session; test_zz_authorization.py (collected last) judges
#: the calls against the roles dev and prod synthesize.
AWS_CALLS = Recorder(PRINCIPALS)
