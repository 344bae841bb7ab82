"""Giving a built engine another op set, for tests that pin a kernel choice the machine would measure otherwise."""

from __future__ import annotations

from local_backend import Engine
from local_backend.kernels.ops import TorchOps


def run_on(engine: Engine, form: TorchOps) -> None:
    """Give every module of the engine (and its sampler and runner) the op set `form`."""
    for module in engine.runner.model.modules():
        if hasattr(module, "ops"):
            module.ops = form
    engine.runner.sampler.ops = form
    engine.runner.paged_decodes = form.paged_decodes
    engine.reset_prefix_cache()
