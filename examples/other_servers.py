"""Point the SDK at the local backend, vLLM or llama.cpp: they all speak the OpenAI API and cache by prefix.

    python -m examples.other_servers http://127.0.0.1:8000     # local backend: python -m local_backend serve
    python -m examples.other_servers http://127.0.0.1:8001     # vLLM: vllm serve MODEL --enable-prefix-caching
    python -m examples.other_servers http://127.0.0.1:8080     # llama.cpp: llama-server -m MODEL.gguf

These servers need no cache hints: kvwise's canonical order is what makes their prefix caches hit.
"""

from __future__ import annotations

import sys

import openai

import sdk


def main(base_url: str, model: str = "default") -> list[int]:
    """Two calls sharing a long system prompt; return the cached prompt tokens each one reports."""
    client = sdk.wrap(
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="local"), policy=sdk.Policy(max_output_tokens=16)
    )
    system = "You are a support agent for a bookshop. Be brief. " * 40
    cached = []
    for question in ("Do you sell maps?", "Are you open on Sunday?"):
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "system", "content": system}, {"role": "user", "content": question}]
        )
        details = reply.usage.prompt_tokens_details if reply.usage else None
        cached.append((details.cached_tokens or 0) if details else 0)
    return cached


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"))
