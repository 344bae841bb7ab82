// The sampler's passes over [rows, vocab] fused (CPU, float32): `kvwise::tempered_weights_`, `kvwise::heavier_mass`,
// `kvwise::draw`, `kvwise::apply_penalties_`, and greedy rows' `kvwise::argmax_rows`.
//
// In torch ops, temperature weights are five passes over the logits (max, subtract, scale, exp2, chunk
// sums) and the top-p test three (divide, threshold, sum); at batch 64 and vocabulary 32k each pass
// moves 8 MiB, more than the caches hold. Here they are two passes and one. Built and loaded by
// `local_backend/kernels/cpu_kernels.py`; `sampling/sampler.py` keeps the torch passes as the path when it is not available.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "lanes.h"
#include "parallel.h"

namespace {

using kvwise::max_lanes;
using kvwise::sum_lanes;
using kvwise::Vec;

// In place, per row: w = 2^((logit - max) * scale[row]); returns Σw per chunk of `chunk` tokens
// (float32 sums of a chunk, as float64: `sampler.chunk_sums`).
at::Tensor tempered_weights_(at::Tensor logits, const at::Tensor& scale, int64_t chunk) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous(),
              "tempered_weights_: logits must be contiguous float32 [rows, vocab]");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous() && scale.numel() == logits.size(0),
              "tempered_weights_: one float32 scale per row");
  TORCH_CHECK(chunk > 0 && chunk % Vec::size() == 0, "tempered_weights_: chunk must be a multiple of ", Vec::size());
  const int64_t rows = logits.size(0), vocab = logits.size(1), chunks = (vocab + chunk - 1) / chunk;
  auto sums = at::empty({rows, chunks}, logits.options().dtype(at::kDouble));
  float* data = logits.data_ptr<float>();
  const float* scales = scale.data_ptr<float>();
  double* out = sums.data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = data + r * vocab;
      const int64_t whole = vocab - vocab % Vec::size();
      Vec top_lanes(-std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < whole; i += Vec::size()) top_lanes = at::vec::maximum(top_lanes, Vec::loadu(row + i));
      float top = max_lanes(top_lanes);
      for (int64_t i = whole; i < vocab; ++i) top = std::max(top, row[i]);
      const Vec top_v(top), scale_v(scales[r]);
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t from = c * chunk, to = std::min(vocab, from + chunk), full = from + (to - from) / Vec::size() * Vec::size();
        Vec acc(0.f);
        for (int64_t i = from; i < full; i += Vec::size()) {
          const Vec w = ((Vec::loadu(row + i) - top_v) * scale_v).exp2();
          w.store(row + i);
          acc = acc + w;
        }
        float sum = sum_lanes(acc);
        for (int64_t i = full; i < to; ++i) sum += row[i] = std::exp2((row[i] - top) * scales[r]);
        out[r * chunks + c] = sum;
      }
    }
  });
  return sums;
}

// Per row, Σ of the weights strictly above chosen[row]: the mass the top-p test compares with p · Σw.
at::Tensor heavier_mass(const at::Tensor& w, const at::Tensor& chosen) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat && w.is_contiguous(),
              "heavier_mass: w must be contiguous float32 [rows, vocab]");
  TORCH_CHECK(chosen.scalar_type() == at::kFloat && chosen.is_contiguous() && chosen.numel() == w.size(0),
              "heavier_mass: one float32 weight per row");
  const int64_t rows = w.size(0), vocab = w.size(1), whole = vocab - vocab % Vec::size();
  auto mass = at::empty({rows}, w.options());
  const float* data = w.data_ptr<float>();
  const float* bounds = chosen.data_ptr<float>();
  float* out = mass.data_ptr<float>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = data + r * vocab;
      const Vec bound(bounds[r]), zero(0.f);
      Vec acc(0.f);
      for (int64_t i = 0; i < whole; i += Vec::size()) {
        const Vec v = Vec::loadu(row + i);
        acc = acc + Vec::blendv(zero, v, v > bound);
      }
      float sum = sum_lanes(acc);
      for (int64_t i = whole; i < vocab; ++i) sum += row[i] > bounds[r] ? row[i] : 0.f;
      out[r] = sum;
    }
  });
  return mass;
}

// Per row, the token drawn from w / Σw by inverse CDF with its uniform: `sampler.draw`, step for step in
// float64 (the chunk whose cumulative sum first exceeds u · Σ, then the token inside it; never past the
// last token of weight > 0), where torch needs a dozen small ops.
at::Tensor draw(const at::Tensor& w, const at::Tensor& sums, const at::Tensor& uniforms, int64_t chunk) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat && w.is_contiguous(), "draw: w must be contiguous float32 [rows, vocab]");
  TORCH_CHECK(sums.dim() == 2 && sums.scalar_type() == at::kDouble && sums.is_contiguous() && sums.size(0) == w.size(0),
              "draw: sums must be contiguous float64 [rows, chunks]");
  TORCH_CHECK(uniforms.scalar_type() == at::kDouble && uniforms.is_contiguous() && uniforms.numel() == w.size(0),
              "draw: one float64 uniform per row");
  const int64_t rows = w.size(0), vocab = w.size(1), chunks = sums.size(1);
  TORCH_CHECK(chunk > 0 && chunks * chunk >= vocab, "draw: the chunks must cover the vocabulary");
  auto tokens = at::empty({rows}, w.options().dtype(at::kLong));
  const float* data = w.data_ptr<float>();
  const double* chunk_sums = sums.data_ptr<double>();
  const double* u = uniforms.data_ptr<double>();
  int64_t* out = tokens.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* s = chunk_sums + r * chunks;
    double total = 0;
    int64_t heaviest_last = 0;  // the last chunk of weight > 0: where a target rounded up to Σ lands
    for (int64_t c = 0; c < chunks; ++c) {
      total += s[c];
      if (s[c] > 0) heaviest_last = c;
    }
    const double target = u[r] * total;
    double below = 0;  // Σ of the chunks before `c`
    int64_t c = 0;
    for (double cdf = s[0]; c < heaviest_last && cdf <= target; cdf += s[++c]) below = cdf;
    const double offset = target - below;
    const float* row = data + r * vocab + c * chunk;
    const int64_t size = std::min(chunk, vocab - c * chunk);
    int64_t pick = 0, last = 0;
    double inside = 0;
    bool found = false;
    for (int64_t i = 0; i < size; ++i) {
      if (row[i] > 0) last = i;
      inside += row[i];
      if (!found && inside > offset) pick = i, found = true;
    }
    out[r] = c * chunk + (found ? std::min(pick, last) : last);
  }
  return tokens;
}

