// Decode attention read in place from the paged KV cache (CPU, float32 or bfloat16, summed in float32):
// `kvwise::paged_decode_attention`, and the step's keys and values written into their slots: `kvwise::write_kv_`.
//
// torch has no op that attends over scattered cache slots, so without this a decode step copies every
// sequence's context out of the cache per layer (`index_select`) and attends over the copy; this reads
// each key and value once, where it lies, as vLLM's CPU attention kernel does. Built and loaded by
// `local_backend/kernels/cpu_kernels.py`; `model/attention.py` keeps SDPA as the path when it is not available.
//
// Layout (attention.py): kv_cache `[slots, 2, kv_heads, dim]`, slot = block_id * block_size + offset;
// query head h reads kv head h / (heads / kv_heads). Per task (one sequence, a run of its kv heads):
// block by block, scores q·k · scale, a running softmax (flash-decoding's) and the weighted sum of values, so
// each block (block_size consecutive slots) is read once, front to back. Scores come one vector of keys at a
// time (as many dot products reduced together as the vector has lanes, not one horizontal sum per key) and
// their exponentials likewise: one scalar sum and one scalar exp per key were most of the kernel's time at
// short contexts. A head_dim that is a multiple of 8 but not of the vector (AVX-512's 16) ends each row
// with a masked half vector. A bfloat16 or int8 cache is read the same way: each block's rows of a kv head are
// widened (or dequantized) to floats in a scratch the size of one block, which stays in L1, then attended.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kv_int8.h"
#include "lanes.h"
#include "parallel.h"

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

namespace {

using kvwise::lanes_before;
using kvwise::max_lanes;
using kvwise::sum_lanes;
using kvwise::Vec;

constexpr int64_t kLanes = Vec::size();  // floats per ATen vector, and keys per vector of scores
constexpr int64_t kValueChunk = 64 / kLanes;  // vectors of the output held in registers over a block's values (head_dim 64: all)
constexpr int64_t kPrefetchStride = 64;  // bytes per cache line: the next block lies elsewhere, out of the prefetcher's sight

inline float dot(const float* a, const float* b, int64_t n) {
  Vec acc(0.f);
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) acc = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc);
  if (whole < n) acc = at::vec::fmadd(Vec::loadu(a + whole, n - whole), Vec::loadu(b + whole, n - whole), acc);
  return sum_lanes(acc);
}

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
// A transpose-reduce of eight 8-float sums: pairs, quads, then the two 128-bit halves, so lane t holds Σ a[t].
inline __m256 transpose_sum8(const __m256* a) {
  const __m256 a01 = _mm256_hadd_ps(a[0], a[1]), a23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 a45 = _mm256_hadd_ps(a[4], a[5]), a67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 low = _mm256_hadd_ps(a01, a23), high = _mm256_hadd_ps(a45, a67);
  return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20), _mm256_permute2f128_ps(low, high, 0x31));
}
#endif

