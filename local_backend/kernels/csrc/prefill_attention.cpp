// Causal attention of a prefill chunk's queries over their context (CPU, float32 or bfloat16): `kvwise::prefill_attention`.
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
// `local_backend/kernels/cpu_kernels.py`; `model/attention.py` calls it for prefill chunks on CPU float32 up to
// `KernelChoices.prefill_kernel_max_context` keys and keeps SDPA otherwise. The bfloat16 form (`attend_block_bf16`)
// multiplies on oneDNN's brgemm where the CPU has it (`packs_bf16`: AMX), and `ops.py` gives it long chunks after
// cached tokens, where it beat SDPA's masked path (`BF16_PREFILL_KERNEL_MIN_QUERIES`); on AVX512-BF16 dot products
// of its own where the CPU has those but no AMX (`dots_bf16`, `DotTiles`), and `ops.py` gives it every chunk: on the
// 2-core AMD EPYC (9 heads, 3 kv heads, head_dim 64) 512 queries took 1.82 ms against 3.38 in the float32 kernel on
// widened copies and 17.1 in SDPA's causal path, 2048 19.9 against 34.5 and 279, 128 after 2048 cached 4.0 against
// 6.3 and 10.8, 8 queries 0.026 against SDPA's 0.053.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#if defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

#include "kv_int8.h"
#include "lanes.h"
#include "parallel.h"

namespace {

using kvwise::max_lanes;
using kvwise::sum_lanes;
using kvwise::BFloat16;
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

// One row of a tile's scores as its exponentials (`online_exp_row`), or zeros where the query sees none of the
// tile's keys (it adds nothing); `accumulated` (dim floats, the row's output over earlier tiles, null on the first
// tile) rescaled to the row's new peak.
void tile_row(float* row, int64_t visible, int64_t width, float scale, float& peak, float& sum, float* accumulated, int64_t dim) {
  if (visible == 0) {
    std::fill(row, row + width, 0.f);
    return;
  }
  const float rescale = online_exp_row(row, visible, width, scale, peak, sum);
  if (accumulated == nullptr || rescale == 1.f) return;
  const Vec factor(rescale);
  for (int64_t d = 0; d < dim; d += Vec::size()) {
    const int64_t count = kvwise::lanes_before(d, dim);
    (Vec::loadu(accumulated + d, count) * factor).store(accumulated + d, count);
  }
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
      tile_row(row, visible, width, scale, peaks[r], sums[r], start > 0 ? w + r * dim : nullptr, dim);
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

// A bfloat16 chunk of up to this many queries (a prompt's short suffix after cached tokens) is a decode-sized step: its
// projections multiply on kvwise's pool (`QUANT_MATVEC_MAX_ROWS`, `matvec`), so its attention runs there too. An OpenMP
// region between them wakes libgomp's team while the pool's worker still spins, and on a busy CPU its join waits out
// a descheduled thread's time slice. The float32 kernel stays on OpenMP: its GEMMs (MKL) would open regions of their
// own from the pool's threads, which are outside any OpenMP region.
constexpr int64_t kPoolQueries = 32;

// `at::parallel_for` over [begin, end) for a chunk of `queries` queries: on kvwise's pool for a bfloat16 kernel
// (intrinsics and oneDNN's brgemm, no OpenMP inside) up to `kPoolQueries`.
template <typename F>
void parallel_over(bool bf16, int64_t queries, int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (bf16 && queries <= kPoolQueries) {
    kvwise::parallel_for(begin, end, grain, f);
  } else {
    at::parallel_for(begin, end, grain, f);
  }
}

// `attend(kv_head, first, tokens)` for each kv head's query blocks of `kBlockTokens`, in parallel, then `done()` after
// each run of items. Threads take contiguous runs of items; a later query block sees more keys, so each kv head's blocks
// go in the order 0, last, 1, last - 1, ...: any run mixes cheap and dear ones.
template <typename Attend, typename Done>
void for_each_block(bool bf16, int64_t kv_heads, int64_t n, const Attend& attend, const Done& done) {
  const int64_t blocks = (n + kBlockTokens - 1) / kBlockTokens;
  parallel_over(bf16, n, 0, kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t turn = item % blocks, first = (turn % 2 == 0 ? turn / 2 : blocks - 1 - turn / 2) * kBlockTokens;
      attend(item / blocks, first, std::min(kBlockTokens, n - first));
    }
    done();
  });
}

