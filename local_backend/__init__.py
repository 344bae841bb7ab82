"""kvwise local backend: a small PyTorch inference engine with a paged KV cache and prefix caching."""

from local_backend.kernels.openmp_wait import choose_spin_count

choose_spin_count()  # before the imports below load torch and its OpenMP runtime

from local_backend.engine.engine import Engine  # noqa: E402
from local_backend.engine.engine_config import EngineConfig  # noqa: E402
from local_backend.engine.outputs import Completion, EngineStats, FinishReason, StepOutput, StreamDelta, Timings  # noqa: E402
from local_backend.sampling.sampling_params import SamplingParams  # noqa: E402

__all__ = [
    "Completion",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "FinishReason",
    "SamplingParams",
    "StepOutput",
    "StreamDelta",
    "Timings",
]
