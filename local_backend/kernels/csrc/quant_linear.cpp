// A projection whose weight is kept as a GGUF file's blocks (`quantized.QuantizedWeight`), as llama.cpp's
// `ggml-common.h` lays them out. W is [out, in] as the file stores it, each row whole blocks:
// - the legacy types (`block_q8_0`, `block_q4_0`, `block_q4_1`), 32 weights a block: an fp16 scale d (and, in
//   Q4_1, an fp16 offset m) before the 32 codes q. A weight is d·q + m: Q8_0 signed bytes, m = 0; Q4_0 nibbles
//   (low nibbles the block's first 16 weights, high nibbles the last 16), m = −8d; Q4_1 nibbles, m its own;
// - the K-quants (`block_q4_K`, `block_q5_K`, `block_q6_K`), super-blocks of 256 weights in eight sub-blocks of
//   32, each sub-block taken as a legacy block is: its (d, m) unpacked once per super-block (`sub_scales`), its
//   codes as a legacy block's (`code_words`, `widen_codes`). Q4_K and Q5_K: fp16 d and dmin, 6-bit scales sc_j
//   and mins mn_j packed in 12 bytes, then the codes (Q4_K nibbles, 32 bytes of them a pair of sub-blocks, low
//   nibbles the even one; Q5_K the same with a fifth bit, bit j of 32 bytes of their own for sub-block j); a
//   weight is (d·sc_j)·q − dmin·mn_j. Q6_K: 4-bit low codes, 2-bit high codes, sixteen int8 scales (one per 16
//   weights) and a closing fp16 d; a weight is d·sc·(q − 32), so its codes are taken as (q − 32)·sc (at most
//   4096 in magnitude, exact in int16 and in float) and its sub-blocks' d is the super-block's, m = 0.
// Every product of a scale and a code is exact in float32 (an fp16 d times at most 13 bits), so a dequantized
// weight, d·q + m in one rounding, is bit for bit what the `gguf` package's `dequantize` gives.
//
// `kvwise::quant_matvec` (decode: a few rows of x) streams the blocks once, and d and m are applied once per block
// and row: Σ x·(d·q + m) = d·Σ x·q + m·Σ x, with Σ x per block computed once per call (exact, in float). Threads
// split W's rows (outputs), so no partial sums meet. Σ x·q is taken one of two ways:
// - in integers (the AVX2 and AVX-512 builds), after llama.cpp's `ggml_vec_dot_q4_1_q8_1` / `_q8_0_q8_0`: each
//   block of x is rounded once per call to integers, x ≈ dx·qx (dx = max|x| / X_CODE_MAX, qx = round(x / dx) half
//   away from zero), and a block's 32 code pairs are multiplied and summed by `_mm256_madd_epi16`, exact in 32-bit
//   integers, so the codes are never widened to floats and one float multiply-add per block and row remains.
//   llama.cpp rounds x to 8 bits (`_mm256_maddubs_epi16` on the bytes); x is rounded to 16 bits here, as
//   SmolLM2's activations have outlier channels (a block's max|x| up to 200 times its median): at 8 bits each
//   projection moved by about 1% of its largest output and the logits by 5-11% (greedy answers parted from the
//   dequantized model's within a few tokens), at 16 bits by about 1e-4, for one more instruction per block
//   (the codes widened to int16) that cost Q4_1 10-20% of the 8-bit kernel's speed on SmolLM2's shapes, Q8_0
//   nothing. The result is the float product with the dequantized weights times x so rounded, to within float
//   rounding; against the exact product it moves by at most Σ|d·q|·dx / 2;
// - in floats (the portable build, and the reference): the block's codes widened to float lanes and multiplied
//   into x as it is, so the result is the float product with the dequantized weights, up to the order of the sums.
//
// `kvwise::quant_mm` (prefill: many rows) dequantizes a tile of W's rows into a scratch of x's dtype
// (`TILE_BYTES`: a small model's whole weight, a large model's in slices), and multiplies x by it with ATen's
// GEMM (oneDNN, on AMX tiles for bfloat16 where the CPU has them), so W is never whole in float past that size.
// Tiles that stayed in L2 (256 KB) cut SmolLM2's GEMMs into slices of ~110 outputs and took 1.3-1.6x the time
// of one GEMM over the whole weight (bfloat16, 128 and 512 rows, 2-core AMD EPYC with AVX512-BF16).
// `kvwise::quant_rows` dequantizes the rows that ids pick (an embedding's lookups).
//
// Widening is per capability: AVX-512 turns a block's 16 code bytes into two vectors of 16 floats, AVX2 into
// four of 8 (the K-quants' through their int16 codes), the portable build goes through a small array.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "lanes.h"
#include "parallel.h"