constexpr int64_t kKeyAlign = 64;  // keys per packed chunk of a bfloat16 context (its tail padded with zero keys, masked)

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Columns of a packed block of values: oneDNN packs a bfloat16 B of 16, 32, 48 or 64 columns, so a head_dim past 64
// goes in blocks of 64 (`bf16_head_dim`).
int64_t value_columns(int64_t dim) { return std::min<int64_t>(dim, 64); }

bool bf16_head_dim(int64_t dim) { return dim % 16 == 0 && (dim <= 64 || dim % 64 == 0); }

// A row's `width` exponentials rounded to bfloat16 into `dst` (for the second GEMM); returns what the rounding added to
// the sum of its first `visible` (the rest are zeros), so that the row divides by the sum of the weights its values
// were multiplied by, not of the unrounded ones: each output stays a weighted mean of the values.
float narrow_probs(const float* row, int64_t visible, int64_t width, BFloat16* dst) {
  kvwise::narrow(row, width, dst);
  Vec moved(0.f);
  for (int64_t i = 0; i < visible; i += Vec::size()) {
    const int64_t count = kvwise::lanes_before(i, visible);
    moved = moved + (kvwise::load(dst + i, count) - Vec::loadu(row + i, count));
  }
  return sum_lanes(moved);
}

// The bfloat16 form of `attend_block`: the same tiles and online softmax, the two GEMMs those of `Tiles` (float32
// sums) against one kv head's keys and values as `Tiles` packed them once per call (`BrgemmTiles`, `DotTiles`): the
// scores of `padded` keys from `start` (`Tiles::kAlign` keys a packed unit, zero keys past the context, masked), and
// the rows' exponentials times the values. Scores stay float32; each row's exponentials are rounded to bfloat16 for
// the second GEMM, as torch's flash kernel rounds them.
template <typename Tiles>
void attend_block_bf16(const BFloat16* block, const Tiles& tiles, int64_t first, int64_t tokens, int64_t before, int64_t group,
                       int64_t dim, int64_t kv_head, int64_t heads, float scale, BFloat16* result) {
  const int64_t rows = tokens * group, end = before + first + tokens;
  const std::unique_ptr<float[]> scores(new float[rows * kBlockKeys]), weighted(new float[rows * dim]);  // uninitialised:
  const std::unique_ptr<BFloat16[]> probs(new BFloat16[rows * kBlockKeys]);  // each GEMM writes before it is read
  std::vector<float> peaks(rows, -std::numeric_limits<float>::infinity()), sums(rows, 0.f);
  float* w = weighted.get();
  for (int64_t start = 0; start < end; start += kBlockKeys) {
    const int64_t width = std::min(kBlockKeys, end - start), padded = round_up(width, Tiles::kAlign);
    tiles.scores(block, rows, start, padded, scores.get());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t visible = std::clamp<int64_t>(before + first + r / group + 1 - start, 0, width);
      float* row = scores.get() + r * kBlockKeys;
      tile_row(row, visible, padded, scale, peaks[r], sums[r], start > 0 ? w + r * dim : nullptr, dim);
      sums[r] += narrow_probs(row, visible, padded, probs.get() + r * kBlockKeys);
    }
    tiles.weigh(probs.get(), rows, start, padded, w, start > 0);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = kv_head * group + r % group, token = first + r / group;
    const Vec inverse(1.f / sums[r]);
    BFloat16* dst = result + (token * heads + head) * dim;
    for (int64_t d = 0; d < dim; d += Vec::size()) {
      const int64_t count = kvwise::lanes_before(d, dim);
      kvwise::store(Vec::loadu(w + r * dim + d, count) * inverse, dst + d, count);
    }
  }
}

// A kv head's tiles on oneDNN's brgemm (AMX tiles; ATen's `cpublas::brgemm`, as torch's flash kernel calls it), its
// keys and values packed by `pack_kv` (`padded_context` keys).
struct BrgemmTiles {
  static constexpr int64_t kAlign = kKeyAlign;
  const BFloat16* keys;
  const BFloat16* values;
  int64_t padded_context, dim;

