"""Engine tunables in one place: defaults a caller may override, never literals in the logic."""

from typing import Final

DEFAULT_MODEL_NAME: Final = "default"
"""`Engine.from_pretrained("default")` resolves to the bundled checkpoint under `models/default/`."""

DEFAULT_BLOCK_SIZE: Final = 16
"""Tokens per KV block: the unit of allocation and of prefix-cache reuse."""

DEFAULT_KV_CACHE_MEMORY_CPU: Final = 512 * 1024**2
"""Bytes of KV cache on CPU when the caller gives no budget."""

DEFAULT_KV_CACHE_FRACTION_CUDA: Final = 0.5
"""Share of the GPU's free memory (after loading weights) given to the KV cache by default."""

DEFAULT_MAX_NUM_SEQS: Final = 64
"""Most sequences decoded together in one step."""

DEFAULT_MAX_MODEL_LEN: Final = 8192
"""Cap on prompt + output tokens when the checkpoint allows more."""

DEFAULT_MAX_NUM_BATCHED_TOKENS: Final = 2048
"""Per-step token budget: decodes first, then prefill chunks fill what is left."""

HASH_DIGEST_BYTES: Final = 8
"""Bytes of the blake2b digest that names a full block in the prefix cache."""

SALT_PERSON: Final = b"kvwise-salt"
"""blake2b personalisation of a cache salt's hash, so a salt's root never equals a block's name."""

SEED_RANGE: Final = (-(2**63), 2**64 - 1)
"""Seeds `torch.Generator.manual_seed` takes; one outside would fail the whole batch's step."""

DRY_DEFAULT_BREAKERS: Final = ("\n", ":", '"', "*")
"""llama.cpp's default DRY sequence breakers: a repeat never extends across them."""

DRY_MAX_EXPONENT_LOG: Final = 88.7228391
"""log(float32 max): the DRY exponent is clamped so base**exp stays finite (llama.cpp)."""

DETOKENIZE_CONTEXT_TOKENS: Final = 6
"""Tokens decoded before the new ones so word-piece spacing comes out right incrementally."""

SAMPLER_FIRST_CUTOFF: Final = 2.0**-12
"""Weight (relative to the top token's 1) above which top-k/top-p first look for their cut; it holds
the nucleus of most rows of a trained model, and a row it leaves short looks again lower."""

SAMPLER_REJECTION_ROUNDS: Final = 4
"""Draws a top-p/min-p row may have refused before its filters are applied by a mask instead."""

SAMPLER_CHUNK: Final = 256
"""Tokens per chunk of the inverse-CDF draw: the chunk is found from chunk sums, then the token."""

DECODE_PADDING_SHARE: Final = 0.25
"""A decode group grows while padding its rows to the longest context adds at most this share to
the context it gathers; past it, a new group (another attention call) starts."""

PREFILL_KERNEL_MAX_CONTEXT: Final = 1024
"""Keys up to which a CPU float32 prefill chunk attends in `kvwise::prefill_attention`, past which
in SDPA's flash kernel. Per layer of the 56M Llama (8 heads, 4 kv heads, head_dim 64), two runs:
128 tokens 0.53-0.62 ms against SDPA's 0.72-0.84, 512 4.6-5.1 against 6.5-6.7, 1024 14.3-15.9
against 17.9-18.0, but 2048 59-63 against 56-61: there SDPA's query blocks grow to 256 and its
GEMMs run as fast, while this kernel's scores of a block no longer fit the cache."""

SAMPLING_EPS: Final = 1e-5
"""vLLM's rule: a temperature below it samples greedily, and a repetition penalty must reach it (a
smaller one divides a float32 logit past its range, and the step would fail on infinities)."""

ONEDNN_MIN_ROWS: Final = 2
"""Rows from which a CPU float32 projection multiplies by oneDNN's prepacked weight (`Linear.pack`):
from 2 rows it ran 1.3-2.9x the plain matmul on this project's 2-core machines (16 rows: 1.4-2.9x,
a 2048-token prefill 1.0-1.35x); one decode row streams the row-major `weight_t` faster."""

MATVEC_MAX_ROWS: Final = 16
"""Rows up to which a CPU float32 projection streams its weights through `kvwise::matvec` when the
native kernels are built (above it, oneDNN): the 56M Llama's projections and lm_head per decode step
took 10.6 / 10.6 / 11.6 / 16.7 / 23.7 ms at 1 / 2 / 3 / 8 / 16 rows against oneDNN's 15.8 / 17.0 /
17.4 / 22.5 / 26.5 (MKL's plain matmul at one row: 15.6, same run); at 32 rows oneDNN led, 40.0 to 43.5."""

KERNEL_BUILD_TIMEOUT_S: Final = 600
"""Seconds the one-off build of the native CPU kernels may take (77 s on 2 cores, the five sources side by side)."""
