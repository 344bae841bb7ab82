"""The one list of sampling knobs: the `SamplingParams` fields a request sets under their own name.

The server's request fields (`server/fields.py`, `server/sampling.py`, the OpenAPI schema) and the
engine's defaults from `generation_config.json` (`engine/engine_config.py`) all derive from it, so a
knob is added here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Knob:
    """One `SamplingParams` field a request may set, by the same name."""

    name: str
    kind: type
    """Its JSON type: `float` (an integer is accepted), `int` or `bool`."""
    generation_default: bool = False
    """Whether a checkpoint's `generation_config.json` may set its default (vLLM reads the same key)."""


SAMPLING_KNOBS: Final = (
    Knob("temperature", float, generation_default=True),
    Knob("top_p", float, generation_default=True),
    Knob("top_k", int, generation_default=True),
    Knob("min_p", float, generation_default=True),
    Knob("seed", int),
    Knob("frequency_penalty", float),
    Knob("presence_penalty", float),
    Knob("repetition_penalty", float, generation_default=True),
    Knob("ignore_eos", bool),
)
"""Every knob, in the order the server's tables list them (`top_k`, `min_p`, `repetition_penalty`,
`ignore_eos` are vLLM extras)."""
