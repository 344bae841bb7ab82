"""kvwise SDK: wrap an openai or anthropic client so every call respects prefill, decode and the KV cache.

    client = sdk.wrap(openai.OpenAI(), policy=sdk.Policy(max_output_tokens=512))
    client.chat.completions.create(model=..., messages=[...])   # same call, same return types

Glossary: one word per concept (identifiers that still say another word are listed in issue 44's note).

- call: one model-calling method invocation through a wrapped client, from the caller's kwargs to its
  end; an attempt is one HTTP request of a call (retries add attempts, never calls).
- request: what a call sends: the caller's kwargs rewritten by kvwise (`Call`); an addition is one
  thing kvwise put in or changed, recorded where it is made (`kvwise.canonical.changes`).
- decisions: what kvwise decided about a call and why, apart from what it sends (`Call.decided`, a
  `Decisions`: the additions, fingerprint and break, the read to expect and its miss), each written by its step.
- end of call: one typed value saying how the call ended (`Ending`: answered, cut, failed,
  abandoned) with its usage; listeners and the telemetry read it, nothing else reports an end.
- tier: a stability class of request content, in canonical order: tools, system, pinned documents,
  history, dynamic content, the final user turn. A segment is one element of a tier; the
  fingerprint is the hash chain over segments; a break is the first segment that differs from the
  previous call of the same API and model, and its cause.
- stable prefix: the tiers before the dynamic content. The cacheable prefix is the part of it a
  provider would cache (up to the last cache breakpoint on Anthropic, all of it elsewhere) once it
  reaches the model's minimum cacheable length.
- prompt family ("family" names nothing else): the calls sharing tools and system prompt. Its keys:
  masked, with volatile candidates blanked (`family_key`: whose volatile decisions are shared), and
  as sent (`prefix_key`, from which the `prompt_cache_key` is made). Per API and model, a family is what adaptive
  caps learn over (`WorkloadKey`). Calls are grouped by other things under other words: fan-out
  groups calls by cacheable prefix, server and credentials (the fan-out key); the break tracker
  compares a call with the previous call of its API and model (no key word of its own).
- model series: models a provider treats alike (Anthropic's minimum cacheable lengths, which models
  reason by default). The checkpoints the local backend loads share one architecture, the Llama
  architecture (Llama, Mistral, Qwen, SmolLM).
- volatile value: bytes that change between calls (ids, times). Sure values move on first sight by
  their shape; candidates move once their prompt family shows them changing. Moving cuts the value
  from the stable prefix and appends it, labelled, to the context note.
- conversation: the calls of one `gen_ai.conversation.id` (`sdk.conversation`); the report groups
  calls by it, else by model.
- memory: what a wrapped client learns across calls (volatile decisions, adaptive-cap windows,
  fan-out leaders, the last fingerprint per API and model), kept in a store (in-process, SQLite or Redis).
- outage ("outage" names nothing else): the store failing (unreachable, corrupt, full, a malformed value);
  the call goes on with in-process memories, its span saying so (`kvwise.state.degraded`, like the
  `state=` argument a published name kept as it is).
- leader / follower: under fan-out, the first in-flight call of a cacheable prefix and the calls
  that wait for its first chunk.
- decode limits: the cap (the output-token limit decided once, `Call.cap`, from the policy, the
  caller or the adaptive cap), stop sequences and penalties, applied to the request before it is sent.
- guard ("guard" names nothing else): a check that cuts a streamed answer while it decodes, today
  the loop guard (`Policy.loop_guard`, recorded as `kvwise.guard.tripped="loop"`). A stop sequence
  enforced client-side also cuts a stream, but it is a decode limit.
- stream watcher: what reads a stream's chunks on the caller's behalf (usage, phases, the guard,
  client-side stops, truncation).
- cut: kvwise ended a stream early; truncated: the stream's connection broke (dropped or timed out)
  before its end; refusal: the server rejected one of kvwise's additions and the call went again
  without it (for the cap: `kvwise.guard.cap_refused`, a published name kept as it is).

Layout, in the order a call meets it (the order itself is one function, `sdk.pipeline.Pipeline.prepare`):

    call, policy, semconv, reasoning, tokens
                           the ground floor every step imports: the `Call`, the policy, telemetry's names,
                           which calls reason, the token estimate (docs/architecture.md)
    providers/             one module per provider: its hosts, telemetry name, cache's minimums and lifetimes
    wrap, surface, compat  the wrapped client; which methods go through kvwise; the clients' private parts
    adapters/              an API's native arguments as a `Call` (`call`) and back; its responses read
    pipeline               the order of a call, top to bottom, and the user's `Middleware`
    prompt_builder         `sdk.Prompt`: a prompt built in canonical order, its cache hints placed
    prompt/                canonical order and volatile bytes; `sdk.lint`
    cache/                 the provider's cache: fingerprint, hints, the read to expect, diagnostics, fan-out
    decode/                decode limits, adaptive caps, the loop guard
    send/                  the send: attempts and retries, refusals taken back, the stream watcher
    lifecycle              the end of call, told to its listeners, then to the telemetry
    telemetry/             spans, metrics, events, prices; `sdk.conversation`
    memory/                what a client learns, in one store (in-process, SQLite or Redis)
    report/                `python -m sdk.report`
"""

from sdk.errors import KvwiseError, StreamTruncated, UnsupportedClient
from sdk.pipeline import Middleware
from sdk.policy import Policy
from sdk.prompt.lint import Finding, lint
from sdk.prompt_builder import Prompt
from sdk.telemetry.conversation import conversation
from sdk.wrap import wrap

__all__ = [
    "Finding",
    "KvwiseError",
    "Middleware",
    "Policy",
    "Prompt",
    "StreamTruncated",
    "UnsupportedClient",
    "conversation",
    "lint",
    "wrap",
]