namespace {

using kvwise::Vec;

constexpr int64_t QK = 32;     // weights per block of a legacy type, per sub-block of a K-quant
constexpr int64_t QK_K = 256;  // weights per super-block of a K-quant
constexpr int64_t LANES_PER_BLOCK = QK / Vec::size();
constexpr int64_t ROWS_PER_GROUP = 4;  // rows of x that share each widened block
constexpr int64_t MIN_OUTPUTS_PER_THREAD = 16;
constexpr int64_t TILE_BYTES = 8 << 20;  // a dequantized tile: a small model's whole weight, so x meets one GEMM
constexpr int64_t MIN_TILE_ROWS = 32;
constexpr int64_t X_CODE_MAX = 32767;  // x's codes in the integer decode: int16

// ggml's type ids (`GGMLQuantizationType`), as Python passes them.
enum Kind : int64_t { Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

// A block's bytes and weights, where its codes start, and whether its weights have an offset m.
template <Kind K>
struct Layout;
template <>
struct Layout<Q8_0> {
  static constexpr int64_t bytes = 2 + QK, weights = QK, codes = 2;
  static constexpr bool offset = false;
};
template <>
struct Layout<Q4_0> {
  static constexpr int64_t bytes = 2 + QK / 2, weights = QK, codes = 2;
  static constexpr bool offset = true;
};
template <>
struct Layout<Q4_1> {
  static constexpr int64_t bytes = 4 + QK / 2, weights = QK, codes = 4;
  static constexpr bool offset = true;
};
template <>
struct Layout<Q4_K> {
  static constexpr int64_t bytes = 4 + 12 + QK_K / 2, weights = QK_K, codes = 16;
  static constexpr bool offset = true;
};
template <>
struct Layout<Q5_K> {
  static constexpr int64_t bytes = 4 + 12 + QK_K / 8 + QK_K / 2, weights = QK_K, high = 16, codes = 48;
  static constexpr bool offset = true;
};
template <>
struct Layout<Q6_K> {
  static constexpr int64_t bytes = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, weights = QK_K, codes = 0,
                           high = QK_K / 2, scales = high + QK_K / 4, d = scales + QK_K / 16;
  static constexpr bool offset = false;
};

template <Kind K>
constexpr int64_t SUBS = Layout<K>::weights / QK;  // 32-weight (sub-)blocks a block holds

// An IEEE half at `p` as a float: one instruction where the build has F16C (every AVX2 and AVX-512 CPU).
inline float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  return _cvtsh_ss(bits);
#else
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
#endif
}

// Each 32-weight sub-block's (d, m) into `dm` as pairs: a weight of sub-block j is d·q + m, q its code as
// `code_words` and `widen_codes` give it (Q6_K's already times its 16-weight scales). The legacy types: one pair.
template <Kind K>
inline void sub_scales(const uint8_t* block, float* dm) {
  if constexpr (K == Q8_0 || K == Q4_0 || K == Q4_1) {
    dm[0] = half_at(block);
    dm[1] = K == Q8_0 ? 0.f : K == Q4_0 ? -8.f * dm[0] : half_at(block + 2);
  } else if constexpr (K == Q6_K) {
    const float d = half_at(block + Layout<K>::d);
    for (int64_t j = 0; j < SUBS<K>; ++j) dm[2 * j] = d, dm[2 * j + 1] = 0.f;
  } else {
    // ggml's `get_scale_min_k4`: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in
    // the nibbles of bytes 8-11 with the top 2 bits of bytes 0-3 and 4-7 above them
    const float d = half_at(block), dmin = half_at(block + 2);
    const uint8_t* packed = block + 4;
    for (int j = 0; j < 4; ++j) {
      dm[2 * j] = d * static_cast<float>(packed[j] & 63);
      dm[2 * j + 1] = -(dmin * static_cast<float>(packed[j + 4] & 63));
      dm[2 * j + 8] = d * static_cast<float>((packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4));
      dm[2 * j + 9] = -(dmin * static_cast<float>((packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4)));
    }
  }
}

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
#define KVWISE_INTEGER_DOT 1

// 32 bytes as two vectors of 16 int16: the first 16, the last 16; signed or not.
template <bool is_signed>
inline std::pair<__m256i, __m256i> widen_bytes(__m256i bytes) {
  const __m128i first = _mm256_castsi256_si128(bytes), last = _mm256_extracti128_si256(bytes, 1);
  if constexpr (is_signed) return {_mm256_cvtepi8_epi16(first), _mm256_cvtepi8_epi16(last)};
  return {_mm256_cvtepu8_epi16(first), _mm256_cvtepu8_epi16(last)};
}

// The 32 bytes at `p`, each shifted right by `shift` bits and masked by `mask`.
inline __m256i bits_of(const uint8_t* p, int shift, int8_t mask) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(mask));
}

