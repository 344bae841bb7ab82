"""`GET /metrics`: the engine's block pool, queues and token counters in Prometheus text format.

Hand-written exposition (format 0.0.4), so the server needs no extra dependency. No label or value
ever holds prompt text or a key.
"""

from __future__ import annotations

from local_backend.outputs import EngineStats
from local_backend.server.generation import Admission

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PREFIX = "kvwise_"


def exposition(stats: EngineStats, admission: Admission) -> str:
    """Every metric with its HELP and TYPE lines; counters end in `_total`."""
    families = [
        ("kv_blocks", "gauge", "KV cache blocks by state: used by a request, cached for reuse, or free.",
         [({"state": "used"}, stats.blocks_used), ({"state": "cached"}, stats.blocks_cached),
          ({"state": "free"}, stats.blocks_free)]),
        ("kv_blocks_capacity", "gauge", "KV cache blocks in the pool.", [({}, stats.num_blocks)]),
        ("kv_block_size_tokens", "gauge", "Tokens per KV block.", [({}, stats.block_size)]),
        ("kv_cache_bytes", "gauge", "Bytes of the KV cache pool.", [({}, stats.kv_cache_bytes)]),
        ("requests", "gauge", "Requests in the engine by state.",
         [({"state": "running"}, stats.num_running), ({"state": "waiting"}, stats.num_waiting)]),
        ("requests_in_flight", "gauge", "Requests admitted by the server and not yet finished.",
         [({}, admission.in_flight)]),
        ("requests_rejected_total", "counter", "Requests refused because the queue was full.",
         [({}, admission.rejected)]),
        ("preemptions_total", "counter", "Running requests preempted for lack of KV blocks.",
         [({}, stats.num_preemptions)]),
        ("prompt_tokens_total", "counter", "Prompt tokens received, cached ones included.",
         [({}, stats.prompt_tokens)]),
        ("prefix_cache_hit_tokens_total", "counter", "Prompt tokens whose KV came from the prefix cache.",
         [({}, stats.prefix_cache_hit_tokens)]),
        ("generation_tokens_total", "counter", "Tokens generated.", [({}, stats.generation_tokens)]),
    ]  # fmt: skip
    lines = []
    for name, kind, help_text, samples in families:
        full = _PREFIX + name
        lines += [f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"]
        for labels, value in samples:
            rendered = ",".join(f'{key}="{val}"' for key, val in labels.items())
            lines.append(f"{full}{{{rendered}}} {value}" if rendered else f"{full} {value}")
    return "\n".join(lines) + "\n"
