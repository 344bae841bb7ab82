"""Async streaming with the loop guard: a repeating answer is cut and ends with finish_reason "length".

python -m examples.async_stream_loop_guard http://127.0.0.1:8000
"""

from __future__ import annotations

import asyncio
import sys

import openai

import sdk


async def stream_answer(base_url: str, prompt: str, model: str = "default") -> tuple[str, str | None]:
    """Stream one answer; return its text and finish reason."""
    client = sdk.wrap(
        openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="local"), policy=sdk.Policy(max_output_tokens=256)
    )
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], temperature=0, stream=True
    )
    text, finish = [], None
    async for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(text), finish


def main(base_url: str, prompt: str = "Say it again and again.") -> tuple[str, str | None]:
    return asyncio.run(stream_answer(base_url, prompt))


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"))