// Sub-block j's 32 codes (j = 0 in the legacy types) as two vectors of 16 int16 in the weights' order: Q8_0's
// signed, the 4- and 5-bit types' unsigned, Q6_K's (q − 32)·sc.
template <Kind K>
inline std::pair<__m256i, __m256i> code_words(const uint8_t* block, int j) {
  if constexpr (K == Q8_0) {
    return widen_bytes<true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + Layout<K>::codes)));
  } else if constexpr (K == Q4_0 || K == Q4_1) {
    // byte i holds weight i in its low nibble and weight i + 16 in its high one: widen once, then split
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + Layout<K>::codes)));
    return {_mm256_and_si256(words, _mm256_set1_epi16(0x0F)), _mm256_srli_epi16(words, 4)};
  } else if constexpr (K == Q4_K) {
    return widen_bytes<false>(bits_of(block + Layout<K>::codes + 32 * (j / 2), 4 * (j & 1), 0x0F));
  } else if constexpr (K == Q5_K) {
    const __m256i low = bits_of(block + Layout<K>::codes + 32 * (j / 2), 4 * (j & 1), 0x0F);
    return widen_bytes<false>(_mm256_or_si256(low, _mm256_slli_epi16(bits_of(block + Layout<K>::high, j, 1), 4)));
  } else {
    // sub-block j = 4h + s: low nibbles of bytes 64h + 32(s & 1) (the high nibbles for s >= 2), high bits 2s of
    // bytes 128 + 32h; its scales those of weights 32j and 32j + 16
    const int h = j / 4, s = j % 4;
    const __m256i low = bits_of(block + Layout<K>::codes + 64 * h + 32 * (s & 1), 4 * (s >> 1), 0x0F);
    const __m256i high = bits_of(block + Layout<K>::high + 32 * h, 2 * s, 3);
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
    const auto [first, last] = widen_bytes<true>(q);
    const auto* scales = reinterpret_cast<const int8_t*>(block + Layout<K>::scales + 2 * j);
    return {_mm256_mullo_epi16(first, _mm256_set1_epi16(scales[0])), _mm256_mullo_epi16(last, _mm256_set1_epi16(scales[1]))};
  }
}
#else
// Sub-block j's 32 codes of a K-quant, as `code_words` gives them.
template <Kind K>
inline void sub_codes(const uint8_t* block, int j, int16_t* q) {
  for (int l = 0; l < QK; ++l) {
    if constexpr (K == Q4_K) {
      q[l] = (block[Layout<K>::codes + 32 * (j / 2) + l] >> (4 * (j & 1))) & 0x0F;
    } else if constexpr (K == Q5_K) {
      q[l] = ((block[Layout<K>::codes + 32 * (j / 2) + l] >> (4 * (j & 1))) & 0x0F) |
             (((block[Layout<K>::high + l] >> j) & 1) << 4);
    } else {
      const int h = j / 4, s = j % 4;
      const int code = ((block[Layout<K>::codes + 64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 0x0F) |
                       (((block[Layout<K>::high + 32 * h + l] >> (2 * s)) & 3) << 4);
      q[l] = static_cast<int16_t>((code - 32) * static_cast<int8_t>(block[Layout<K>::scales + 2 * j + l / 16]));
    }
  }
}
#endif

// Sub-block j's 32 codes q (j = 0 in the legacy types) as floats, `Vec::size()` per vector, in the weights' order.
template <Kind K>
inline void widen_codes(const uint8_t* block, int j, Vec* q) {
  const uint8_t* codes = block + Layout<K>::codes;
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (K == Q8_0) {
    q[0] = Vec(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)))));
    q[1] = Vec(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16)))));
  } else if constexpr (K == Q4_0 || K == Q4_1) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i low = _mm_set1_epi8(0x0F);
    q[0] = Vec(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, low))));
    q[1] = Vec(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), low))));
  } else {
    const auto [first, last] = code_words<K>(block, j);
    q[0] = Vec(_mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(first)));
    q[1] = Vec(_mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(last)));
  }
