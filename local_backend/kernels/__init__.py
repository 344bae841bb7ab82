"""The ops the model runs: torch forms beside the native CPU kernels (`csrc/`), and the weight and KV formats."""
