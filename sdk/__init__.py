"""kvwise SDK: wrap an openai or anthropic client so every call respects prefill, decode and the KV cache.

    client = sdk.wrap(openai.OpenAI(), policy=sdk.Policy(max_output_tokens=512))
    client.chat.completions.create(model=..., messages=[...])   # same call, same return types
"""

from sdk.chain import Middleware
from sdk.conversation import conversation
from sdk.errors import KvwiseError, StreamTruncated, UnsupportedClient
from sdk.lint import Finding, lint
from sdk.policy import Policy
from sdk.prompt import Prompt
from sdk.wrap import wrap

__all__ = [
    "Finding", "KvwiseError", "Middleware", "Policy", "Prompt", "StreamTruncated", "UnsupportedClient", "conversation", "lint",
    "wrap",
]