#elif defined(CPU_CAPABILITY_AVX2)
  if constexpr (K == Q8_0) {
    for (int i = 0; i < 4; ++i) {
      const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * i));
      q[i] = Vec(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)));
    }
  } else if constexpr (K == Q4_0 || K == Q4_1) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, low), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
    q[0] = Vec(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)));
    q[1] = Vec(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))));
    q[2] = Vec(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)));
    q[3] = Vec(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))));
  } else {
    const auto [first, last] = code_words<K>(block, j);
    const __m256i words[2] = {first, last};
    for (int i = 0; i < 4; ++i) {
      const __m128i eight = i & 1 ? _mm256_extracti128_si256(words[i / 2], 1) : _mm256_castsi256_si128(words[i / 2]);
      q[i] = Vec(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(eight)));
    }
  }
#else
  float lanes[QK];
  if constexpr (K == Q8_0) {
    for (int64_t i = 0; i < QK; ++i) lanes[i] = static_cast<float>(static_cast<int8_t>(codes[i]));
  } else if constexpr (K == Q4_0 || K == Q4_1) {
    for (int64_t i = 0; i < QK / 2; ++i) {
      lanes[i] = static_cast<float>(codes[i] & 0x0F);
      lanes[i + QK / 2] = static_cast<float>(codes[i] >> 4);
    }
  } else {
    int16_t words[QK];
    sub_codes<K>(block, j, words);
    for (int64_t i = 0; i < QK; ++i) lanes[i] = static_cast<float>(words[i]);
  }
  for (int64_t i = 0; i < LANES_PER_BLOCK; ++i) q[i] = Vec::loadu(lanes + i * Vec::size());
#endif
}

// y[r · out] (+ bias) for `count` (<= ROWS_PER_GROUP) rows of x (float, row stride `in`) times one row of W;
// `sums[r · blocks + b]` is Σ x over the 32 weights of (sub-)block b of row r.
template <Kind K, int count, typename T>
inline void row_times(const uint8_t* row, int64_t blocks, const float* x, int64_t in, const float* sums, float bias,
                      T* y, int64_t out) {
  Vec acc[count][2];  // even and odd blocks apart, so one block's sum need not wait for the last one's
  float offsets[count] = {};
  float dm[2 * SUBS<K>];
  for (int r = 0; r < count; ++r) acc[r][0] = acc[r][1] = Vec(0.f);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b / SUBS<K> * Layout<K>::bytes;
    const int j = b % SUBS<K>;
    if (j == 0) sub_scales<K>(block, dm);
    Vec q[LANES_PER_BLOCK];
    widen_codes<K>(block, j, q);
    const float d = dm[2 * j], m = dm[2 * j + 1];
    const Vec dv(d);
    for (int r = 0; r < count; ++r) {
      const float* xb = x + r * in + b * QK;
      Vec dot = q[0] * Vec::loadu(xb);
      Vec dot2 = q[1] * Vec::loadu(xb + Vec::size());
      for (int64_t i = 2; i < LANES_PER_BLOCK; i += 2) {
        dot = at::vec::fmadd(q[i], Vec::loadu(xb + i * Vec::size()), dot);
        dot2 = at::vec::fmadd(q[i + 1], Vec::loadu(xb + (i + 1) * Vec::size()), dot2);
      }
      acc[r][b & 1] = at::vec::fmadd(dv, dot + dot2, acc[r][b & 1]);
      if constexpr (Layout<K>::offset) offsets[r] += m * sums[r * blocks + b];
    }
  }
  for (int r = 0; r < count; ++r) {
    y[r * out] = static_cast<T>(kvwise::sum_lanes(acc[r][0] + acc[r][1]) + offsets[r] + bias);
  }
}

