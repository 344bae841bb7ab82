"""The model: its config, Llama layers and attention, loading (safetensors, GGUF), tokenizer and chat template."""
