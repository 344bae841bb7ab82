// A decoder layer's small ops fused (CPU, float32), as vLLM's CPU build has them: `kvwise::rms_norm`,
// `kvwise::add_rms_norm_`, `kvwise::rotary_embedding_`, `kvwise::silu_and_mul`.
//
// At decode each is a handful of torch dispatches on a few kilobytes (F.rms_norm alone is six), so
// their fixed cost is most of a layer's non-matmul time; here each is one call and one pass. Built and
// loaded by `local_backend/cpu_kernels.py`; `model.py` keeps the torch ops as the path without them.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "lanes.h"

namespace {

using kvwise::sum_lanes;
using kvwise::Vec;

// dst = row / sqrt(mean(row²) + eps) · w over one row of `width` floats (dst may be another row or the same).
void norm_row(const float* row, const float* w, float* dst, int64_t width, float eps) {
  const int64_t whole = width - width % Vec::size();
  Vec acc(0.f);
  for (int64_t i = 0; i < whole; i += Vec::size()) {
    const Vec v = Vec::loadu(row + i);
    acc = at::vec::fmadd(v, v, acc);
  }
  float squares = sum_lanes(acc);
  for (int64_t i = whole; i < width; ++i) squares += row[i] * row[i];
  const float inverse = 1.f / std::sqrt(squares / width + eps);
  const Vec inv(inverse);
  for (int64_t i = 0; i < whole; i += Vec::size()) (Vec::loadu(row + i) * inv * Vec::loadu(w + i)).store(dst + i);
  for (int64_t i = whole; i < width; ++i) dst[i] = row[i] * inverse * w[i];
}

void check_norm(const at::Tensor& x, const at::Tensor& weight, const char* name) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.is_contiguous() && weight.is_contiguous(),
              name, ": contiguous float32 x and weight");
  TORCH_CHECK(weight.numel() == x.size(-1), name, ": one weight per element of the last dimension");
}

// x / sqrt(mean(x²) + eps) · weight over the last dimension of a contiguous x.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_norm(x, weight, "rms_norm");
  const int64_t width = x.size(-1), rows = x.numel() / width;
  auto out = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) norm_row(in + r * width, w, o + r * width, width, static_cast<float>(eps));
  });
  return out;
}

// In place, vLLM's fused_add_rms_norm: residual += x, then x = rms_norm(residual) · weight, one pass over
// each row (a decoder layer's residual add and the next norm, which read the sum twice apart).
void add_rms_norm_(at::Tensor x, at::Tensor residual, const at::Tensor& weight, double eps) {
  check_norm(x, weight, "add_rms_norm_");
  TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == at::kFloat && residual.is_contiguous(),
              "add_rms_norm_: a contiguous float32 residual shaped as x");
  const int64_t width = x.size(-1), rows = x.numel() / width, whole = width - width % Vec::size();
  float* in = x.data_ptr<float>();
  float* sum = residual.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* added = sum + r * width;
      const float* row = in + r * width;
      for (int64_t i = 0; i < whole; i += Vec::size()) (Vec::loadu(added + i) + Vec::loadu(row + i)).store(added + i);
      for (int64_t i = whole; i < width; ++i) added[i] += row[i];
      norm_row(added, w, in + r * width, width, static_cast<float>(eps));
    }
  });
}

// In place on x [tokens, heads, dim] (rows may be strided, each head contiguous): x·cos + rotate_half(x)·sin,
// rotate_half(x) = (−x2, x1), with cos and sin [tokens, 1, dim] (`model.apply_rope`).
void rope_one(at::Tensor& x, const float* cos, const float* sin) {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && x.stride(2) == 1 && x.stride(1) == x.size(2),
              "rotary_embedding_: q and k must be float32 [tokens, heads, dim] with contiguous heads");
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2, row_stride = x.stride(0);
  float* data = x.data_ptr<float>();
  at::parallel_for(0, tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* c = cos + t * dim;
      const float* s = sin + t * dim;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = data + t * row_stride + h * dim;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c[i] - x2 * s[i];
          v[i + half] = x2 * c[i + half] + x1 * s[i + half];
        }
      }
    }
  });
}

void rotary_embedding_(at::Tensor q, at::Tensor k, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() && sin.is_contiguous() &&
                  cos.numel() == q.size(0) * q.size(2) && sin.numel() == cos.numel() && k.size(0) == q.size(0) &&
                  k.size(2) == q.size(2) && q.size(2) % 2 == 0,
              "rotary_embedding_: float32 cos and sin [tokens, 1, dim] for q and k of one even head_dim");
  rope_one(q, cos.data_ptr<float>(), sin.data_ptr<float>());
  rope_one(k, cos.data_ptr<float>(), sin.data_ptr<float>());
}

// silu(gate) · up for gate_up [tokens, 2 · size] = (gate | up): the MLP's activation in one pass.
at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.scalar_type() == at::kFloat && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "silu_and_mul: contiguous float32 [tokens, 2 * size]");
  const int64_t tokens = gate_up.size(0), size = gate_up.size(1) / 2, whole = size - size % Vec::size();
  auto out = at::empty({tokens, size}, gate_up.options());
  const float* in = gate_up.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, tokens, 4, [&](int64_t begin, int64_t end) {
    const Vec one(1.f);
    for (int64_t t = begin; t < end; ++t) {
      const float* gate = in + t * 2 * size;
      const float* up = gate + size;
      float* dst = o + t * size;
      for (int64_t i = 0; i < whole; i += Vec::size()) {
        const Vec g = Vec::loadu(gate + i);
        (g / (one + g.neg().exp()) * Vec::loadu(up + i)).store(dst + i);
      }
      for (int64_t i = whole; i < size; ++i) dst[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
    }
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