// The dot products of q with kLanes keys (key t at keys + t · stride) as one vector, lane t for key t.
inline Vec dots(const float* q, const float* keys, int64_t stride, int64_t dim) {
  Vec acc[kLanes];
  for (int64_t t = 0; t < kLanes; ++t) acc[t] = Vec(0.f);
  const int64_t whole = dim - dim % kLanes;
  for (int64_t d = 0; d < whole; d += kLanes) {
    const Vec qd = Vec::loadu(q + d);
    for (int64_t t = 0; t < kLanes; ++t) acc[t] = at::vec::fmadd(qd, Vec::loadu(keys + t * stride + d), acc[t]);
  }
  if (whole < dim) {
    const int64_t count = dim - whole;
    const Vec qd = Vec::loadu(q + whole, count);
    for (int64_t t = 0; t < kLanes; ++t) acc[t] = at::vec::fmadd(qd, Vec::loadu(keys + t * stride + whole, count), acc[t]);
  }
#if defined(CPU_CAPABILITY_AVX512)
  // Each sum's two 256-bit halves added, then the eight-lane transpose-reduce on each half of the keys.
  __m256 halves[kLanes];
  for (int64_t t = 0; t < kLanes; ++t) {
    const __m512 a = acc[t];
    halves[t] = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  }
  return Vec(_mm512_insertf32x8(_mm512_castps256_ps512(transpose_sum8(halves)), transpose_sum8(halves + 8), 1));
#elif defined(CPU_CAPABILITY_AVX2)
  __m256 sums[kLanes];
  for (int64_t t = 0; t < kLanes; ++t) sums[t] = acc[t];
  return Vec(transpose_sum8(sums));
#else
  float sums[kLanes];
  for (int64_t t = 0; t < kLanes; ++t) sums[t] = sum_lanes(acc[t]);
  return Vec::loadu(sums);
#endif
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, int64_t block_size, double scale) {
  TORCH_CHECK(q.dim() == 3 && kv_cache.dim() == 4 && kv_cache.size(1) == 2,
              "paged_decode_attention: q must be [batch, heads, dim] and kv_cache [slots, 2, kv_heads, row]");
  const bool quantized = kv_cache.scalar_type() == at::kChar, widened = kv_cache.scalar_type() == at::kBFloat16;
  TORCH_CHECK((q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16) &&
                  (quantized || kv_cache.scalar_type() == q.scalar_type()),
              "paged_decode_attention: q must be float32 or bfloat16 and kv_cache of its dtype or int8 (codes and scales)");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && context_lens.scalar_type() == at::kLong,
              "paged_decode_attention: block_tables and context_lens must be int64");
  TORCH_CHECK(q.is_contiguous() && kv_cache.is_contiguous() && block_tables.is_contiguous() && context_lens.is_contiguous(),
              "paged_decode_attention: every input must be contiguous");
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = kv_cache.size(2);
  const int64_t row = kv_cache.size(3);  // elements of a stored row: dim values, or dim codes and the scale's bytes
  TORCH_CHECK(row == (quantized ? dim + kvwise::kScaleBytes : dim) && dim % 8 == 0 && heads % kv_heads == 0,
              "paged_decode_attention: head_dim must match and be a multiple of 8, heads a multiple of kv_heads");
  TORCH_CHECK(block_tables.size(0) == batch && context_lens.size(0) == batch,
              "paged_decode_attention: one block table and one context length per query row");
  const int64_t group = heads / kv_heads, max_blocks = block_tables.size(1);
  // Enough tasks for every thread: a lone sequence splits its kv heads over them.
  const int64_t splits = std::clamp<int64_t>((2 * at::get_num_threads() + batch - 1) / batch, 1, kv_heads);
  const int64_t heads_per_split = (kv_heads + splits - 1) / splits * group;
  // A bfloat16 q is widened once, and its output summed in floats, both in a scratch of a few hundred bytes a
  // row: no tensor of their own, no `to()` dispatch either way.
  const bool narrowed = q.scalar_type() == at::kBFloat16;
  const int64_t elements = q.numel();
  std::vector<float> scratch(narrowed ? 2 * elements : 0);
  auto out = at::empty_like(q);
  const float* queries = narrowed ? scratch.data() : q.data_ptr<float>();
  float* outputs = narrowed ? scratch.data() + elements : out.data_ptr<float>();
  if (narrowed) kvwise::widen(q.data_ptr<kvwise::BFloat16>(), elements, scratch.data());
  const char* cache = static_cast<const char*>(kv_cache.data_ptr());
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  const int64_t slot_stride = 2 * kv_heads * row, value_offset = kv_heads * row;  // in stored elements
  const int64_t block_bytes = block_size * slot_stride * kv_cache.element_size();

  kvwise::parallel_for(0, batch * splits, 1, [&](int64_t begin, int64_t end) {
    const int64_t padded = (block_size + kLanes - 1) / kLanes * kLanes;  // a head's scores, whole vectors
    const Vec scale_v(static_cast<float>(scale));
    std::vector<float> scores(padded * heads_per_split);
    std::vector<float> top(heads), total(heads);
    std::vector<float> dequantized(quantized || widened ? 2 * block_size * dim : 0);  // one kv head's keys, then its values
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / splits, first = task % splits * heads_per_split;
      const int64_t last = std::min(heads, first + heads_per_split), length = lens[b];
      const int64_t* table = tables + b * max_blocks;
      const float* qrow = queries + b * heads * dim;
      float* orow = outputs + b * heads * dim;
      std::fill(orow + first * dim, orow + last * dim, 0.f);
      std::fill(top.begin(), top.end(), -INFINITY);
      std::fill(total.begin(), total.end(), 0.f);
      for (int64_t start = 0; start < length; start += block_size) {
        // One block is block_size consecutive slots: read it front to back, keys then values.
        const char* block = cache + table[start / block_size] * block_bytes;
        const int64_t n = std::min(block_size, length - start);
        if (start + block_size < length) {
          const char* next = cache + table[start / block_size + 1] * block_bytes;
          for (int64_t line = 0; line < n * block_bytes / block_size; line += kPrefetchStride) __builtin_prefetch(next + line);
        }
        for (int64_t kv = first / group; kv < last / group; ++kv) {
          // The kv head's keys and values as floats, `stride` apart: in the block itself, or dequantized from it.
          const float* keys = reinterpret_cast<const float*>(block) + kv * row;
          const float* values = keys + value_offset;
          int64_t stride = slot_stride;
          if (quantized) {
            const int8_t* codes = reinterpret_cast<const int8_t*>(block) + kv * row;
            float* keys_out = dequantized.data();
            for (int64_t t = 0; t < n; ++t) {
              kvwise::dequantize_row(codes + t * slot_stride, dim, keys_out + t * dim);
              kvwise::dequantize_row(codes + value_offset + t * slot_stride, dim, keys_out + (block_size + t) * dim);
            }
            keys = keys_out, values = keys_out + block_size * dim, stride = dim;
          } else if (widened) {
            const kvwise::BFloat16* rows = reinterpret_cast<const kvwise::BFloat16*>(block) + kv * row;
            float* keys_out = dequantized.data();
            for (int64_t t = 0; t < n; ++t) {
              kvwise::widen(rows + t * slot_stride, dim, keys_out + t * dim);
              kvwise::widen(rows + value_offset + t * slot_stride, dim, keys_out + (block_size + t) * dim);
            }
            keys = keys_out, values = keys_out + block_size * dim, stride = dim;
          }
          for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
            float* s = scores.data() + (h - first) * padded;
            const float* q_h = qrow + h * dim;
            Vec tops(-std::numeric_limits<float>::infinity());
            for (int64_t t = 0; t < n; t += kLanes) {  // lanes past n stay -inf: their weight is exp(-inf) = 0
              if (t + kLanes <= n) {
                (dots(q_h, keys + t * stride, stride, dim) * scale_v).store(s + t);
              } else {
                std::fill(s + t, s + t + kLanes, -std::numeric_limits<float>::infinity());
                for (int64_t u = t; u < n; ++u) s[u] = dot(q_h, keys + u * stride, dim) * static_cast<float>(scale);
              }
              tops = at::vec::maximum(tops, Vec::loadu(s + t));
            }
            const float block_top = std::max(top[h], max_lanes(tops));
            const float rescale = std::exp(top[h] - block_top);  // running softmax: earlier sums were taken against top[h]
            const Vec block_top_v(block_top);
            Vec sums(0.f);
            for (int64_t t = 0; t < n; t += kLanes) {
              const Vec weights = (Vec::loadu(s + t) - block_top_v).exp();
              weights.store(s + t);
              sums = sums + weights;
            }
            const float sum = total[h] * rescale + sum_lanes(sums);
            float* o = orow + h * dim;
            int64_t d = 0;
            for (; d + kValueChunk * kLanes <= dim; d += kValueChunk * kLanes) {  // a chunk of o in registers, each weight broadcast once
              Vec acc[kValueChunk];
              for (int64_t j = 0; j < kValueChunk; ++j) acc[j] = Vec::loadu(o + d + j * kLanes) * Vec(rescale);
              for (int64_t t = 0; t < n; ++t) {
                const Vec weight(s[t]);
                const float* v = values + t * stride + d;
                for (int64_t j = 0; j < kValueChunk; ++j) acc[j] = at::vec::fmadd(weight, Vec::loadu(v + j * kLanes), acc[j]);
              }
              for (int64_t j = 0; j < kValueChunk; ++j) acc[j].store(o + d + j * kLanes);
            }
            for (; d < dim; d += kLanes) {
              const int64_t count = lanes_before(d, dim);
              Vec acc = Vec::loadu(o + d, count) * Vec(rescale);
              for (int64_t t = 0; t < n; ++t) acc = at::vec::fmadd(Vec(s[t]), Vec::loadu(values + t * stride + d, count), acc);
              acc.store(o + d, count);
            }
            top[h] = block_top;
            total[h] = sum;
          }
        }
      }
      for (int64_t h = first; h < last; ++h) {
        const float inverse = 1.f / total[h];
        for (int64_t d = 0; d < dim; ++d) orow[h * dim + d] *= inverse;
      }
    }
  });
  if (narrowed) kvwise::narrow(outputs, elements, out.data_ptr<kvwise::BFloat16>());
  return out;
}