  void scores(const BFloat16* block, int64_t rows, int64_t start, int64_t padded, float* out) const {
    for (int64_t c = 0; c < padded; c += kKeyAlign) {
      at::native::cpublas::brgemm(rows, kKeyAlign, dim, dim, kKeyAlign, kBlockKeys, false, block, keys + (start + c) * dim, out + c);
    }
  }

  void weigh(const BFloat16* probs, int64_t rows, int64_t start, int64_t padded, float* w, bool add) const {
    const int64_t columns = value_columns(dim);
    for (int64_t col = 0; col < dim; col += columns) {
      at::native::cpublas::brgemm(rows, columns, padded, kBlockKeys, columns, dim, add, probs,
                                  values + col * padded_context + start * columns, w + col);
    }
  }
};

// Each kv head's keys and values zero-padded to whole `kKeyAlign`-key chunks and packed for brgemm chunk by chunk
// (keys as [dim, chunk] matrices, values as [chunk, dim]; oneDNN packs a B whose leading dimension is its width):
// [kv_heads, padded keys · dim] each, chunk c at c · kKeyAlign · dim.
std::pair<at::Tensor, at::Tensor> pack_kv(const at::Tensor& k, const at::Tensor& v) {
  const int64_t context = k.size(0), kv_heads = k.size(1), dim = k.size(2), padded = round_up(context, kKeyAlign);
  const int64_t chunks = padded / kKeyAlign;
  at::Tensor keys = at::zeros({padded, kv_heads, dim}, k.options()), values = at::zeros({padded, kv_heads, dim}, v.options());
  keys.narrow(0, 0, context).copy_(k);
  values.narrow(0, 0, context).copy_(v);
  const at::Tensor chunked_keys = keys.view({chunks, kKeyAlign, kv_heads, dim}).permute({2, 0, 3, 1}).contiguous();
  const at::Tensor chunked_values = values.permute({1, 0, 2}).contiguous();  // [kv_heads, padded, dim]
  at::Tensor packed_keys = at::empty({kv_heads, padded * dim}, k.options()), packed_values = at::empty_like(packed_keys);
  const BFloat16* src_k = chunked_keys.data_ptr<BFloat16>();
  const BFloat16* src_v = chunked_values.data_ptr<BFloat16>();
  BFloat16* pk = packed_keys.data_ptr<BFloat16>();
  BFloat16* pv = packed_values.data_ptr<BFloat16>();
  at::parallel_for(0, kv_heads * chunks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t at = item * kKeyAlign * dim;  // chunk `item % chunks` of kv head `item / chunks`
      at::native::cpublas::pack(dim, kKeyAlign, kKeyAlign, kKeyAlign, at::kBFloat16, at::kBFloat16, src_k + at, pk + at);
      const int64_t head = item / chunks, start = item % chunks * kKeyAlign, width = value_columns(dim);
      for (int64_t col = 0; col < dim; col += width) {  // column block col / width at col · padded, then by key
        at::native::cpublas::pack(kKeyAlign, width, dim, width, at::kBFloat16, at::kBFloat16, src_v + at + col,
                                  pv + head * padded * dim + col * padded + start * width);
      }
    }
  });
  return {packed_keys, packed_values};
}

// The bfloat16 kernel: every kv head's query blocks (`for_each_block`) over `tiles_of(kv_head)`, that kv head's keys
// and values as a `Tiles` packed them, then `done()` in each thread; `queries` [kv_heads, n · group, dim] contiguous.
template <typename TilesOf, typename Done>
at::Tensor attend_bf16(const at::Tensor& queries, int64_t context, int64_t n, int64_t heads, int64_t group, double scale,
                       const TilesOf& tiles_of, const Done& done) {
  const int64_t dim = queries.size(2), before = context - n;
  at::Tensor out = at::empty({n, heads * dim}, queries.options());
  BFloat16* result = out.data_ptr<BFloat16>();
  for_each_block(
      true, queries.size(0), n,
      [&](int64_t kv_head, int64_t first, int64_t tokens) {
        attend_block_bf16(queries[kv_head].data_ptr<BFloat16>() + first * group * dim, tiles_of(kv_head), first, tokens, before,
                          group, dim, kv_head, heads, static_cast<float>(scale), result);
      },
      done);
  return out;
}

