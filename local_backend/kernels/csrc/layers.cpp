// A decoder layer's small ops fused (CPU, float32 or bfloat16 computed in float32), as vLLM's CPU build has them: `kvwise::rms_norm`,
// `kvwise::add_rms_norm_`, `kvwise::rotary_embedding_`, `kvwise::silu_and_mul`.
//
// At decode each is a handful of torch dispatches on a few kilobytes (F.rms_norm alone is six), so
// their fixed cost is most of a layer's non-matmul time; here each is one call and one pass. Built and
// loaded by `local_backend/kernels/cpu_kernels.py`; `model/llama.py` keeps the torch ops as the path without them.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "lanes.h"

namespace {

using kvwise::sum_lanes;
using kvwise::Vec;

// Rows each op takes on the calling thread before it splits them over OpenMP's team: a decode step's rows (up to
// `QUANT_MATVEC_MAX_ROWS`, 32) are a few microseconds of work here, and a parallel region wakes OpenMP's sleeping
// worker, which on a busy CPU waits out another process's time slice (about a millisecond) at the region's join;
// one such region per layer cut 16 streams' decode beside one niced CPU-bound process per core (docs/benchmarks.md).
constexpr int64_t INLINE_ROWS = 32;

// dst = row / sqrt(mean(row²) + eps) · w over one row of `width` elements (dst may be another row or the same).
template <typename T>
void norm_row(const T* row, const T* w, T* dst, int64_t width, float eps) {
  Vec acc(0.f);
  for (int64_t i = 0; i < width; i += Vec::size()) {
    const Vec v = kvwise::load(row + i, kvwise::lanes_before(i, width));
    acc = at::vec::fmadd(v, v, acc);
  }
  const Vec inv(1.f / std::sqrt(sum_lanes(acc) / width + eps));
  for (int64_t i = 0; i < width; i += Vec::size()) {
    const int64_t count = kvwise::lanes_before(i, width);
    kvwise::store(kvwise::load(row + i, count) * inv * kvwise::load(w + i, count), dst + i, count);
  }
}

void check_norm(const at::Tensor& x, const at::Tensor& weight, const char* name) {
  TORCH_CHECK(weight.scalar_type() == x.scalar_type() && x.is_contiguous() && weight.is_contiguous(), name,
              ": contiguous x and weight of one dtype");
  TORCH_CHECK(weight.numel() == x.size(-1), name, ": one weight per element of the last dimension");
}

// x / sqrt(mean(x²) + eps) · weight over the last dimension of a contiguous x.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_norm(x, weight, "rms_norm");
  const int64_t width = x.size(-1), rows = x.numel() / width;
  auto out = at::empty_like(x);
  KVWISE_DISPATCH(x.scalar_type(), "rms_norm", [&] {
    const scalar_t* in = x.data_ptr<scalar_t>();
    const scalar_t* w = weight.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, INLINE_ROWS, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) norm_row(in + r * width, w, o + r * width, width, static_cast<float>(eps));
    });
  });
  return out;
}

// In place, vLLM's fused_add_rms_norm: residual += x, then x = rms_norm(residual) · weight, one pass over
// each row (a decoder layer's residual add and the next norm, which read the sum twice apart).
void add_rms_norm_(at::Tensor x, at::Tensor residual, const at::Tensor& weight, double eps) {
  check_norm(x, weight, "add_rms_norm_");
  TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type() && residual.is_contiguous(),
              "add_rms_norm_: a contiguous residual shaped as x, of its dtype");
  const int64_t width = x.size(-1), rows = x.numel() / width;
  KVWISE_DISPATCH(x.scalar_type(), "add_rms_norm_", [&] {
    scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* sum = residual.data_ptr<scalar_t>();
    const scalar_t* w = weight.data_ptr<scalar_t>();
    at::parallel_for(0, rows, INLINE_ROWS, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        scalar_t* added = sum + r * width;
        const scalar_t* row = in + r * width;
        for (int64_t i = 0; i < width; i += Vec::size()) {
          const int64_t count = kvwise::lanes_before(i, width);
          kvwise::store(kvwise::load(added + i, count) + kvwise::load(row + i, count), added + i, count);
        }
        norm_row(added, w, in + r * width, width, static_cast<float>(eps));
      }
    });
  });
}

