// ATen's vector of floats for the capability this library is built for (8 lanes for AVX2 and the portable
// path, 16 for AVX-512), the horizontal reductions the kernels share, and the loads and stores that let one
// kernel read and write float32 or bfloat16 tensors while it computes in float32 (`load`, `store`): a
// bfloat16 is a float32's upper half, so widening is a zero-extend and a shift (vLLM's CPU kernels do the
// same); narrowing rounds to nearest even, in one instruction where the CPU has AVX512-BF16 (the
// `AVX512_BF16` build, `KVWISE_AVX512_BF16`).
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

namespace kvwise {

using Vec = at::vec::Vectorized<float>;
using BFloat16 = c10::BFloat16;

inline float sum_lanes(const Vec& v) { return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, v); }

inline float max_lanes(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, v);
}

// Floats of a vector starting at `at` that lie before `end`: a whole vector, or the tail of a row
// (a head_dim that is a multiple of 8 leaves half a vector at the end of an AVX-512 row).
inline int64_t lanes_before(int64_t at, int64_t end) { return std::min<int64_t>(Vec::size(), end - at); }

// `count` (<= Vec::size()) elements from `p` as float lanes; lanes past count are 0.
inline Vec load(const float* p, int64_t count = Vec::size()) { return Vec::loadu(p, count); }

inline Vec load(const BFloat16* p, int64_t count = Vec::size()) {
#if defined(CPU_CAPABILITY_AVX512)
  if (count == Vec::size()) {
    return Vec(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16)));
  }
#elif defined(CPU_CAPABILITY_AVX2)
  if (count == Vec::size()) {
    return Vec(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16)));
  }
#endif
  float lanes[Vec::size()] = {};
  for (int64_t i = 0; i < count; ++i) lanes[i] = static_cast<float>(p[i]);
  return Vec::loadu(lanes);
}

// Asks for the cache line holding `p` ahead of its load; a hint, so an address past the data is harmless.
template <typename T>
inline void prefetch(const T* p) {
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#else
  __builtin_prefetch(p);
#endif
}

// The first `count` lanes of `v` into `p`, rounded to nearest even where `p` is bfloat16.
inline void store(const Vec& v, float* p, int64_t count = Vec::size()) { v.store(p, count); }

inline void store(const Vec& v, BFloat16* p, int64_t count = Vec::size()) {
#if defined(KVWISE_AVX512_BF16)
  if (count == Vec::size()) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
    return;
  }
#elif defined(CPU_CAPABILITY_AVX512)
  if (count == Vec::size()) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), at::vec::cvtfp32_bf16(__m512(v)));
    return;
  }
#endif
  float lanes[Vec::size()];
  v.store(lanes);
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<BFloat16>(lanes[i]);
}

// `n` elements of `src` widened (or copied) to floats in `dst`.
template <typename T>
inline void widen(const T* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += Vec::size()) load(src + i, lanes_before(i, n)).store(dst + i, lanes_before(i, n));
}

// `n` floats of `src` stored as `T` in `dst`.
template <typename T>
inline void narrow(const float* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; i += Vec::size()) store(Vec::loadu(src + i, lanes_before(i, n)), dst + i, lanes_before(i, n));
}

}  // namespace kvwise

// Runs `body` with `scalar_t` the tensor's element type: float32 or bfloat16 (the kernels' two model dtypes).
#define KVWISE_DISPATCH(dtype, name, ...)                                                       \
  [&] {                                                                                        \
    if ((dtype) == at::kBFloat16) {                                                            \
      using scalar_t = kvwise::BFloat16;                                                       \
      return __VA_ARGS__();                                                                    \
    }                                                                                          \
    TORCH_CHECK((dtype) == at::kFloat, name, ": float32 or bfloat16 tensors, got ", (dtype)); \
    using scalar_t = float;                                                                    \
    return __VA_ARGS__();                                                                      \
  }()
