"""The sizing and planning model: what one instance holds and serves, how fast, the scaling
target, scale-out and deploy times, what a deploy does to the fleet, and the plan ``make synth``
prints. Pure Python: it imports the typed config (``typed_config``) and the serving container's
contracts below it, never the CDK (``stacks``), the simulator or the tools above it.

``sizing.fit_checks`` is the one way to read a config to act on it (``load_config``): the
config's own rules plus the ones that need this model.
"""