#if defined(KVWISE_INTEGER_DOT)

// `n` blocks of x rounded to 16 bits: codes to `q`, and each block's dx = max|x| / 32767 and exact Σ x to `scales`
// as a pair (read in one load with the block's d and m). Round half away from zero.
void quantize_blocks(const float* x, int64_t n, int16_t* q, float* scales) {
  const __m256 sign_bit = _mm256_set1_ps(-0.f), half = _mm256_set1_ps(0.5f);
  for (int64_t i = 0; i < n; ++i) {
    const float* xb = x + i * QK;
    __m256 v[4], amax = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[j]));
      sum = _mm256_add_ps(sum, v[j]);
    }
    float lanes[8], total[8];
    _mm256_storeu_ps(lanes, amax);
    _mm256_storeu_ps(total, sum);
    const float d = *std::max_element(lanes, lanes + 8) / static_cast<float>(X_CODE_MAX);
    scales[2 * i] = d;
    scales[2 * i + 1] = ((total[0] + total[4]) + (total[1] + total[5])) + ((total[2] + total[6]) + (total[3] + total[7]));
    const __m256 inverse = _mm256_set1_ps(d == 0.f ? 0.f : 1.f / d);
    __m256i codes[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 scaled = _mm256_mul_ps(v[j], inverse);
      const __m256 magnitude = _mm256_floor_ps(_mm256_add_ps(_mm256_andnot_ps(sign_bit, scaled), half));
      codes[j] = _mm256_cvtps_epi32(_mm256_or_ps(magnitude, _mm256_and_ps(sign_bit, scaled)));
    }
    // the pack interleaves 128-bit lanes; the permute puts the 16 codes of each half back in order
    for (int h = 0; h < 2; ++h) {
      const __m256i packed = _mm256_packs_epi32(codes[2 * h], codes[2 * h + 1]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i * QK + 16 * h), _mm256_permute4x64_epi64(packed, 0xD8));
    }
  }
}

// Σ q·qx over a block as 8 int32 lanes: `_mm256_madd_epi16` multiplies int16 pairs and sums each two into int32
// (|q·qx| <= 4096·32767, Q6_K's largest code, so the sums of four products fit).
inline __m256i block_dot(const std::pair<__m256i, __m256i>& q, const int16_t* qx) {
  const __m256i first = _mm256_madd_epi16(q.first, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx)));
  return _mm256_add_epi32(first, _mm256_madd_epi16(q.second, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 16))));
}

