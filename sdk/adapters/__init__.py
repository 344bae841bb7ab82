"""One adapter per intercepted API: native kwargs <-> `Call`, plus usage and stream-event readers; `responses` reads
what any API's answer says beyond them (service tier, system fingerprint, cache-miss reason)."""

from __future__ import annotations

import functools

from sdk.adapters._base import Adapter, StreamState, map_descriptions, map_text
from sdk.call import Api

__all__ = ["Adapter", "StreamState", "adapter_for", "map_descriptions", "map_text"]


@functools.cache
def adapter_for(api: Api) -> Adapter:
    """The adapter of `api` (stateless, made once); imported lazily so a missing optional client only
    fails where it is used."""
    if api is Api.CHAT:
        from sdk.adapters.openai_chat import ChatAdapter

        return ChatAdapter()
    if api is Api.COMPLETIONS:
        from sdk.adapters.openai_completions import CompletionsAdapter

        return CompletionsAdapter()
    if api is Api.RESPONSES:
        from sdk.adapters.openai_responses import ResponsesAdapter

        return ResponsesAdapter()
    from sdk.adapters.anthropic_messages import MessagesAdapter

    return MessagesAdapter()