at::Tensor prefill_attention_bf16(const at::Tensor& queries, const at::Tensor& k, const at::Tensor& v, int64_t n, int64_t heads,
                                  int64_t group, double scale) {
  const auto [packed_keys, packed_values] = pack_kv(k, v);
  const int64_t padded = round_up(k.size(0), kKeyAlign), dim = k.size(2);
  const auto tiles_of = [&](int64_t kv_head) {
    return BrgemmTiles{packed_keys[kv_head].data_ptr<BFloat16>(), packed_values[kv_head].data_ptr<BFloat16>(), padded, dim};
  };
  return attend_bf16(queries, k.size(0), n, heads, group, scale, tiles_of, [] { at::native::cpublas::brgemm_release(); });
}

#if defined(CPU_CAPABILITY_AVX512)
#define KVWISE_BF16_DOTS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// A kv head's tiles on AVX512-BF16 dot products (`vdpbf16ps`: each of 16 float sums adds two bfloat16 products), for a
// CPU that has them but no AMX, where oneDNN's brgemm takes no bfloat16 and ATen exports no bfloat16 GEMM with
// float32 sums; the float32 kernel on widened copies multiplies at half their width. Keys are packed in groups of
// 16 (`kAlign`), a group's dims by pairs ([dim / 2][16 keys][2]), so one vector of a group times a query's pair of
// dims, broadcast, adds to the group's 16 scores; values by pairs of keys ([dim / 16][16 dims][2] a pair), so one
// vector times a row's two exponentials adds to 16 of its outputs. Both are zero past the context (`pack_dots`).
// Rows go four at a time (two where dim > 64), so each packed vector loaded serves several rows from registers.
struct DotTiles {
  static constexpr int64_t kAlign = 16;
  const BFloat16* keys;    // [groups][dim / 2][16][2]
  const BFloat16* values;  // [pairs][dim / 16][16][2]
  int64_t dim;

  // R rows of C vectors of sums: out[r][16 c .. 16 c + 16] = (out's own, where `add`, else 0) + the sum over `steps`
  // s of packed[c · column + s · step] (32 bfloat16) times row r's pair of bfloat16 at rows[r · row_stride + 2 s].
  template <int R, int C>
  KVWISE_BF16_DOTS_TARGET static void dot_tile(const BFloat16* rows, int64_t row_stride, const BFloat16* packed, int64_t column,
                                               int64_t step, int64_t steps, float* out, int64_t out_stride, bool add) {
    __m512 sums[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) sums[r][c] = add ? _mm512_loadu_ps(out + r * out_stride + c * 16) : _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; ++s) {
      __m512i vectors[C];
      for (int c = 0; c < C; ++c) vectors[c] = _mm512_loadu_si512(packed + c * column + s * step);
      for (int r = 0; r < R; ++r) {
        int32_t two;  // the row's pair, in every 32-bit lane
        std::memcpy(&two, rows + r * row_stride + 2 * s, sizeof two);
        const __m512i pair = _mm512_set1_epi32(two);
        for (int c = 0; c < C; ++c) sums[r][c] = _mm512_dpbf16_ps(sums[r][c], (__m512bh)vectors[c], (__m512bh)pair);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + r * out_stride + c * 16, sums[r][c]);
  }

  // The scores of a query row group against key groups two at a time (the last alone).
  template <int R>
  KVWISE_BF16_DOTS_TARGET static void score_rows(const BFloat16* q, int64_t dim, const BFloat16* groups, int64_t count, float* out) {
    const int64_t group_size = dim * 16, pairs = dim / 2;
    int64_t g = 0;
    for (; g + 2 <= count; g += 2) dot_tile<R, 2>(q, dim, groups + g * group_size, group_size, 32, pairs, out + g * 16, kBlockKeys, false);
    if (g < count) dot_tile<R, 1>(q, dim, groups + g * group_size, group_size, 32, pairs, out + g * 16, kBlockKeys, false);
  }

