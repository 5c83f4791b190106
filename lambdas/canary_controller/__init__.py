"""The canary rollout controller Lambda (handler ``canary_controller.handler.handler``).

Imports nothing itself: the stacks import ``names`` and ``rules`` at synth without boto3.
"""