// The two floats at `p` in the two low lanes, in one load (through __m128i, which may alias floats: a load through
// a double would let the compiler read before the floats' stores).
inline __m128 two_lanes(const float* p) {
  return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// A legacy block's (d, m) in the two low lanes: Q4_1's two halves converted in one instruction.
template <Kind K>
inline __m128 scale_offset_lanes(const uint8_t* block) {
  uint32_t bits;
  std::memcpy(&bits, block, sizeof bits);  // d's half, then Q4_1's m (the other types: their first codes)
  const __m128 halves = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
  if constexpr (K == Q4_1) return halves;
  if constexpr (K == Q4_0) return _mm_mul_ps(_mm_shuffle_ps(halves, halves, 0), _mm_setr_ps(1.f, -8.f, 0.f, 0.f));
  if constexpr (K == Q8_0) return halves;  // lane 1 is never read: Q8_0 has no offset
}

// As `row_times`, x given as its 16-bit blocks: codes `qx` (row stride `in`) and each block's (dx, Σ x) pair in
// `scales` (row stride 2·`blocks`).
template <Kind K, int count, typename T>
inline void row_times_int(const uint8_t* row, int64_t blocks, const int16_t* qx, const float* scales, int64_t in,
                          float bias, T* y, int64_t out) {
  // even and odd blocks into accumulators of their own, so one block's sum need not wait for the last one's (the
  // loop is unrolled by two so that they stay in registers)
  // (d·dx, m·Σ x) of a block in one multiply: lane 0 scales the block's dot product, lane 1 sums into `offsets`
  __m256 even[count], odd[count];
  __m128 offsets[count];
  for (int r = 0; r < count; ++r) {
    even[r] = odd[r] = _mm256_setzero_ps();
    offsets[r] = _mm_setzero_ps();
  }
  // (sub-)block b of x times codes q whose (d, m) are `dm`'s two low lanes
  const auto step = [&](const std::pair<__m256i, __m256i>& q, __m128 dm, int64_t b, __m256* acc) {
    for (int r = 0; r < count; ++r) {
      const __m256 dot = _mm256_cvtepi32_ps(block_dot(q, qx + r * in + b * QK));
      const __m128 product = _mm_mul_ps(dm, two_lanes(scales + 2 * (r * blocks + b)));
      acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(product), dot, acc[r]);
      if constexpr (Layout<K>::offset) offsets[r] = _mm_add_ps(offsets[r], product);
    }
  };
  if constexpr (SUBS<K> == 1) {
    const auto legacy = [&](int64_t b, __m256* acc) {
      const uint8_t* block = row + b * Layout<K>::bytes;
      step(code_words<K>(block, 0), scale_offset_lanes<K>(block), b, acc);
    };
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
      legacy(b, even);
      legacy(b + 1, odd);
    }
    if (b < blocks) legacy(b, even);
  } else {
    // a super-block's sub-block scales unpacked once, then its sub-blocks as legacy blocks (an even count of them)
    float dm[2 * SUBS<K>];
    for (int64_t b = 0; b < blocks; b += SUBS<K>) {
      const uint8_t* block = row + b / SUBS<K> * Layout<K>::bytes;
      sub_scales<K>(block, dm);
      for (int j = 0; j < SUBS<K>; j += 2) {
        step(code_words<K>(block, j), two_lanes(dm + 2 * j), b + j, even);
        step(code_words<K>(block, j + 1), two_lanes(dm + 2 * j + 2), b + j + 1, odd);
      }
    }
  }
  for (int r = 0; r < count; ++r) {
    const __m256 both = _mm256_add_ps(even[r], odd[r]);
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1));
    const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    const float total = _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
    y[r * out] = static_cast<T>(total + _mm_cvtss_f32(_mm_movehdup_ps(offsets[r])) + bias);
  }
}
#endif

// Each output o (W's row) times every row of x, a group of up to ROWS_PER_GROUP rows at a time: `times<count>(row,
// first x row, y)` multiplies one row of W into `count` rows of x.
template <typename Times, typename T>
void each_output(int64_t rows, int64_t out, int64_t row_bytes, const uint8_t* w, const T* bias, T* y, Times&& times) {
  kvwise::parallel_for(0, out, MIN_OUTPUTS_PER_THREAD, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const uint8_t* row = w + o * row_bytes;
      const float b = bias ? static_cast<float>(bias[o]) : 0.f;
      int64_t r = 0;
      for (; r + ROWS_PER_GROUP <= rows; r += ROWS_PER_GROUP) times.template operator()<ROWS_PER_GROUP>(row, r, b, y + r * out + o);
      switch (rows - r) {
        case 3: times.template operator()<3>(row, r, b, y + r * out + o); break;
        case 2: times.template operator()<2>(row, r, b, y + r * out + o); break;
        case 1: times.template operator()<1>(row, r, b, y + r * out + o); break;
        default: break;
      }
    }
  });
}

