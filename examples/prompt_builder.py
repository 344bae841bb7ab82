"""`sdk.Prompt`: build new prompts in canonical order, for either provider, from the start.

python -m examples.prompt_builder http://127.0.0.1:8000
"""

from __future__ import annotations

import sys
import uuid

import anthropic
import openai

import sdk


def build(question: str) -> sdk.Prompt:
    return sdk.Prompt(
        system="You answer questions about inference briefly.",
        documents=["Prefill sets time to first token. Decode sets stream speed."],
        dynamic={"Request ID": str(uuid.uuid4())},
        user=question,
    )


def main(base_url: str, model: str = "default") -> tuple[str, str]:
    prompt = build("What sets the time to first token?")
    chat = openai.OpenAI(base_url=f"{base_url}/v1", api_key="local")
    messages = anthropic.Anthropic(base_url=base_url, api_key="local")
    openai_text = (
        chat.chat.completions.create(**prompt.to_openai(model=model, max_tokens=32)).choices[0].message.content
    )
    anthropic_text = messages.messages.create(**prompt.to_anthropic(model=model, max_tokens=32)).content[0].text
    return openai_text or "", anthropic_text


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"))
