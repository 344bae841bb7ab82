"""What the `prefill` and `decode` phase spans measured, as their attributes (pure functions).

Phoenix shows a span's `output.value`, so each phase carries its measures twice: as `kvwise.*`
attributes for queries, and as one small JSON object Phoenix displays on the span's page:

    prefill   kvwise.prefill.tokens (input less cache reads), .cached_tokens, .ms
    decode    kvwise.decode.tokens (output tokens), .ms, .tokens_per_s (tokens over the decode time)
"""

from __future__ import annotations

from sdk import semconv as sc
from sdk.call import Usage
from sdk.telemetry.attributes import Attributes
from sdk.telemetry.content import to_json

_CHAIN = sc.OpenInferenceSpanKind.CHAIN.value
_JSON = sc.MimeType.JSON.value
_NS_PER_MS = 1e6
_MS_PER_S = 1e3


def prefill_facts(usage: Usage | None, duration_ns: int) -> Attributes:
    """The prefill span's attributes: tokens prefilled and read from the cache (when usage is known), ms."""
    measured: Attributes = {sc.KVWISE_PREFILL_MS: round(max(duration_ns, 0) / _NS_PER_MS, 3)}
    if usage is not None:
        measured[sc.KVWISE_PREFILL_TOKENS] = max(usage.input_tokens - usage.cache_read_tokens, 0)
        measured[sc.KVWISE_PREFILL_CACHED_TOKENS] = usage.cache_read_tokens
    return _shown(measured)


def decode_facts(usage: Usage | None, duration_ns: int) -> Attributes:
    """The decode span's attributes: tokens decoded (when usage is known), ms and tokens per second."""
    ms = round(max(duration_ns, 0) / _NS_PER_MS, 3)
    measured: Attributes = {sc.KVWISE_DECODE_MS: ms}
    if usage is not None:
        measured[sc.KVWISE_DECODE_TOKENS] = usage.output_tokens
        if ms > 0:
            measured[sc.KVWISE_DECODE_TOKENS_PER_S] = round(usage.output_tokens * _MS_PER_S / ms, 1)
    return _shown(measured)


def _shown(measured: Attributes) -> Attributes:
    """`measured` plus the same facts as the JSON output Phoenix displays, and the span kind (in place)."""
    measured[sc.OUTPUT_VALUE] = to_json(measured)
    measured[sc.OPENINFERENCE_SPAN_KIND] = _CHAIN
    measured[sc.OUTPUT_MIME_TYPE] = _JSON
    return measured
