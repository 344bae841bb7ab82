"""kvwise SDK: wrap an openai or anthropic client so every call respects prefill, decode and the KV cache."""