// vLLM's penalties on each (flat index, offset, repetition) entry of the logits, in place:
// logit / r if logit > 0 else logit * r, minus the offset (`ops.apply_penalties`).
void apply_penalties_(at::Tensor logits, const at::Tensor& index, const at::Tensor& offsets, const at::Tensor& repetition) {
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.is_contiguous(), "apply_penalties_: logits must be contiguous float32");
  TORCH_CHECK(index.scalar_type() == at::kLong && offsets.scalar_type() == at::kFloat && repetition.scalar_type() == at::kFloat,
              "apply_penalties_: int64 index, float32 offsets and repetition");
  TORCH_CHECK(index.is_contiguous() && offsets.is_contiguous() && repetition.is_contiguous() &&
                  offsets.numel() == index.numel() && repetition.numel() == index.numel(),
              "apply_penalties_: one contiguous offset and repetition per index");
  float* data = logits.data_ptr<float>();
  const int64_t* at = index.data_ptr<int64_t>();
  const float* off = offsets.data_ptr<float>();
  const float* rep = repetition.data_ptr<float>();
  const int64_t entries = index.numel(), size = logits.numel();
  for (int64_t i = 0; i < entries; ++i) TORCH_CHECK(at[i] >= 0 && at[i] < size, "apply_penalties_: index out of range");
  at::parallel_for(0, entries, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = data[at[i]];
      data[at[i]] = (v > 0 ? v / rep[i] : v * rep[i]) - off[i];
    }
  });
}

// Each row's first index of its largest logit, as `torch.argmax(dim=-1)` gives it (a NaN counts as the largest).
// A greedy decode step ends here: on the decode step's own pool (`kvwise::parallel_for`), where ATen's argmax over
// [16, 49152] opens an OpenMP region, whose join waits out a descheduled worker's time slice on a busy CPU.
at::Tensor argmax_rows(const at::Tensor& logits) {
  static_assert(Vec::size() < 32, "argmax_rows: a lane mask in an int");
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous() && logits.size(1) > 0,
              "argmax_rows: logits must be contiguous float32 [rows, vocab > 0]");
  const int64_t rows = logits.size(0), vocab = logits.size(1), whole = vocab - vocab % Vec::size();
  auto best = at::empty({rows}, logits.options().dtype(at::kLong));
  const float* data = logits.data_ptr<float>();
  int64_t* out = best.data_ptr<int64_t>();
  kvwise::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = data + r * vocab;
      Vec top_lanes(-std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < whole; i += Vec::size()) top_lanes = at::vec::maximum(top_lanes, Vec::loadu(row + i));
      float top = max_lanes(top_lanes);  // NaN if any lane saw one
      for (int64_t i = whole; i < vocab && !std::isnan(top); ++i) top = std::isnan(row[i]) ? row[i] : std::max(top, row[i]);
      int64_t at = 0;
      if (std::isnan(top)) {
        while (!std::isnan(row[at])) ++at;
      } else {
        const Vec top_v(top);
        // zero_mask: a bit per lane not equal to top; the first clear bit is the first index of the largest
        for (; at < whole; at += Vec::size()) {
          const int differs = (Vec::loadu(row + at) == top_v).zero_mask();
          if (differs != (1 << Vec::size()) - 1) {
            at += __builtin_ctz(~differs);
            break;
          }
        }
        if (at >= whole) {
          at = whole;
          while (row[at] != top) ++at;
        }
      }
      out[r] = at;
    }
  });
  return best;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) {
  m.def("tempered_weights_(Tensor(a!) logits, Tensor scale, int chunk) -> Tensor");
  m.def("heavier_mass(Tensor w, Tensor chosen) -> Tensor");
  m.def("draw(Tensor w, Tensor sums, Tensor uniforms, int chunk) -> Tensor");
  m.def("apply_penalties_(Tensor(a!) logits, Tensor index, Tensor offsets, Tensor repetition) -> ()");
  m.def("argmax_rows(Tensor logits) -> Tensor");
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) {
  m.impl("tempered_weights_", tempered_weights_);
  m.impl("heavier_mass", heavier_mass);
  m.impl("draw", draw);
  m.impl("apply_penalties_", apply_penalties_);
  m.impl("argmax_rows", argmax_rows);
}
