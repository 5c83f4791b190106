"""Every AWS call the Lambdas' own code makes in this suite, by principal (one instance, imported
by its full name: conftest.py itself is also imported under a second name by the tests)."""

from tools.authorization.recorder import Recorder

#: Installed by conftest.py for the session; test_zz_authorization.py (collected last) judges
#: the calls against the roles prod synthesizes.
AWS_CALLS = Recorder(
    {"lambdas/canary_controller/": "canary controller", "lambdas/smoke_gate/": "smoke gate"},
    not_ours=("/tests/",),
)
