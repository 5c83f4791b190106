"""``make release-adapter ENV=... ADAPTER=name VERSION=v``: one adapter version to a live endpoint
in the component shape, with no image build and no base redeploy.

    publish.py   the adapter out of the prepared model release: its quality gate alone, then
                 published on its own under adapters/<name>/<version>/ with a manifest
    rollout.py   a candidate component beside the live one, evidence by the canary's rules, the
                 swap, a watch, rollback alone (its docstring: what SageMaker gives, what the
                 product adds)
    target.py    the names and settings one release acts on, from the config
    __main__.py  the command line (``python -m tools.adapter_release``)
"""
