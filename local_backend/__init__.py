"""kvwise local backend: a small PyTorch inference engine with a paged KV cache and prefix caching."""
