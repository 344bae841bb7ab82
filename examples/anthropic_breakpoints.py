"""Wrap an Anthropic client: kvwise places `cache_control` breakpoints where the prefix is long enough.

python -m examples.anthropic_breakpoints http://127.0.0.1:8000
"""

from __future__ import annotations

import sys

import anthropic

import sdk

POLICY_DOCUMENT = "Refunds are accepted within 30 days with a receipt. " * 60


def main(base_url: str, model: str = "default") -> list[int]:
    """Ask twice over the same long system prompt; return the cache-read tokens of each call."""
    client = sdk.wrap(anthropic.Anthropic(base_url=base_url, api_key="local"), policy=sdk.Policy(max_output_tokens=32))
    reads = []
    for question in ("Can I get a refund?", "How long do I have?"):
        message = client.messages.create(
            model=model, system=POLICY_DOCUMENT, messages=[{"role": "user", "content": question}]
        )
        reads.append(message.usage.cache_read_input_tokens or 0)
    return reads


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"))
