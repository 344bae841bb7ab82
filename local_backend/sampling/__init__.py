"""Sampling: per-request parameters, penalties and the sampler that turns logits into next tokens."""
