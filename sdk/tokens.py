"""A rough token count, for the steps that weigh a prompt before any tokenizer has seen it.

Cache hints, fan-out and lint compare a prefix with a provider's minimum cacheable length, and a
stream's watch estimates the usage a server did not report: all with this one count, at the SDK's
root so that no step imports another for it.
"""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 4  # a conservative estimate for English text and JSON


def estimate_tokens(value: Any) -> int:
    """A rough token count of a JSON-able value: characters / 4."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return len(text) // CHARS_PER_TOKEN
