"""Llama-architecture decoder layers (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM) over a paged KV cache.

Parameter names mirror Hugging Face's, except that q/k/v and gate/up projections are packed into
one matrix each (`qkv_proj`, `gate_up_proj`) so a step does two matmuls where it would do five,
and projection matrices are stored transposed (`weight_t`, see `Linear`).
Tokens of all sequences in a step are flattened to `[T, hidden]`; only attention looks at sequences.
Every layer runs the ops the loader chose for the model (`ops.select`: the native CPU kernels or
the torch forms) and never asks which it holds.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from local_backend.kernels.ops import FLOAT_WEIGHT, LayerStack, TorchOps
from local_backend.kernels.quantized import QuantizedWeight
from local_backend.model.attention import AttentionMetadata, OutputRows, paged_attention
from local_backend.model.config import ModelConfig, RopeConfig


def rope_tables(
    rope: RopeConfig, head_dim: int, max_len: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position × inv_freq, `[max_len, head_dim]`, as transformers computes them.

    inv_freq_i = 1 / theta^(2i/d); `linear` divides positions by `factor`; `llama3` divides the low
    frequencies by `factor` and interpolates the band between `low_freq_factor` and `high_freq_factor`.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float) / head_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        inv_freq = inv_freq / rope.factor
    elif rope.rope_type == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, rope)
    freqs = torch.outer(torch.arange(max_len, dtype=torch.float), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)


def _llama3_inv_freq(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    old_len = rope.original_max_position_embeddings
    low_freq_wavelen = old_len / rope.low_freq_factor
    high_freq_wavelen = old_len / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class Linear(nn.Module):
    """y = x·Wᵀ + b with W stored transposed, `weight_t [in, out]`.

    Decode multiplies a few rows by each matrix, which streams the whole matrix from memory; on CPU
    a row-major [in, out] matrix streams faster than [out, in], and large matmuls are no slower. The
    native ops send decode rows to `kvwise::matvec`, which streams `weight_t` near the memory's
    speed (`csrc/matvec.cpp`; a bfloat16 `weight_t` is half the bytes, widened as it is read).
    `pack` adds oneDNN's blocked copy of W, as vLLM's CPU build repacks its weights at load: larger
    batches multiply by it (the price: the weights twice in memory). `keep_quantized`
    replaces W by a GGUF file's blocks (`quantized`), which the ops multiply by as they are.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.ops = ops
        self.weight_t = nn.Parameter(torch.empty(in_features, out_features, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype)) if bias else None
        self.packed: torch.Tensor | None = None
        self.quantized: QuantizedWeight | None = None

    def pack(self) -> None:
        """Keep oneDNN's prepacked copy of W beside `weight_t` (CPU, after loading;
        `kernel_choices.onednn_prepacks`)."""
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight_t.t().contiguous(), None)

    def keep_quantized(self, weight: QuantizedWeight) -> None:
        """Multiply by `weight`'s blocks from now on; the float `weight_t`, allocated but never written (so never
        resident), is dropped."""
        self.quantized = weight
        self.weight_t = nn.Parameter(self.weight_t.new_empty(0), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quantized is not None:
            return self.ops.quantized_linear(x, self.quantized, self.bias)
        return self.ops.linear(x, self.weight_t, self.bias, self.packed)


class Embedding(nn.Module):
    """Token rows of `weight [vocab, hidden]`; `keep_quantized` replaces the table by a GGUF file's blocks, each
    looked-up row dequantized as it is read (a step reads a few rows of a table that a tied lm_head streams whole,
    so the blocks serve both, where a float copy for lookups would take more memory than all the blocks)."""

    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.ops = ops
        self.weight = nn.Parameter(torch.empty(vocab, hidden, dtype=dtype))
        self.quantized: QuantizedWeight | None = None

    def keep_quantized(self, weight: QuantizedWeight) -> None:
        """Read rows from `weight`'s blocks from now on; the float table is dropped (its dtype stays the model's)."""
        self.quantized = weight
        self.weight = nn.Parameter(self.weight.new_empty(0), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.quantized is not None:
            return self.ops.quantized_rows(self.quantized, ids, self.weight.dtype)
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    """x / √(mean(x²) + eps) · weight."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.ops = ops
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual) in one pass (vLLM's fused_add_rms_norm); may reuse both inputs."""
        return self.ops.add_rms_norm(x, residual, self.weight, self.eps)


class Attention(nn.Module):
    """Grouped-query self-attention with optional qkv bias (Qwen2) and q/k norms (Qwen3)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.ops = ops
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.head_dim = cfg.head_dim
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, cfg.qkv_bias, dtype, ops)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, cfg.o_bias, dtype, ops)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype, ops) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, dtype, ops) if cfg.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        kv_cache: torch.Tensor,
        kept: OutputRows | None = None,
    ) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(tokens, -1, self.head_dim)
        k = k.view(tokens, -1, self.head_dim)
        v = v.view(tokens, -1, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.ops.rotary_embedding(q, k, cos, sin)
        return self.o_proj(paged_attention(q, k, v, kv_cache, meta, self.ops, kept))


class MLP(nn.Module):
    """down(silu(gate(x)) · up(x))."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        size = cfg.intermediate_size
        self.ops = ops
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * size, cfg.mlp_bias, dtype, ops)
        self.down_proj = Linear(size, cfg.hidden_size, cfg.mlp_bias, dtype, ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.ops.silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x)); for the `kept` rows alone
    where given (every row still stores its keys and values).

    As in vLLM, a layer returns its MLP's output and the residual stream apart, and the next norm adds
    them (`RMSNorm.add_and_norm`): the sum is read once, not once by the add and again by the norm.
    """

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, dtype, ops)
        self.mlp = MLP(cfg, dtype, ops)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, ops)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, ops)

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        kv_cache: torch.Tensor,
        kept: OutputRows | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's MLP output, the residual stream before it); `residual` is None at the first layer."""
        if residual is None:
            residual, h = x, self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm.add_and_norm(x, residual)
        h = self.self_attn(h, cos, sin, meta, kv_cache, kept)
        if kept is not None:
            residual = residual[kept.rows]
        h, residual = self.post_attention_layernorm.add_and_norm(h, residual)
        return self.mlp(h), residual


