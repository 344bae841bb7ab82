"""One call from a process of its own: `python -m tests.sdk.prompt.one_call '<json>'` prints its usage as JSON.

How serverless functions, CLI agents and per-item batch workers call: a fresh process, a client,
one call, exit. The JSON names the client package (`openai`: Chat Completions; `anthropic`:
Messages), the base URL, the model, the system prompt, the user's message and whether to wrap.
"""

from __future__ import annotations

import json
import sys

import sdk


def main(spec: dict[str, object]) -> dict[str, int]:
    system, user, model = str(spec["system"]), str(spec["user"]), str(spec["model"])
    if spec["package"] == "anthropic":
        import anthropic

        client = anthropic.Anthropic(base_url=str(spec["base_url"]), api_key="test-key", max_retries=0)
        client = sdk.wrap(client) if spec["wrap"] else client
        message = client.messages.create(
            model=model, max_tokens=16, system=system, messages=[{"role": "user", "content": user}]
        )
        usage = message.usage
        read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        return {"cached": read, "input": usage.input_tokens + read + written}
    import openai

    chat = openai.OpenAI(base_url=str(spec["base_url"]), api_key="test-key", max_retries=0)
    chat = sdk.wrap(chat) if spec["wrap"] else chat
    response = chat.chat.completions.create(
        model=model, max_tokens=16, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}]
    )
    assert response.usage is not None
    details = response.usage.prompt_tokens_details
    return {"cached": (details.cached_tokens if details else None) or 0, "input": response.usage.prompt_tokens}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
