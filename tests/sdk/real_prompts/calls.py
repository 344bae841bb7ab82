"""Calls from a process of its own: `python -m tests.sdk.real_prompts.calls <file.json>`.

The JSON file names the base URL, whether to wrap (with the default `sdk.Policy()` and the default
store: the SQLite file under $XDG_CACHE_HOME, which the parent sets per user), and the calls: each
a model, a system prompt and a user turn, sent once through a real `openai` client. Each prompt is another
prompt family, so each call is its family's one call in this process: the first call a CLI agent
or a serverless function makes, learning only what earlier processes left in the store. It prints
each call's usage (input and cached tokens), in order, as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openai

import sdk


def main(spec: dict[str, Any]) -> list[dict[str, int]]:
    """Send the calls; return each one's usage as the server reported it (input and cached tokens)."""
    client = openai.OpenAI(base_url=spec["base_url"], api_key="test-key", max_retries=0)
    client = sdk.wrap(client) if spec["wrap"] else client
    usage: list[dict[str, int]] = []
    for call in spec["calls"]:
        response = client.chat.completions.create(
            model=call["model"],
            max_tokens=16,
            messages=[{"role": "system", "content": call["system"]}, {"role": "user", "content": call["user"]}],
        )
        assert response.usage is not None
        details = response.usage.prompt_tokens_details
        usage.append({"input": response.usage.prompt_tokens, "cached": (details.cached_tokens if details else 0) or 0})
    return usage


if __name__ == "__main__":
    print(json.dumps(main(json.loads(Path(sys.argv[1]).read_text()))))
