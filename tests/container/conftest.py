"""Fixtures for the serving tests: see _serving_support (tiny model, model_prep output, ONE
vLLM server per session through the real entrypoint)."""

from _serving_support import model_dir, s3_api, server, tiny_src

__all__ = ["model_dir", "s3_api", "server", "tiny_src"]
