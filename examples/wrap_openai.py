"""Wrap the OpenAI client you already have: same calls, same return types, cheaper prefixes.

python -m examples.wrap_openai http://127.0.0.1:8000      # any OpenAI-compatible server
"""

from __future__ import annotations

import sys

import openai

import sdk


def main(base_url: str, model: str = "default") -> str:
    client = sdk.wrap(
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="local"), policy=sdk.Policy(max_output_tokens=64)
    )
    reply = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "Request ID: 7d0c1a52-4f0e-4b7e-9d1a-2c3b4d5e6f70\nYou answer briefly."},
            {"role": "user", "content": "What is prefill?"},
        ],
    )
    return reply.choices[0].message.content or ""


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"))
