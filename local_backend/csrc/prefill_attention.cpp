// Causal attention of a prefill chunk's queries over their context (CPU, float32): `kvwise::prefill_attention`.
//
// Flash attention's tiling, with the GEMMs made large: the query heads that share a kv head are stacked
// into one matrix (row = token · group + head), so each tile of that kv head's keys and values serves all
// of them in one GEMM; queries go 128 tokens at a time and keys 512 at a time, and a query block's last
// tile stops at the last key its last token sees (the causal triangle costs the block's own corner, where
// torch's flash kernel computes whole 256 × 512 tiles past the diagonal). Between the two GEMMs each row
// of scores becomes its exponentials (ATen's exp_u20, as torch's flash kernel uses) under the row's
// running maximum, rescaling what earlier tiles added (the online softmax); the row's sum divides its
// output once. The (kv head, query block) tiles run in parallel, one thread each, so each GEMM runs on
// one core over a tile in its cache. At 2048 tokens (8 heads, 4 kv heads, head_dim 64, one thread) this
// ran 43 ms against SDPA's 47 ms and the earlier whole-row form's 49 ms. Built and loaded by
// `local_backend/cpu_kernels.py`; `attention.py` calls it for prefill chunks on CPU float32 up to
// `KernelChoices.prefill_kernel_max_context` keys and keeps SDPA otherwise.

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

constexpr int64_t kBlockTokens = 128;  // query tokens per tile (of 32, 64 and 128, 128 ran fastest at 512 and 2048)
constexpr int64_t kBlockKeys = 512;    // keys per tile: with a group of 2, 256 × 512 scores (512 KiB) stay in a core's L2

// One row of a tile's scores, in place: exp(scores[0:visible] · scale − peak) with `peak` the row's
// running maximum (scaled), raised first to this tile's maximum; zeros from `visible` to `width`.
// Returns the factor exp(old peak − new peak) that rescales what the row accumulated before, and
// adds the row's new exponentials to `sum` (after rescaling it).
float online_exp_row(float* row, int64_t visible, int64_t width, float scale, float& peak, float& sum) {
  const int64_t whole = visible - visible % Vec::size();
  Vec top(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < whole; i += Vec::size()) top = at::vec::maximum(top, Vec::loadu(row + i));
  float tile_peak = max_lanes(top);
  for (int64_t i = whole; i < visible; ++i) tile_peak = std::max(tile_peak, row[i]);
  const float next = std::max(peak, tile_peak * scale);
  const float rescale = std::exp(peak - next);  // 0 on the first tile, where peak is -inf
  const Vec shift(-next), factor(scale);
  Vec total(0.f);
  for (int64_t i = 0; i < whole; i += Vec::size()) {
    const Vec e = at::vec::fmadd(Vec::loadu(row + i), factor, shift).exp_u20();
    e.store(row + i);
    total = total + e;
  }
  float added = sum_lanes(total);
  for (int64_t i = whole; i < visible; ++i) {
    row[i] = std::exp(row[i] * scale - next);
    added += row[i];
  }
  std::fill(row + visible, row + width, 0.f);
  peak = next;
  sum = sum * rescale + added;
  return rescale;
}

// One kv head's queries `first .. first + tokens` (their rows of `queries`, row = token · group + head
// in the group) attending causally over `keys` and `values` ([context, dim] of that kv head), written
// to their heads' places in `result` ([n, heads · dim]), one tile of keys after another.
void attend_block(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values, int64_t first, int64_t tokens,
                  int64_t before, int64_t group, int64_t kv_head, int64_t heads, float scale, float* result) {
  const int64_t rows = tokens * group, dim = queries.size(1), end = before + first + tokens;
  const at::Tensor block = queries.narrow(0, first * group, rows);
  at::Tensor scores = at::empty({rows, std::min(kBlockKeys, end)}, queries.options());
  at::Tensor weighted = at::empty({rows, dim}, queries.options());
  std::vector<float> peaks(rows, -std::numeric_limits<float>::infinity()), sums(rows, 0.f);
  float* w = weighted.data_ptr<float>();
  for (int64_t start = 0; start < end; start += kBlockKeys) {
    const int64_t width = std::min(kBlockKeys, end - start);
    at::Tensor tile = scores.narrow(1, 0, width);
    at::mm_out(tile, block, keys.narrow(0, start, width).t());
    float* data = scores.data_ptr<float>();
    const int64_t stride = scores.size(1);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t visible = std::clamp<int64_t>(before + first + r / group + 1 - start, 0, width);
      float* row = data + r * stride;
      if (visible == 0) {  // this query sees none of the tile's keys: it adds nothing
        std::fill(row, row + width, 0.f);
        continue;
      }
      const float rescale = online_exp_row(row, visible, width, scale, peaks[r], sums[r]);
      if (start > 0 && rescale != 1.f) {
        const Vec factor(rescale);
        for (int64_t d = 0; d < dim; d += Vec::size()) {
          const int64_t count = kvwise::lanes_before(d, dim);
          (Vec::loadu(w + r * dim + d, count) * factor).store(w + r * dim + d, count);
        }
      }
    }
    if (start == 0) {
      at::mm_out(weighted, tile, values.narrow(0, 0, width));
    } else {
      weighted.addmm_(tile, values.narrow(0, start, width));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = kv_head * group + r % group, token = first + r / group;
    const Vec inverse(1.f / sums[r]);
    float* dst = result + (token * heads + head) * dim;
    for (int64_t d = 0; d < dim; d += Vec::size()) {  // a head_dim of 8 · odd ends in half an AVX-512 vector
      const int64_t count = kvwise::lanes_before(d, dim);
      (Vec::loadu(w + r * dim + d, count) * inverse).store(dst + d, count);
    }
  }
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
  const at::Tensor keys = k.permute({1, 0, 2}).contiguous();  // [kv_heads, context, dim]
  const at::Tensor values = v.permute({1, 0, 2}).contiguous();
  at::Tensor out = at::empty({n, heads * dim}, q.options());
  float* result = out.data_ptr<float>();
  const int64_t blocks = (n + kBlockTokens - 1) / kBlockTokens;
  // Threads take contiguous runs of items; a later query block sees more keys, so each kv head's blocks
  // go in the order 0, last, 1, last - 1, ...: any run mixes cheap and dear ones.
  at::parallel_for(0, kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t kv_head = item / blocks, turn = item % blocks;
      const int64_t first = (turn % 2 == 0 ? turn / 2 : blocks - 1 - turn / 2) * kBlockTokens;
      attend_block(queries[kv_head], keys[kv_head], values[kv_head], first, std::min(kBlockTokens, n - first), before,
                   group, kv_head, heads, static_cast<float>(scale), result);
    }
  });
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
