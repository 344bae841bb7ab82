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

SAMPLING_EPS: Final = 1e-5
"""vLLM's rule: a temperature below it samples greedily, and a repetition penalty must reach it (a
smaller one divides a float32 logit past its range, and the step would fail on infinities)."""

ONEDNN_MIN_ROWS: Final = 2
"""Rows from which a CPU float32 projection multiplies by oneDNN's prepacked weight (`Linear.pack`)."""

MATVEC_MAX_ROWS: Final = 16
"""Rows up to which a CPU float32 projection streams its weights through `kvwise::matvec`."""

QUANT_MATVEC_MAX_ROWS: Final = 32
"""Rows of x up to which a quantized projection streams its blocks (`kvwise::quant_matvec`: each block widened once
per group of four rows); more rows dequantize tiles of it and multiply them by oneDNN's GEMM (`kvwise::quant_mm`).
Measured on the 2-core AMD EPYC (AVX2), SmolLM2's shapes (576x1536 and 1536x576, Q4_1 and Q8_0): quant_mm took
1.35-1.8x quant_matvec's time at 16 rows, 1.8-2.3x at 32 and 1.15-1.8x at 64, so a 16-stream decode step runs in
one call (`decode_layers`) on the decode kernels' own threads (`csrc/parallel.h`)."""

BF16_MATVEC_MAX_ROWS: Final = 2
"""Rows up to which a CPU bfloat16 projection streams its weights through `kvwise::matvec`: past a few rows
oneDNN's prepacked bfloat16 weight (on AMX tiles, or AVX512-BF16 dot products) multiplies faster."""

BF16_PREFILL_KERNEL_MIN_QUERIES: Final = 1024
"""Queries from which a CPU bfloat16 prefill chunk after cached tokens attends in `kvwise::prefill_attention` (brgemm
on AMX tiles or AVX512-BF16, where `kvwise::packs_bf16`), below which, and for a whole prompt, in SDPA. Measured on
the 2-core AMX Xeon (8 heads, 4 kv heads, head_dim 64): 1024 queries after 1024 cached keys 7.4 ms against SDPA's
8.3, 2048 after 2048 26.5 against 34.1 (SDPA's masked path); 512 after 512 2.5 against 2.2, and a whole prompt of
2048 9.2 against its causal path's 7.7."""

BF16_WIDENED_PREFILL_MIN_QUERIES: Final = 256
"""Queries from which a CPU bfloat16 prefill chunk, where the CPU has neither bfloat16 brgemm (AMX) nor AVX512-BF16 dot
products (`kvwise::dots_bf16`, which take every chunk), attends in the float32 `kvwise::prefill_attention` on widened
copies, below which in SDPA. Measured on the 2-core AMD EPYC (9 heads, 3 kv heads, head_dim 64) before the dot
products' form, kernel against SDPA's bfloat16 flash path: 256 queries 0.89 against
1.11 ms, 512 2.63 against 4.32, 1024 9.83 against 12.13, 2048 39.4 against 40.8, 512 after 1536 cached 14.3
against 18.1; 128 queries 0.40 against 0.37, 32 after 2048 cached 1.51 against 1.38."""

PREFILL_KERNEL_MAX_CONTEXT: Final = 1024
"""Keys up to which a CPU float32 prefill chunk attends in `kvwise::prefill_attention`, past which in SDPA.

These were tuned on one 2-core AVX2 machine (BF16_MATVEC_MAX_ROWS on a 2-core Xeon with AMX). The torch
forms use ONEDNN_MIN_ROWS; the native forms use what `kernel_choices` measures for their library on this
machine, and these only while it cannot measure (the machine is too busy)."""

CALIBRATION_HIDDEN: Final = 512
CALIBRATION_PROJECTION: Final = 2048
CALIBRATION_MATRICES: Final = 16
"""The projections `kernel_choices` streams: W [hidden, projection] (a 56M Llama's), as many as make
more weight than a CPU's caches hold, as a decode step's layers do."""

CALIBRATION_HEADS: Final = 8
CALIBRATION_KV_HEADS: Final = 4
CALIBRATION_HEAD_DIM: Final = 64
"""The attention heads `kernel_choices` times prefills with (the same 56M Llama's)."""