  KVWISE_BF16_DOTS_TARGET void scores(const BFloat16* block, int64_t rows, int64_t start, int64_t padded, float* out) const {
    const BFloat16* groups = keys + start * dim;  // group start / 16 of dim · 16 values
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) score_rows<4>(block + r * dim, dim, groups, padded / 16, out + r * kBlockKeys);
    for (; r < rows; ++r) score_rows<1>(block + r * dim, dim, groups, padded / 16, out + r * kBlockKeys);
  }

  // The rows' exponentials times the values, all DV vectors of a row's outputs at once.
  template <int DV>
  KVWISE_BF16_DOTS_TARGET static void weigh_rows(const BFloat16* probs, int64_t rows, const BFloat16* pairs_of_values, int64_t pairs,
                                                 float* w, bool add) {
    constexpr int R = DV <= 4 ? 4 : 2;  // at most 16 vectors of sums
    constexpr int64_t dim = DV * 16;
    int64_t r = 0;
    for (; r + R <= rows; r += R) dot_tile<R, DV>(probs + r * kBlockKeys, kBlockKeys, pairs_of_values, 32, dim * 2, pairs, w + r * dim, dim, add);
    for (; r < rows; ++r) dot_tile<1, DV>(probs + r * kBlockKeys, kBlockKeys, pairs_of_values, 32, dim * 2, pairs, w + r * dim, dim, add);
  }

  KVWISE_BF16_DOTS_TARGET void weigh(const BFloat16* probs, int64_t rows, int64_t start, int64_t padded, float* w, bool add) const {
    const BFloat16* from = values + start * dim;  // pair start / 2 of dim · 2 values
    const int64_t pairs = padded / 2;
    switch (dim / 16) {
      case 1: return weigh_rows<1>(probs, rows, from, pairs, w, add);
      case 2: return weigh_rows<2>(probs, rows, from, pairs, w, add);
      case 3: return weigh_rows<3>(probs, rows, from, pairs, w, add);
      case 4: return weigh_rows<4>(probs, rows, from, pairs, w, add);
      case 5: return weigh_rows<5>(probs, rows, from, pairs, w, add);
      case 6: return weigh_rows<6>(probs, rows, from, pairs, w, add);
      case 7: return weigh_rows<7>(probs, rows, from, pairs, w, add);
      default: return weigh_rows<8>(probs, rows, from, pairs, w, add);
    }
  }
};

// Each kv head's keys and values packed for `DotTiles` (zero past the context): [kv_heads, padded · dim] each, read
// from k and v where they lie (no transposed copies, no zero fill past the last group: each a region of its own) for a
// chunk of `n` queries.
std::pair<at::Tensor, at::Tensor> pack_dots(const at::Tensor& k_rows, const at::Tensor& v_rows, int64_t n) {
  const at::Tensor k = k_rows.stride(2) == 1 ? k_rows : k_rows.contiguous(), v = v_rows.stride(2) == 1 ? v_rows : v_rows.contiguous();
  const int64_t context = k.size(0), kv_heads = k.size(1), dim = k.size(2), padded = round_up(context, DotTiles::kAlign);
  at::Tensor packed_keys = at::empty({kv_heads, padded * dim}, k.options()), packed_values = at::empty_like(packed_keys);
  const int64_t pairs = dim / 2, blocks = dim / 16, groups = padded / 16;
  const BFloat16* key_data = k.data_ptr<BFloat16>();
  const BFloat16* value_data = v.data_ptr<BFloat16>();
  BFloat16* keys_out = packed_keys.data_ptr<BFloat16>();
  BFloat16* values_out = packed_values.data_ptr<BFloat16>();
  const int64_t key_row = k.stride(0), key_head = k.stride(1), value_row = v.stride(0), value_head = v.stride(1);
  parallel_over(true, n, 0, kv_heads * groups, 4, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {  // 16 keys of kv head `item / groups`: 16 · dim packed values each
      const int64_t head = item / groups, first = item % groups * 16;
      BFloat16* pk = keys_out + head * padded * dim + first * dim;
      BFloat16* pv = values_out + head * padded * dim + first * dim;
      if (first + 16 > context) {  // the last group, past the context: zero where no key lands
        std::fill(pk, pk + 16 * dim, BFloat16(0.f));
        std::fill(pv, pv + 16 * dim, BFloat16(0.f));
      }
      for (int64_t j = first; j < std::min(first + 16, context); ++j) {
        const BFloat16* key = key_data + j * key_row + head * key_head;
        const BFloat16* value = value_data + j * value_row + head * value_head;
        for (int64_t p = 0; p < pairs; ++p) {
          pk[(p * 16 + j - first) * 2] = key[2 * p];
          pk[(p * 16 + j - first) * 2 + 1] = key[2 * p + 1];
        }
        BFloat16* pair = pv + (j - first) / 2 * dim * 2;  // this key's pair of keys
        for (int64_t b = 0; b < blocks; ++b) {
          for (int64_t l = 0; l < 16; ++l) pair[(b * 16 + l) * 2 + (j - first) % 2] = value[b * 16 + l];
        }
      }
    }
  });
  return {packed_keys, packed_values};
}