// In place, vLLM's reshape_and_cache: kv_cache[slots[t], 0] = k[t] and kv_cache[slots[t], 1] = v[t], with k and v
// [tokens, kv_heads, dim] views into the step's qkv rows (heads contiguous). In torch ops this is a stack of k and
// v into a new tensor, then an index_copy_ of it: two copies where one will do. An int8 cache stores each head's
// row as its codes and scale (kv_int8.h), quantized here on the way in.
template <typename T>
void write_rows(at::Tensor& kv_cache, const at::Tensor& k, const at::Tensor& v, const int64_t* slot, int64_t dim) {
  const int64_t tokens = k.size(0), kv_heads = kv_cache.size(2), width = kv_heads * dim;
  const bool quantized = kv_cache.scalar_type() == at::kChar;
  const T* keys = k.data_ptr<T>();
  const T* values = v.data_ptr<T>();
  const int64_t k_stride = k.stride(0), v_stride = v.stride(0), slot_width = 2 * kv_heads * kv_cache.size(3);
  at::parallel_for(0, tokens, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (quantized) {
        int8_t* dst = kv_cache.data_ptr<int8_t>() + slot[t] * slot_width;
        const int64_t row = dim + kvwise::kScaleBytes;
        for (int64_t h = 0; h < kv_heads; ++h) {
          kvwise::quantize_row(keys + t * k_stride + h * dim, dim, dst + h * row);
          kvwise::quantize_row(values + t * v_stride + h * dim, dim, dst + (kv_heads + h) * row);
        }
      } else {
        T* dst = kv_cache.data_ptr<T>() + slot[t] * slot_width;
        std::copy_n(keys + t * k_stride, width, dst);
        std::copy_n(values + t * v_stride, width, dst + width);
      }
    }
  });
}

