"""A fake hosted-LLM provider for tests: the real `openai` and `anthropic` clients talk to it over
loopback HTTP. See `simulator.ProviderSimulator`."""

from .records import RecordedRequest, StreamRecord
from .simulator import ProviderSimulator

__all__ = ["ProviderSimulator", "RecordedRequest", "StreamRecord"]
