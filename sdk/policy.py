"""The policy: one frozen object that says what the SDK may change on every call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

VolatileMode = Literal["move", "warn", "off"]
FanoutMode = Literal["warm"]
CacheTtl = Literal["5m", "1h"]

_VOLATILE_MODES = ("move", "warn", "off")
_CACHE_TTLS = ("5m", "1h")


@dataclass(frozen=True, slots=True)
class Policy:
    """What `sdk.wrap` does to each call; every default is safe.

    >>> client = sdk.wrap(openai.OpenAI(), policy=sdk.Policy(max_output_tokens=512))

    - `canonicalize`: put the prompt in canonical order (tools, system, history, dynamic, user).
    - `volatile`: what to do with volatile bytes found in the stable prefix ("move", "warn", "off").
    - `cache_hints`: place provider cache breakpoints / keys; `cache_ttl` ("5m", "1h"): Anthropic's
      breakpoint TTL, and "1h" also asks OpenAI for extended retention (`prompt_cache_retention="24h"`:
      its in-memory retention lasts minutes, at most an hour).
    - `cache_diagnostics`: ask Anthropic why each cache miss happened (`diagnostics` on the request,
      recorded as `kvwise.prefix.break_cause_server`); only on Anthropic's own API.
    - `max_output_tokens`: a larger request is clamped to it, a missing one is filled in where it fits
      the model's context as kvwise was told it (`model_contexts`, or a server's refusal of an earlier
      call; `sdk.decode.limits`); a server that refuses the limit kvwise set gets the call again with
      the caller's own, and the context it names is remembered for that base URL and model.
    - `model_contexts`: model -> context length in tokens, for servers with short contexts (vLLM, the
      local backend): a filled limit that would not fit after the prompt is left out from the first
      call on. kvwise never asks a server (no `GET /models`): without this, the first call's refusal
      teaches it.
    - `adaptive_caps`: a call whose caller set no output limit gets its prompt family's p99 (per API
      and model) of output tokens x `adaptive_cap_margin`, at least `adaptive_cap_floor`, at most
      `max_output_tokens`, once the family has enough answers (`sdk.decode.adaptive_caps`); reasoning calls
      without a budget stay uncapped.
    - `fanout`: "warm" holds a call whose cacheable prefix equals an in-flight call's (same client,
      tenant and key) until that call's first chunk or answer, so it reads the cache instead of writing
      it again, waiting at most `fanout_wait_seconds` (`sdk.cache.fanout`); None sends every call at once.
    - `stop`: stop sequences merged with the caller's, within each API's limit.
    - `frequency_penalty`, `presence_penalty`: defaults where the API has them and the caller set none.
    - `loop_guard`: cut a streamed answer whose text repeats back-to-back.
    - `retries`: the `max_retries` of a call whose caller set none (the client class's default counts
      as none); the client's own retry loop makes them, with its own backoff, `Retry-After`,
      `x-stainless-retry-count` and `retries_taken`. A `max_retries` of the caller's (client,
      `with_options`, request) stands. The default, 2, is the clients' own: under it a wrapped client
      retries exactly as the bare one (`sdk.send.retry`). kvwise itself sends a call again only after
      a refusal of something it added, as the caller wrote it.
    - `capture_content`: record prompt and completion text on spans; None reads
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT.
    - `prices`: model -> {"input", "cached_input", "cache_write", "output"} in USD per million tokens,
      overriding the built-in table.
    """

    canonicalize: bool = True
    volatile: VolatileMode = "move"
    cache_hints: bool = True
    cache_ttl: CacheTtl | None = None
    cache_diagnostics: bool = True
    max_output_tokens: int = 4096
    adaptive_caps: bool = False
    adaptive_cap_margin: float = 1.5
    adaptive_cap_floor: int = 256
    fanout: FanoutMode | None = None
    fanout_wait_seconds: float = 5.0
    stop: tuple[str, ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    loop_guard: bool = True
    retries: int = 2
    capture_content: bool | None = None
    prices: Mapping[str, Mapping[str, float]] | None = None
    model_contexts: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        if self.volatile not in _VOLATILE_MODES:
            raise ValueError(f"Policy.volatile must be one of {_VOLATILE_MODES}, got {self.volatile!r}")
        if self.cache_ttl is not None and self.cache_ttl not in _CACHE_TTLS:
            raise ValueError(f"Policy.cache_ttl must be None or one of {_CACHE_TTLS}, got {self.cache_ttl!r}")
        if isinstance(self.max_output_tokens, bool) or not isinstance(self.max_output_tokens, int):
            raise ValueError(f"Policy.max_output_tokens must be an int, got {self.max_output_tokens!r}")
        if self.max_output_tokens < 1:
            raise ValueError(f"Policy.max_output_tokens must be >= 1, got {self.max_output_tokens}")
        contexts = self.model_contexts
        if contexts is not None and not (
            isinstance(contexts, Mapping) and all(_is_context(model, tokens) for model, tokens in contexts.items())
        ):
            raise ValueError(f"Policy.model_contexts must map model ids to token counts >= 1, got {contexts!r}")
        floor = self.adaptive_cap_floor
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 1:
            raise ValueError(f"Policy.adaptive_cap_floor must be an int >= 1, got {self.adaptive_cap_floor!r}")
        if not self.adaptive_cap_margin >= 1.0:
            raise ValueError(f"Policy.adaptive_cap_margin must be >= 1, got {self.adaptive_cap_margin!r}")
        if self.fanout is not None and self.fanout != "warm":
            raise ValueError(f"Policy.fanout must be None or 'warm', got {self.fanout!r}")
        if not self.fanout_wait_seconds >= 0.0:
            raise ValueError(f"Policy.fanout_wait_seconds must be >= 0, got {self.fanout_wait_seconds!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"Policy.stop must be a tuple of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if value is not None and not -2.0 <= value <= 2.0:
                raise ValueError(f"Policy.{name} must be None or within [-2, 2], got {value!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"Policy.retries must be an int >= 0, got {self.retries!r}")


def _is_context(model: object, tokens: object) -> bool:
    """Whether `model: tokens` is a model id and a context length."""
    return isinstance(model, str) and isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0