// In place, vLLM's reshape_and_cache: kv_cache[slots[t], 0] = k[t] and kv_cache[slots[t], 1] = v[t], with k and v
// [tokens, kv_heads, dim] views into the step's qkv rows (heads contiguous). In torch ops this is a stack of k and
// v into a new tensor, then an index_copy_ of it: two copies where one will do. An int8 cache stores each head's
// row as its codes and scale (kv_int8.h), quantized here on the way in.
void write_kv_(at::Tensor kv_cache, const at::Tensor& k, const at::Tensor& v, const at::Tensor& slots) {
  const bool quantized = kv_cache.scalar_type() == at::kChar;
  TORCH_CHECK(kv_cache.dim() == 4 && kv_cache.size(1) == 2 && kv_cache.is_contiguous() &&
                  (quantized || kv_cache.scalar_type() == k.scalar_type()),
              "write_kv_: kv_cache must be contiguous [slots, 2, kv_heads, row], of k's dtype or int8");
  const int64_t tokens = k.size(0), kv_heads = kv_cache.size(2);
  const int64_t dim = quantized ? kv_cache.size(3) - kvwise::kScaleBytes : kv_cache.size(3), width = kv_heads * dim;
  for (const at::Tensor* part : {&k, &v}) {
    TORCH_CHECK(part->dim() == 3 && part->scalar_type() == k.scalar_type() && part->size(0) == tokens &&
                    part->size(1) * part->size(2) == width && part->stride(2) == 1 && part->stride(1) == part->size(2),
                "write_kv_: k and v must be [tokens, kv_heads, dim] of one dtype matching the cache, heads contiguous");
  }
  TORCH_CHECK(slots.dim() == 1 && slots.scalar_type() == at::kLong && slots.is_contiguous() && slots.size(0) == tokens,
              "write_kv_: one int64 slot per token");
  const int64_t count = kv_cache.size(0);
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) TORCH_CHECK(slot[t] >= 0 && slot[t] < count, "write_kv_: slot ", slot[t], " out of range");
  KVWISE_DISPATCH(k.scalar_type(), "write_kv_", [&] { write_rows<scalar_t>(kv_cache, k, v, slot, dim); });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) {
  m.def("paged_decode_attention(Tensor q, Tensor kv_cache, Tensor block_tables, Tensor context_lens, int block_size, float scale) -> Tensor");
  m.def("write_kv_(Tensor(a!) kv_cache, Tensor k, Tensor v, Tensor slots) -> ()");
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) {
  m.impl("paged_decode_attention", paged_decode_attention);
  m.impl("write_kv_", write_kv_);
}