template <Kind K, typename T>
void matvec_into(const float* x, int64_t rows, int64_t in, const uint8_t* w, int64_t out, const T* bias, T* y) {
  const int64_t blocks = in / QK, row_bytes = in / Layout<K>::weights * Layout<K>::bytes;
#if defined(KVWISE_INTEGER_DOT)
  auto qx = std::make_unique_for_overwrite<int16_t[]>(rows * in);
  auto scales = std::make_unique_for_overwrite<float[]>(2 * rows * blocks);
  quantize_blocks(x, rows * blocks, qx.get(), scales.get());
  each_output(rows, out, row_bytes, w, bias, y, [&]<int count>(const uint8_t* row, int64_t r, float b, T* to) {
    row_times_int<K, count>(row, blocks, qx.get() + r * in, scales.get() + 2 * r * blocks, in, b, to, out);
  });
#else
  auto sums = std::make_unique_for_overwrite<float[]>(rows * blocks);
  for (int64_t i = 0; i < rows * blocks; ++i) {
    Vec s = Vec::loadu(x + i * QK);
    for (int64_t j = 1; j < LANES_PER_BLOCK; ++j) s = s + Vec::loadu(x + i * QK + j * Vec::size());
    sums[i] = kvwise::sum_lanes(s);
  }
  each_output(rows, out, row_bytes, w, bias, y, [&]<int count>(const uint8_t* row, int64_t r, float b, T* to) {
    row_times<K, count>(row, blocks, x + r * in, in, sums.get() + r * blocks, b, to, out);
  });
#endif
}

// Rows [begin, end) of W dequantized into `dst` (row stride `in`), rounded to T where T is bfloat16.
template <Kind K, typename T>
void dequantize_rows(const uint8_t* w, int64_t in, const int64_t* ids, int64_t begin, int64_t end, T* dst) {
  const int64_t blocks = in / Layout<K>::weights, row_bytes = blocks * Layout<K>::bytes;
  float dm[2 * SUBS<K>];
  for (int64_t i = begin; i < end; ++i) {
    const uint8_t* row = w + (ids ? ids[i] : i) * row_bytes;
    T* to = dst + (i - begin) * in;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * Layout<K>::bytes;
      sub_scales<K>(block, dm);
      for (int j = 0; j < SUBS<K>; ++j) {
        Vec q[LANES_PER_BLOCK];
        widen_codes<K>(block, j, q);
        const Vec d(dm[2 * j]), m(dm[2 * j + 1]);
        T* sub = to + b * Layout<K>::weights + j * QK;
        for (int64_t l = 0; l < LANES_PER_BLOCK; ++l) kvwise::store(at::vec::fmadd(q[l], d, m), sub + l * Vec::size());
      }
    }
  }
}

// Runs `body` with the compile-time kind `K`.
template <typename F>
void dispatch_kind(int64_t kind, F&& body) {
  switch (kind) {
    case Q8_0: body.template operator()<Q8_0>(); break;
    case Q4_0: body.template operator()<Q4_0>(); break;
    case Q4_1: body.template operator()<Q4_1>(); break;
    case Q4_K: body.template operator()<Q4_K>(); break;
    case Q5_K: body.template operator()<Q5_K>(); break;
    case Q6_K: body.template operator()<Q6_K>(); break;
    default:
      TORCH_CHECK(false, "quantized weight: ggml type ", kind,
                  " is not one of Q4_0 (2), Q4_1 (3), Q8_0 (8), Q4_K (12), Q5_K (13), Q6_K (14)");
  }
}

// W's input width, checking `blocks` is a contiguous uint8 [out, row bytes] of whole blocks.
int64_t input_width(const at::Tensor& blocks, int64_t kind) {
  TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == at::kByte && blocks.is_contiguous(),
              "quantized weight: contiguous uint8 blocks [out, row bytes]");
  int64_t bytes = 0, weights = 0;
  dispatch_kind(kind, [&]<Kind K>() { bytes = Layout<K>::bytes, weights = Layout<K>::weights; });
  TORCH_CHECK(blocks.size(1) % bytes == 0, "quantized weight: a row of ", blocks.size(1), " bytes is not whole ",
              bytes, "-byte blocks");
  return blocks.size(1) / bytes * weights;
}

void check_x(const at::Tensor& x, int64_t in, const std::optional<at::Tensor>& bias, int64_t out) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.size(1) == in, "quantized linear: contiguous x [rows, ", in, "]");
  TORCH_CHECK(!bias || (bias->scalar_type() == x.scalar_type() && bias->is_contiguous() && bias->numel() == out),
              "quantized linear: a bias of one element per output, of x's dtype");
}

