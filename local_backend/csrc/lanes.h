// ATen's vector of floats for the capability this library is built for (8 lanes for AVX2 and the portable
// path, 16 for AVX-512), and the horizontal reductions the kernels share.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstdint>

namespace kvwise {

using Vec = at::vec::Vectorized<float>;

inline float sum_lanes(const Vec& v) { return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, v); }

inline float max_lanes(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, v);
}

// Floats of a vector starting at `at` that lie before `end`: a whole vector, or the tail of a row
// (a head_dim that is a multiple of 8 leaves half a vector at the end of an AVX-512 row).
inline int64_t lanes_before(int64_t at, int64_t end) { return std::min<int64_t>(Vec::size(), end - at); }

}  // namespace kvwise