CALIBRATION_ONEDNN_ROWS: Final = (1, 2, 4, 8)
CALIBRATION_MATVEC_ROWS: Final = (1, 2, 4, 8, 12, 16, 24, 32, 48)
CALIBRATION_PREFILL_CONTEXTS: Final = (128, 256, 512, 1024, 2048)
"""The sizes at which `kernel_choices` times both forms of each choice."""

CALIBRATION_REPEATS: Final = 3
"""Rounds per size; the best of them counts (the least disturbed by the rest of the machine)."""

CALIBRATION_MAX_LOAD_PER_CORE: Final = 1.0
"""Load average per core above which `kernel_choices` does not measure (the other processes' turns
would decide the choice) and runs with the defaults above until a quieter load."""

KERNEL_BUILD_TIMEOUT_S: Final = 600
"""Seconds the one-off build of one variant of the native CPU kernels may take (the sources compiled side by side)."""

KERNEL_CACHE_DIR_ENV: Final = "KVWISE_KERNEL_CACHE_DIR"
"""Environment variable naming the folder of the compiled kernels, in place of the user's cache directory."""

# A model file is input: what a header may claim before the loader refuses it, stated once. Each bound is
# far above what real checkpoints hold (SmolLM2-135M: 36 keys, 272 tensors, a 1.7 MB header, arrays of
# 49,152 entries, tokens of at most 162 bytes; Llama 3's 280,147 merges and Gemma 3's 262,144 tokens fit too).

GGUF_MAX_HEADER_BYTES: Final = 32 * 1024**2
"""Bytes of a GGUF file's metadata and tensor index, together: the parsed values stay within a few hundred MB."""

GGUF_MAX_METADATA_ENTRIES: Final = 4096
"""Key/value entries a GGUF file's metadata may hold."""

GGUF_MAX_ARRAY_LENGTH: Final = 2**20
"""Entries in one metadata array (a vocabulary, its merges, scores or token types)."""

GGUF_MAX_STRING_BYTES: Final = 1024**2
"""Bytes of one metadata string (a chat template, a licence text)."""

GGUF_MAX_KEY_BYTES: Final = 256
"""Bytes of a metadata key's name."""

GGUF_MAX_TENSORS: Final = 65536
"""Tensors a GGUF file may index (a 126-layer Llama holds about 1,200)."""

GGML_MAX_NAME: Final = 64
"""ggml's bound on a tensor's name, its terminating NUL included: llama.cpp refuses longer names too."""

GGML_MAX_DIMS: Final = 4
"""Dimensions of a ggml tensor."""

MAX_TOKEN_BYTES: Final = 1024
"""Bytes of one vocabulary token (GGUF or tokenizer.json): a longer token (a 2 MB chain) makes merging and
matching it cost memory by the gigabyte."""

MAX_SCORE_MERGE_WORK: Final = 2**26
"""Σ len(token)² over a SentencePiece vocabulary whose merges are derived from its scores: the characters that
derivation slices (Gemma 3's vocabulary needs about a fifth of this)."""

# A chat template is the model file's code, run on every request: the bounds of one render (chat_template.py).

TEMPLATE_RENDER_SECONDS: Final = 5.0
"""Longest one render may take: a long conversation renders in milliseconds; past it, a 400."""

TEMPLATE_MAX_ITERATIONS: Final = 1_000_000
"""Most loop iterations one render may run, all loops together (10,000 messages x 100 is far less
than a template's real work; nested `range(100000)` loops are 10 billion)."""

TEMPLATE_MAX_CHARS: Final = 16 * 2**20
"""Longest text or list one render may build, and its whole output: four times the largest body
(`MAX_BODY_BYTES`), since a template repeats little of what it is given."""

TEMPLATE_MAX_BUILT_BYTES: Final = 64 * 2**20
"""Memory one render may build in all, every string, list and dict its operations, calls, filters and slices
return weighed as Python holds it (freed or not): sixteen times the largest body (`MAX_BODY_BYTES`), which a
template copies a few times at most; strings each within `TEMPLATE_MAX_CHARS` kept in a growing list took
gigabytes. A render's memory stays within this, one operation's result and `TEMPLATE_MAX_ITERATIONS` items."""

TEMPLATE_MAX_POWER_BITS: Final = 1 << 16
"""Largest integer `**` may make in a template (in bits): `2 ** 10**9` would take minutes."""
