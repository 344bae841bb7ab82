"""kvwise local backend: a small PyTorch inference engine with a paged KV cache and prefix caching."""

from local_backend.engine import Engine
from local_backend.engine_config import EngineConfig
from local_backend.outputs import Completion, EngineStats, FinishReason, StepOutput, StreamDelta, Timings
from local_backend.sampling_params import SamplingParams

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
