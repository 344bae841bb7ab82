"""The provider simulator's own tests."""

REPLY = "Prefill reads the prompt once; decode writes one token at a time."
"""What the simulator answers in these tests."""
REPLY_TOKENS = 14  # see tests.simulator.tokens: words and punctuation, each with the space before it