at::Tensor prefill_attention_dots(const at::Tensor& queries, const at::Tensor& k, const at::Tensor& v, int64_t n, int64_t heads,
                                  int64_t group, double scale) {
  const auto [packed_keys, packed_values] = pack_dots(k, v, n);
  const int64_t dim = k.size(2);
  const auto tiles_of = [&](int64_t kv_head) {
    return DotTiles{packed_keys[kv_head].data_ptr<BFloat16>(), packed_values[kv_head].data_ptr<BFloat16>(), dim};
  };
  return attend_bf16(queries, k.size(0), n, heads, group, scale, tiles_of, [] {});
}
#endif

// Whether this CPU attends bfloat16 on AVX512-BF16 dot products (`DotTiles`: the AVX-512 build, head_dim a multiple of
// 16 up to 128), where it has no brgemm for bfloat16 (`packs_bf16`).
bool dots_bf16(int64_t head_dim) {
#if defined(CPU_CAPABILITY_AVX512)
  static const bool has_dots = __builtin_cpu_supports("avx512bf16");
  return has_dots && head_dim % 16 == 0 && head_dim <= 128 && !at::native::cpublas::could_pack(at::kBFloat16);
#else
  return false;
#endif
}

// Whether this CPU multiplies bfloat16 through `cpublas::brgemm` (oneDNN's ukernel: AMX; `dots_bf16` elsewhere), for this head_dim.
bool packs_bf16(int64_t head_dim) { return bf16_head_dim(head_dim) && at::native::cpublas::could_pack(at::kBFloat16); }

// q [n, heads, dim] (rows may be strided), k and v [context, kv_heads, dim] (likewise), the queries being the
// context's last n tokens: query j sees keys 0 .. context - n + j. Returns [n, heads · dim].
at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const bool dots = bf16 && dots_bf16(q.size(2));
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() &&
                  (q.scalar_type() == at::kFloat || (bf16 && (packs_bf16(q.size(2)) || dots))) &&
                  k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "prefill_attention: float32 (or, where `packs_bf16` or `dots_bf16`, bfloat16) q [n, heads, dim], k and v [context, "
              "kv_heads, dim]");
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), context = k.size(0), kv_heads = k.size(1);
  TORCH_CHECK(k.size(2) == dim && dim % 8 == 0 && kv_heads > 0 && heads % kv_heads == 0 && n <= context && n > 0,
              "prefill_attention: one head_dim (a multiple of 8), heads a multiple of kv_heads, 0 < n <= context");
  const int64_t group = heads / kv_heads, before = context - n;
  // [kv_heads, n · group, dim]: kv head b's queries, row j · group + g for token j, head b · group + g.
  const at::Tensor queries = q.view({n, kv_heads, group, dim}).permute({1, 0, 2, 3}).reshape({kv_heads, n * group, dim});
#if defined(CPU_CAPABILITY_AVX512)
  if (dots) return prefill_attention_dots(queries.contiguous(), k, v, n, heads, group, scale);
#endif
  if (bf16) return prefill_attention_bf16(queries.contiguous(), k, v, n, heads, group, scale);
  const at::Tensor keys = k.permute({1, 0, 2}).contiguous();  // [kv_heads, context, dim]
  const at::Tensor values = v.permute({1, 0, 2}).contiguous();
  at::Tensor out = at::empty({n, heads * dim}, q.options());
  float* result = out.data_ptr<float>();
  for_each_block(
      false, kv_heads, n,
      [&](int64_t kv_head, int64_t first, int64_t tokens) {
        attend_block(queries[kv_head], keys[kv_head], values[kv_head], first, tokens, before, group, kv_head, heads,
                     static_cast<float>(scale), result);
      },
      [] {});
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
  m.def("packs_bf16(int head_dim) -> bool", packs_bf16);
  m.def("dots_bf16(int head_dim) -> bool", dots_bf16);
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) {
  m.impl("prefill_attention", prefill_attention);
  m.impl("gather_kv", gather_kv);
}