at::Tensor quant_matvec(const at::Tensor& x, const at::Tensor& blocks, int64_t kind, const std::optional<at::Tensor>& bias) {
  const int64_t in = input_width(blocks, kind), out = blocks.size(0), rows = x.size(0);
  check_x(x, in, bias, out);
  auto y = at::empty({rows, out}, x.options());
  KVWISE_DISPATCH(x.scalar_type(), "quant_matvec", [&] {
    const float* xp;
    std::unique_ptr<float[]> widened;
    if constexpr (std::is_same_v<scalar_t, float>) {
      xp = x.data_ptr<float>();
    } else {
      widened = std::make_unique_for_overwrite<float[]>(rows * in);
      kvwise::widen(x.data_ptr<scalar_t>(), rows * in, widened.get());
      xp = widened.get();
    }
    const scalar_t* bp = bias ? bias->data_ptr<scalar_t>() : nullptr;
    dispatch_kind(kind, [&]<Kind K>() { matvec_into<K>(xp, rows, in, blocks.data_ptr<uint8_t>(), out, bp, y.data_ptr<scalar_t>()); });
  });
  return y;
}

at::Tensor quant_mm(const at::Tensor& x, const at::Tensor& blocks, int64_t kind, const std::optional<at::Tensor>& bias) {
  const int64_t in = input_width(blocks, kind), out = blocks.size(0);
  check_x(x, in, bias, out);
  auto y = at::empty({x.size(0), out}, x.options());
  const int64_t tile = std::min(out, std::max(MIN_TILE_ROWS, TILE_BYTES / (in * x.element_size())));
  auto scratch = at::empty({tile, in}, x.options());
  KVWISE_DISPATCH(x.scalar_type(), "quant_mm", [&] {
    dispatch_kind(kind, [&]<Kind K>() {
      for (int64_t o0 = 0; o0 < out; o0 += tile) {
        const int64_t n = std::min(tile, out - o0);
        scalar_t* dst = scratch.data_ptr<scalar_t>();
        const uint8_t* w = blocks.data_ptr<uint8_t>() + o0 * blocks.size(1);
        at::parallel_for(0, n, MIN_OUTPUTS_PER_THREAD, [&](int64_t begin, int64_t end) {
          dequantize_rows<K>(w, in, nullptr, begin, end, dst + begin * in);
        });
        if (n == out) {
          at::mm_out(y, x, scratch.t());
        } else {
          y.narrow(1, o0, n).copy_(at::mm(x, scratch.narrow(0, 0, n).t()));
        }
      }
    });
  });
  if (bias) y.add_(*bias);
  return y;
}

at::Tensor quant_rows(const at::Tensor& blocks, int64_t kind, const at::Tensor& ids, at::ScalarType dtype) {
  const int64_t in = input_width(blocks, kind);
  TORCH_CHECK(ids.scalar_type() == at::kLong, "quant_rows: int64 ids");
  const auto flat = ids.contiguous().view(-1);
  const int64_t* idp = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    TORCH_CHECK(idp[i] >= 0 && idp[i] < blocks.size(0), "quant_rows: id ", idp[i], " is not a row of ", blocks.size(0));
  }
  auto shape = ids.sizes().vec();
  shape.push_back(in);
  auto y = at::empty(shape, blocks.options().dtype(dtype));
  KVWISE_DISPATCH(dtype, "quant_rows", [&] {
    dispatch_kind(kind, [&]<Kind K>() {
      at::parallel_for(0, flat.numel(), MIN_OUTPUTS_PER_THREAD, [&](int64_t begin, int64_t end) {
        dequantize_rows<K>(blocks.data_ptr<uint8_t>(), in, idp, begin, end, y.data_ptr<scalar_t>() + begin * in);
      });
    });
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) {
  m.def("quant_matvec(Tensor x, Tensor blocks, int kind, Tensor? bias) -> Tensor");
  m.def("quant_mm(Tensor x, Tensor blocks, int kind, Tensor? bias) -> Tensor");
  m.def("quant_rows(Tensor blocks, int kind, Tensor ids, ScalarType dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) {
  m.impl("quant_matvec", quant_matvec);
  m.impl("quant_mm", quant_mm);
  m.impl("quant_rows", quant_rows);
}