// In place on x [tokens, heads, dim] (rows may be strided, each head contiguous): x·cos + rotate_half(x)·sin,
// rotate_half(x) = (−x2, x1), with cos and sin [tokens, 1, dim] (`model.apply_rope`), all of one dtype.
template <typename T>
void rope_one(at::Tensor& x, const T* cos, const T* sin) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1 && x.stride(1) == x.size(2),
              "rotary_embedding_: q and k must be [tokens, heads, dim] with contiguous heads");
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2, row_stride = x.stride(0);
  T* data = x.data_ptr<T>();
  at::parallel_for(0, tokens, INLINE_ROWS, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* c = cos + t * dim;
      const T* s = sin + t * dim;
      for (int64_t h = 0; h < heads; ++h) {
        T* v = data + t * row_stride + h * dim;
        for (int64_t i = 0; i < half; i += Vec::size()) {  // both halves' lanes loaded before either is stored
          const int64_t count = kvwise::lanes_before(i, half);
          const Vec x1 = kvwise::load(v + i, count), x2 = kvwise::load(v + i + half, count);
          kvwise::store(x1 * kvwise::load(c + i, count) - x2 * kvwise::load(s + i, count), v + i, count);
          kvwise::store(x2 * kvwise::load(c + i + half, count) + x1 * kvwise::load(s + i + half, count), v + i + half, count);
        }
      }
    }
  });
}

void rotary_embedding_(at::Tensor q, at::Tensor k, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(cos.scalar_type() == q.scalar_type() && sin.scalar_type() == q.scalar_type() && k.scalar_type() == q.scalar_type() &&
                  cos.is_contiguous() && sin.is_contiguous() && cos.numel() == q.size(0) * q.size(2) &&
                  sin.numel() == cos.numel() && k.size(0) == q.size(0) && k.size(2) == q.size(2) && q.size(2) % 2 == 0,
              "rotary_embedding_: cos and sin [tokens, 1, dim] for q and k of one even head_dim, all of one dtype");
  KVWISE_DISPATCH(q.scalar_type(), "rotary_embedding_", [&] {
    rope_one<scalar_t>(q, cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>());
    rope_one<scalar_t>(k, cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>());
  });
}

// silu(gate) · up for gate_up [tokens, 2 · size] = (gate | up): the MLP's activation in one pass.
at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0, "silu_and_mul: contiguous [tokens, 2 * size]");
  const int64_t tokens = gate_up.size(0), size = gate_up.size(1) / 2;
  auto out = at::empty({tokens, size}, gate_up.options());
  KVWISE_DISPATCH(gate_up.scalar_type(), "silu_and_mul", [&] {
    const scalar_t* in = gate_up.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, tokens, INLINE_ROWS, [&](int64_t begin, int64_t end) {
      const Vec one(1.f);
      for (int64_t t = begin; t < end; ++t) {
        const scalar_t* gate = in + t * 2 * size;
        const scalar_t* up = gate + size;
        scalar_t* dst = o + t * size;
        for (int64_t i = 0; i < size; i += Vec::size()) {
          const int64_t count = kvwise::lanes_before(i, size);
          const Vec g = kvwise::load(gate + i, count);
          kvwise::store(g / (one + g.neg().exp_u20()) * kvwise::load(up + i, count), dst + i, count);
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  m.def("rotary_embedding_(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin) -> ()");
  m.def("silu_and_mul(Tensor gate_up) -> Tensor");
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) {
  m.impl("rms_norm", rms_norm);
  m.impl("add_rms_norm_", add_rms_norm_);
  m.impl("rotary_embedding_", rotary_embedding_);
  m.impl("silu_and_mul", silu_and_mul);
}
