// Horizontal reductions of one ATen vector of floats, shared by the kernels that use ATen's vector types.
#pragma once

#include <ATen/cpu/vec/vec.h>

namespace kvwise {

using Vec = at::vec::Vectorized<float>;

inline float sum_lanes(const Vec& v) { return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, v); }

inline float max_lanes(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, v);
}

}  // namespace kvwise
