"""`local_backend.__all__` is exactly the documented public surface."""

import local_backend


def test_all_is_the_documented_surface_and_sorted():
    assert local_backend.__all__ == [
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
    assert all(hasattr(local_backend, name) for name in local_backend.__all__)
