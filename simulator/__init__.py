"""Scaling policy simulator: replay traffic against the scaling policy in config/<env>.yaml.

The policy is read from the same ``DeploymentConfig`` the stacks synthesize (never a second copy);
per-instance capacity comes from the engine settings and ``sizing.capacity.estimate``. Everything
the config cannot know (provisioning delay, decode speed, alarm datapoint resolution) is an
explicit :class:`simulator.assumptions.Assumptions` value with a command-line option.
"""