class Backbone(nn.Module):
    """Embeddings, decoder layers and the final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype, ops)
        self.layers = nn.ModuleList(DecoderLayer(cfg, dtype, ops) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, ops)


class CausalLM(nn.Module):
    """A Llama-architecture causal LM: `forward` runs one step's tokens, `logits` projects chosen rows.

    Build it under `torch.device("meta")` and let the loader materialise the weights; `ops` are
    the ones every layer runs (`ops.select` for the device and dtype).
    """

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, ops: TorchOps) -> None:
        super().__init__()
        self.ops = ops
        self.model = Backbone(cfg, dtype, ops)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, False, dtype, ops)

    def forward(
        self,
        input_ids: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        kv_cache: torch.Tensor,
        kept: OutputRows | None = None,
    ) -> torch.Tensor:
        """Hidden states `[T, hidden]` of the step's tokens, or of the `kept` rows alone (the last
        layer computes only those); `kv_cache` is `[layers, slots, 2, ...]`."""
        x = self.model.embed_tokens(input_ids)
        stack, paged, fused = self.layer_stack, meta.paged_only, None
        if kept is None and stack is not None and paged is not None:
            step = (meta.slot_mapping, paged.block_tables, paged.context_lens, paged.block_size)
            fused = self.ops.decode_layers(x, stack, cos, sin, kv_cache, step)
        x, residual = fused or self._run_layers(x, cos, sin, meta, kv_cache, kept)
        return self.model.norm.add_and_norm(x, residual)[0]

    def _run_layers(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        kv_cache: torch.Tensor,
        kept: OutputRows | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layers one by one: (the last one's MLP output, the residual stream before it)."""
        residual = None
        *inner, last = self.model.layers
        for layer, layer_cache in zip(inner, kv_cache):
            x, residual = layer(x, residual, cos, sin, meta, layer_cache)
        return last(x, residual, cos, sin, meta, kv_cache[len(inner)], kept)

    @functools.cached_property
    def layer_stack(self) -> LayerStack | None:
        """The layers' weights for `ops.decode_layers`, laid out on first use (after loading); None for a model with
        q/k norms (Qwen3), which the one-call step does not run."""
        layers = [layer for layer in self.model.layers if isinstance(layer, DecoderLayer)]
        first = layers[0]
        if first.self_attn.q_norm is not None:
            return None
        attn = first.self_attn
        stack = LayerStack([], [], [], [], attn.q_size, attn.kv_size, attn.head_dim, first.input_layernorm.eps)
        for layer in layers:
            stack.norms.extend((layer.input_layernorm.weight, layer.post_attention_layernorm.weight))
            attn, mlp = layer.self_attn, layer.mlp
            for linear in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
                blocks = linear.quantized
                stack.weights.append(linear.weight_t if blocks is None else blocks.blocks)
                stack.kinds.append(FLOAT_WEIGHT if blocks is None else int(blocks.kind))
                stack.biases.append(linear.bias)
        return stack

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of the rows that sample a token.

        A lm_head kept as blocks takes the rows as float32 and gives float32 logits: its kernel sums in float32
        anyway, and logits rounded to bfloat16 (steps of 0.06 around 10) tie top tokens that float32 tells apart,
        then cost the sampler a copy to float32 large enough for an OpenMP region in every decode step.
        """
        if self.lm_head.quantized is not None:
            return self.lm_head(hidden.float())
        return self.lm_head(hidden)

    def quantized_types(self) -> tuple[str, ...]:
        """The block types of the weights kept quantized (`Linear.keep_quantized`), sorted; empty: none."""
        kept = (module.quantized for module in self.modules() if isinstance(module, (Linear, Embedding)))
        return tuple(sorted({weight.kind.name for weight in kept if weight is not None}))
