// Causal attention of a prefill chunk's queries over their context (CPU, float32): `kvwise::prefill_attention`.
//
// torch's flash kernel splits a 512-token prompt into 64-query blocks per head, and its small GEMMs ran
// at ~40 GFLOP/s here, a third of this machine's sgemm peak (vLLM's CPU kernel is no faster). This one
// makes the GEMMs large instead: the query heads that share a kv head are stacked into one matrix
// (row = token · group + head), so each kv head's keys and values serve all of them in one
// `bmm`, and queries go 128 tokens at a time, each block multiplying only the keys it can see (the
// causal triangle costs a block's own square, not the whole prompt's). Between the two GEMMs each row of
// scores becomes its exponentials (ATen's exp_u20, as torch's flash kernel uses) up to the last key its
// token sees and zeros after, and the row's sum divides its output once the values are weighted. Built
// and loaded by `local_backend/cpu_kernels.py`; `attention.py` calls it for prefill chunks on CPU float32
// up to `PREFILL_KERNEL_MAX_CONTEXT` keys and keeps SDPA otherwise.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kv_int8.h"
#include "lanes.h"

namespace {

using kvwise::max_lanes;
using kvwise::sum_lanes;
using kvwise::Vec;

constexpr int64_t kBlockTokens = 128;  // query tokens per GEMM pair: 512 and 1024 prompts ran fastest at 128 (64 and 256 were slower)

// In place on one row of scores: exp((scores[0:visible] - max) · scale), zero after; returns their sum,
// which divides the row's output once the values are weighted (a pass over dim floats, not over the row).
float causal_exp_row(float* row, int64_t visible, int64_t width, float scale) {
  const int64_t whole = visible - visible % Vec::size();
  Vec top(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < whole; i += Vec::size()) top = at::vec::maximum(top, Vec::loadu(row + i));
  float peak = max_lanes(top);
  for (int64_t i = whole; i < visible; ++i) peak = std::max(peak, row[i]);
  const Vec shift(-peak * scale), factor(scale);
  Vec total(0.f);
  for (int64_t i = 0; i < whole; i += Vec::size()) {
    const Vec e = at::vec::fmadd(Vec::loadu(row + i), factor, shift).exp_u20();
    e.store(row + i);
    total = total + e;
  }
  float sum = sum_lanes(total);
  for (int64_t i = whole; i < visible; ++i) {
    row[i] = std::exp(row[i] * scale - peak * scale);
    sum += row[i];
  }
  std::fill(row + visible, row + width, 0.f);
  return sum;
}

// q [n, heads, dim] (rows may be strided), k and v [context, kv_heads, dim] (likewise), the queries being the
// context's last n tokens: query j sees keys 0 .. context - n + j. Returns [n, heads · dim].
at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.scalar_type() == at::kFloat &&
                  k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "prefill_attention: float32 q [n, heads, dim], k and v [context, kv_heads, dim]");
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), context = k.size(0), kv_heads = k.size(1);
  TORCH_CHECK(k.size(2) == dim && dim % 8 == 0 && kv_heads > 0 && heads % kv_heads == 0 && n <= context && n > 0,
              "prefill_attention: one head_dim (a multiple of 8), heads a multiple of kv_heads, 0 < n <= context");
  const int64_t group = heads / kv_heads, before = context - n;
  // [kv_heads, n · group, dim]: kv head b's queries, row j · group + g for token j, head b · group + g.
  const at::Tensor queries = q.view({n, kv_heads, group, dim}).permute({1, 0, 2, 3}).reshape({kv_heads, n * group, dim});
  const at::Tensor keys_t = k.permute({1, 2, 0});  // [kv_heads, dim, context]
  const at::Tensor values = v.permute({1, 0, 2});  // [kv_heads, context, dim]
  const int64_t block = std::min(n, kBlockTokens);
  at::Tensor scores_buffer = at::empty({kv_heads * block * group * context}, q.options());
  at::Tensor weighted_buffer = at::empty({kv_heads * block * group * dim}, q.options());
  at::Tensor out = at::empty({n, heads * dim}, q.options());
  std::vector<float> sums(kv_heads * block * group);
  float* result = out.data_ptr<float>();
  const float row_scale = static_cast<float>(scale);
  for (int64_t first = 0; first < n; first += block) {
    const int64_t tokens = std::min(block, n - first), rows = tokens * group, width = before + first + tokens;
    at::Tensor scores = scores_buffer.narrow(0, 0, kv_heads * rows * width).view({kv_heads, rows, width});
    at::bmm_out(scores, queries.narrow(1, first * group, rows), keys_t.narrow(2, 0, width));
    float* data = scores.data_ptr<float>();
    at::parallel_for(0, kv_heads * rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t token = first + (r % rows) / group;
        sums[r] = causal_exp_row(data + r * width, before + token + 1, width, row_scale);
      }
    });
    at::Tensor weighted = weighted_buffer.narrow(0, 0, kv_heads * rows * dim).view({kv_heads, rows, dim});
    at::bmm_out(weighted, scores, values.narrow(1, 0, width));
    const float* from = weighted.data_ptr<float>();
    at::parallel_for(0, kv_heads * rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {  // row r: kv head r / rows, token first + (r % rows) / group
        const int64_t head = r / rows * group + r % rows % group, token = first + r % rows / group;
        const Vec inverse(1.f / sums[r]);
        float* dst = result + (token * heads + head) * dim;
        for (int64_t d = 0; d < dim; d += Vec::size()) {  // a head_dim of 8 · odd ends in half an AVX-512 vector
          const int64_t count = kvwise::lanes_before(d, dim);
          (Vec::loadu(from + r * dim + d, count) * inverse).store(dst + d, count);
        }
      }
    });
  }
  return out;
}

// The int8 cache's rows at `slots` as float32 [n, 2, kv_heads, dim]: a prefill chunk's context read where it lies,
// codes widened and scaled in one pass (torch ops take three: a gather of the rows, a conversion, a multiply).
at::Tensor gather_kv(const at::Tensor& kv_cache, const at::Tensor& slots) {
  TORCH_CHECK(kv_cache.dim() == 4 && kv_cache.size(1) == 2 && kv_cache.is_contiguous() && kv_cache.scalar_type() == at::kChar,
              "gather_kv: kv_cache must be contiguous int8 [slots, 2, kv_heads, dim + 4]");
  TORCH_CHECK(slots.dim() == 1 && slots.scalar_type() == at::kLong && slots.is_contiguous(), "gather_kv: int64 slots");
  const int64_t n = slots.size(0), rows = 2 * kv_cache.size(2), row = kv_cache.size(3), dim = row - kvwise::kScaleBytes;
  const int64_t count = kv_cache.size(0);
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < n; ++t) TORCH_CHECK(slot[t] >= 0 && slot[t] < count, "gather_kv: slot ", slot[t], " out of range");
  at::Tensor out = at::empty({n, 2, kv_cache.size(2), dim}, kv_cache.options().dtype(at::kFloat));
  const int8_t* cache = kv_cache.data_ptr<int8_t>();
  float* result = out.data_ptr<float>();
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t r = 0; r < rows; ++r) kvwise::dequantize_row(cache + (slot[t] * rows + r) * row, dim, result + (t * rows + r) * dim);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) {
  m.def("prefill_attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor");
  m.def("gather_kv(Tensor kv_cache, Tensor slots) -> Tensor");
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) {
  m.impl("prefill_attention", prefill_attention);
  m.impl("gather_kv", gather_kv);
}
