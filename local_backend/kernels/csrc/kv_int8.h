// The int8 KV cache's rows (local_backend/kernels/kv_quant.py): head_dim int8 codes, then the row's float32 scale's
// bytes. Symmetric absmax: scale = absmax / 127, code = round(x · (127 / absmax)) half to even, value = code ·
// scale. The codes are read a vector of lanes at a time, widened to float (one sign-extend and one convert on
// AVX2 / AVX-512; a plain loop on the portable path, which the compiler vectorizes).
#pragma once

#include <cstring>

#include "lanes.h"

namespace kvwise {

constexpr int64_t kScaleBytes = 4;  // one float32 scale after each row's codes
constexpr float kCodeMax = 127.f;

// `count` (<= Vec::size()) codes from `codes` as floats; lanes past count are 0.
inline Vec load_codes(const int8_t* codes, int64_t count) {
#if defined(CPU_CAPABILITY_AVX512)
  if (count == Vec::size()) return Vec(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)))));
#elif defined(CPU_CAPABILITY_AVX2)
  if (count == Vec::size()) return Vec(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)))));
#endif
  float lanes[Vec::size()] = {};
  for (int64_t i = 0; i < count; ++i) lanes[i] = codes[i];
  return Vec::loadu(lanes);
}

inline float row_scale(const int8_t* row, int64_t dim) {
  float scale;
  std::memcpy(&scale, row + dim, sizeof scale);
  return scale;
}

// One stored row back to `dim` floats: code · scale.
inline void dequantize_row(const int8_t* row, int64_t dim, float* out) {
  const Vec scale(row_scale(row, dim));
  for (int64_t d = 0; d < dim; d += Vec::size()) {
    const int64_t count = lanes_before(d, dim);
    (load_codes(row + d, count) * scale).store(out + d, count);
  }
}

// `dim` floats (float32 or bfloat16) as one stored row: their codes, then the scale's bytes.
template <typename T>
inline void quantize_row(const T* x, int64_t dim, int8_t* row) {
  Vec top(0.f);
  for (int64_t d = 0; d < dim; d += Vec::size()) top = at::vec::maximum(top, load(x + d, lanes_before(d, dim)).abs());
  const float absmax = max_lanes(top);
  const Vec inverse(absmax > 0.f ? kCodeMax / absmax : 0.f), low(-kCodeMax), high(kCodeMax);
  float lanes[Vec::size()];
  for (int64_t d = 0; d < dim; d += Vec::size()) {
    const int64_t count = lanes_before(d, dim);
    at::vec::clamp(load(x + d, count) * inverse, low, high).round().store(lanes, count);
    for (int64_t i = 0; i < count; ++i) row[d + i] = static_cast<int8_t>(lanes[i]);
  }
  const float scale = absmax / kCodeMax;
  std::memcpy(row + dim, &scale, sizeof scale);
}

}  // namespace kvwise
