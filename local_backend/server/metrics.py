"""`GET /metrics`: the engine's pool, queues and token counters, and latency histograms, via `prometheus_client`.

One `ServerMetrics` per app, on a registry of its own (two servers in one process never mix their
numbers). Gauges and counters are read from `Engine.stats()` and the admission queue at scrape
time; the histograms are observed once per finished request, from its `Completion.timings`, with
vLLM's metric set as the model (`vllm:time_to_first_token_seconds` is
`kvwise_time_to_first_token_seconds` here):

    queue time     = queue_s                     (arrival in the engine → scheduled)
    TTFT           = queue_s + prefill_s         (arrival → first token)
    time per token = decode_s ÷ (output tokens − 1), for answers of two tokens or more
    end-to-end     = queue_s + prefill_s + decode_s

`kvwise_model_dtype_info` (value 1) names the dtype the model computes in and why (`dtype_choice`:
`--dtype auto` gives bfloat16 on a CPU with AVX512-BF16 or AMX); `kvwise_quantization_info` the
`--quantization` asked for and the block types kept (`kept="Q4_1,Q8_0"`; empty: every weight in that
dtype). `kvwise_kernel_info` (value 1) carries, as labels, the native CPU kernels this process
loaded: their capability, floats per vector and the thresholds `kernel_choices` measured for them
(absent when the engine runs on torch ops alone). No label or value ever holds prompt text or a key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from local_backend.engine.outputs import Completion, EngineStats
from local_backend.kernels import cpu_kernels
from local_backend.server.generation import Admission

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

METRICS_PREFIX: Final = "kvwise_"

TTFT_BUCKETS: Final = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
"""vLLM's `time_to_first_token_seconds` buckets."""

TIME_PER_OUTPUT_TOKEN_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
"""vLLM's `time_per_output_token_seconds` buckets, with three below 10 ms (a tiny model on a CPU)."""

REQUEST_LATENCY_BUCKETS: Final = (
    0.001,
    0.01,
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
"""vLLM's request latency buckets (queue, prefill, decode, end-to-end), with three below 0.3 s."""


class ServerMetrics:
    """The app's registry: engine gauges and counters read live, request histograms observed."""

    def __init__(self, stats: Callable[[], EngineStats], admission: Admission):
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EngineCollector(stats, admission))

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(METRICS_PREFIX + name, doc, buckets=buckets, registry=self.registry)

        self.ttft = histogram("time_to_first_token_seconds", "Arrival to first token.", TTFT_BUCKETS)
        self.tpot = histogram(
            "time_per_output_token_seconds", "Decode time per token after the first.", TIME_PER_OUTPUT_TOKEN_BUCKETS
        )
        self.queue = histogram("request_queue_time_seconds", "Arrival to scheduled.", REQUEST_LATENCY_BUCKETS)
        self.prefill = histogram("request_prefill_time_seconds", "Scheduled to first token.", REQUEST_LATENCY_BUCKETS)
        self.decode = histogram("request_decode_time_seconds", "First token to the end.", REQUEST_LATENCY_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "Arrival to the end.", REQUEST_LATENCY_BUCKETS)
        self.finished = Counter(
            METRICS_PREFIX + "request_success",
            "Finished requests by finish reason.",
            ["finished_reason"],
            registry=self.registry,
        )

    def observe(self, completion: Completion) -> None:
        t = completion.timings
        self.finished.labels(completion.finish_reason).inc()
        self.queue.observe(t.queue_s)
        self.prefill.observe(t.prefill_s)
        self.decode.observe(t.decode_s)
        self.e2e.observe(t.queue_s + t.prefill_s + t.decode_s)
        if completion.token_ids:
            self.ttft.observe(t.queue_s + t.prefill_s)
        if len(completion.token_ids) > 1:
            self.tpot.observe(t.decode_s / (len(completion.token_ids) - 1))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    """The engine's and the admission queue's numbers, read at each scrape."""

    def __init__(self, stats: Callable[[], EngineStats], admission: Admission):
        self._stats, self._admission = stats, admission

    def collect(self) -> Iterator[Metric]:
        stats, admission = self._stats(), self._admission
        blocks = GaugeMetricFamily(
            METRICS_PREFIX + "kv_blocks",
            "KV cache blocks by state: used by a request, cached for reuse, or free.",
            labels=["state"],
        )
        for state, value in (("used", stats.blocks_used), ("cached", stats.blocks_cached), ("free", stats.blocks_free)):
            blocks.add_metric([state], value)
        requests = GaugeMetricFamily(METRICS_PREFIX + "requests", "Requests in the engine by state.", labels=["state"])
        requests.add_metric(["running"], stats.num_running)
        requests.add_metric(["waiting"], stats.num_waiting)
        yield blocks
        yield requests
        gauges = [
            ("kv_blocks_capacity", "KV cache blocks in the pool.", stats.num_blocks),
            ("kv_block_size_tokens", "Tokens per KV block.", stats.block_size),
            ("kv_cache_bytes", "Bytes of the KV cache pool.", stats.kv_cache_bytes),
            (
                "kv_bytes_per_token",
                "2 x layers x kv_heads x (head_dim x bytes per element + scale bytes, if quantized).",
                stats.kv_bytes_per_token,
            ),
            ("kv_capacity_tokens", "Tokens the KV cache pool holds.", stats.num_blocks * stats.block_size),
            ("requests_in_flight", "Requests admitted by the server and not yet finished.", admission.in_flight),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(METRICS_PREFIX + name, doc, value=value)
        counters = [
            ("requests_rejected", "Requests refused because the queue was full.", admission.rejected),
            ("client_hangups", "Requests whose client hung up before their whole answer was ready.", admission.hung_up),
            ("preemptions", "Running requests preempted for lack of KV blocks.", stats.num_preemptions),
            ("prompt_tokens", "Prompt tokens received, cached ones included.", stats.prompt_tokens),
            (
                "prefix_cache_hit_tokens",
                "Prompt tokens whose KV came from the prefix cache.",
                stats.prefix_cache_hit_tokens,
            ),
            ("generation_tokens", "Tokens generated.", stats.generation_tokens),
            ("spec_decode_num_drafts", "Steps that verified speculative drafts.", stats.spec_decode_drafts),
            ("spec_decode_num_draft_tokens", "Speculative draft tokens proposed.", stats.spec_decode_draft_tokens),
            (
                "spec_decode_num_accepted_tokens",
                "Speculative draft tokens accepted.",
                stats.spec_decode_accepted_tokens,
            ),
        ]
        for name, doc, value in counters:
            yield CounterMetricFamily(METRICS_PREFIX + name, doc, value=value)
        dtype = GaugeMetricFamily(
            METRICS_PREFIX + "model_dtype_info", "The dtype the model computes in, and why.", labels=["dtype", "reason"]
        )
        dtype.add_metric([stats.dtype, stats.dtype_reason], 1)
        yield dtype
        quantization = GaugeMetricFamily(
            METRICS_PREFIX + "quantization_info",
            "The --quantization asked for, and the block types the weights are kept in.",
            labels=["quantization", "kept"],
        )
        quantization.add_metric([stats.quantization, stats.quantized_types], 1)
        yield quantization
        kernels = cpu_kernels.loaded()
        if kernels is not None:
            labels = {**kernels.choices.labels(), "lanes": str(kernels.lanes)}
            info = GaugeMetricFamily(
                METRICS_PREFIX + "kernel_info",
                "The native CPU kernels loaded: capability, floats per vector, thresholds.",
                labels=list(labels),
            )
            info.add_metric(list(labels.values()), 1)
            yield info
