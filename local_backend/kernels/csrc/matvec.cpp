// A decode row times a projection (CPU, float32 or bfloat16): `kvwise::matvec`, y = x·Wᵀ + b with W stored
// transposed, `weight_t [in, out]` (`model.Linear`).
//
// One row per matrix is pure weight streaming: every weight is read once and used once. MKL's sgemv,
// which `x @ weight_t` reaches, streamed the 56M Llama's projections at 6-15 GB/s on this project's 2-core
// machines where a plain sum over memory reads 19-20 GB/s. Here each thread streams one contiguous
// band of W's rows (`in` split between the threads) into a partial y, four rows per pass over the
// band's columns so each partial element is loaded and stored once per four weights; the partials are
// then added. Every row of x uses a tile of weights while it is in L1, so W streams once whatever the
// row count. A bfloat16 W streams half the bytes: each weight is widened to float32 as it is loaded (`lanes.h`)
// and every sum is kept in float32 (x too); y is rounded to bfloat16 once, at the end. Widening leaves the
// core less time ahead of its loads, and the hardware prefetcher alone kept a bfloat16 W well under the
// speed of a float32 one, so each load of a bfloat16 pass asks for its place in the next pass
// (`PREFETCH_NEXT_PASS`).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <type_traits>

#include "lanes.h"
#include "parallel.h"

namespace {

using kvwise::Vec;

constexpr int64_t ROWS_PER_PASS = 4;
constexpr int64_t MIN_BAND_ROWS = 64;  // a thread's band below this is not worth its fork
constexpr int64_t TILE_COLUMNS = 1024;  // four rows' tile (16 KB) stays in L1 while every row of x uses it

// Whether a pass over W's rows of type T prefetches the same columns of the next pass's rows.
template <typename T>
constexpr bool PREFETCH_NEXT_PASS = std::is_same_v<T, kvwise::BFloat16>;

// For each of `xrows` rows of x (factors x[r · stride + k]): Σ over the rows of `pass` (1 ≤ count ≤ 4,
// weights w_k) added to y[r · out + c] for c in [c0, c1), or stored when `first`. Two rows of x share
// each load of the weights, which halves the loads per multiply-add once there are rows to pair.
template <int count, int xrows, typename T>
inline void pass_into(const T* const* w, const float* x, int64_t stride, int64_t c0, int64_t c1, bool first, float* y,
                      int64_t out) {
  Vec xs[xrows][count];
  for (int r = 0; r < xrows; ++r) {
    for (int k = 0; k < count; ++k) xs[r][k] = Vec(x[r * stride + k]);
  }
  const int64_t whole = c1 - (c1 - c0) % Vec::size();
  for (int64_t c = c0; c < whole; c += Vec::size()) {
    Vec acc[xrows];
    for (int r = 0; r < xrows; ++r) acc[r] = first ? Vec(0.f) : Vec::loadu(y + r * out + c);
    for (int k = 0; k < count; ++k) {
      if constexpr (PREFETCH_NEXT_PASS<T>) kvwise::prefetch(w[k] + c + ROWS_PER_PASS * out);
      const Vec weights = kvwise::load(w[k] + c);
      for (int r = 0; r < xrows; ++r) acc[r] = at::vec::fmadd(xs[r][k], weights, acc[r]);
    }
    for (int r = 0; r < xrows; ++r) acc[r].store(y + r * out + c);
  }
  for (int r = 0; r < xrows; ++r) {
    for (int64_t c = whole; c < c1; ++c) {
      float acc = first ? 0.f : y[r * out + c];
      for (int k = 0; k < count; ++k) acc += x[r * stride + k] * static_cast<float>(w[k][c]);
      y[r * out + c] = acc;
    }
  }
}

template <int xrows, typename T>
inline void pass_rows(int64_t count, const T* const* w, const float* x, int64_t stride, int64_t c0, int64_t c1, bool first,
                      float* y, int64_t out) {
  switch (count) {
    case 4: pass_into<4, xrows>(w, x, stride, c0, c1, first, y, out); break;
    case 3: pass_into<3, xrows>(w, x, stride, c0, c1, first, y, out); break;
    case 2: pass_into<2, xrows>(w, x, stride, c0, c1, first, y, out); break;
    default: pass_into<1, xrows>(w, x, stride, c0, c1, first, y, out);
  }
}

// partial[m, :] = Σ_{i in [begin, end)} x[m, i] · W[i, :] for every row m of x. W is read once, front to
// back: each pass takes four of its rows, a tile of their columns at a time, for every row of x.
template <typename T>
void band_into(const float* x, const T* w, int64_t rows, int64_t in, int64_t out, int64_t begin, int64_t end, float* partial) {
  if (begin >= end) {
    std::fill(partial, partial + rows * out, 0.f);
    return;
  }
  for (int64_t i = begin; i < end; i += ROWS_PER_PASS) {
    const int64_t count = std::min(ROWS_PER_PASS, end - i);
    const T* pass[ROWS_PER_PASS] = {w + i * out, w + (i + 1) * out, w + (i + 2) * out, w + (i + 3) * out};
    for (int64_t c0 = 0; c0 < out; c0 += TILE_COLUMNS) {
      const int64_t c1 = std::min(out, c0 + TILE_COLUMNS);
      int64_t m = 0;
      for (; m + 2 <= rows; m += 2) pass_rows<2>(count, pass, x + m * in + i, in, c0, c1, i == begin, partial + m * out, out);
      if (m < rows) pass_rows<1>(count, pass, x + m * in + i, in, c0, c1, i == begin, partial + m * out, out);
    }
  }
}

template <typename T>
void matvec_into(const at::Tensor& x, const at::Tensor& weight_t, const std::optional<at::Tensor>& bias, at::Tensor& y) {
  const int64_t rows = x.size(0), in = weight_t.size(0), out = weight_t.size(1);
  const int64_t bands = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), in / MIN_BAND_ROWS));
  const int64_t per_band = (in + bands - 1) / bands;
  // Scratch floats, uninitialised: x widened (bfloat16), y before it is narrowed, each other band's partial.
  constexpr bool widened = !std::is_same_v<T, float>;
  const int64_t total = rows * out;
  const auto scratch = std::make_unique_for_overwrite<float[]>((widened ? rows * in + total : 0) + (bands - 1) * total);
  float* pp = scratch.get();
  const float* xp;
  float* yp;
  if constexpr (widened) {
    kvwise::widen(x.data_ptr<T>(), rows * in, pp);
    xp = pp;
    yp = pp + rows * in;
    pp = yp + total;
  } else {
    xp = x.data_ptr<float>();
    yp = y.data_ptr<float>();
  }
  const T* wp = weight_t.data_ptr<T>();
  kvwise::parallel_for(0, bands, 1, [&](int64_t begin, int64_t end) {
    for (int64_t band = begin; band < end; ++band) {
      float* dst = band == 0 ? yp : pp + (band - 1) * rows * out;
      band_into(xp, wp, rows, in, out, band * per_band, std::min(in, (band + 1) * per_band), dst);
    }
  });
  const int64_t whole = total - total % Vec::size();
  for (int64_t band = 1; band < bands; ++band) {
    const float* p = pp + (band - 1) * total;
    for (int64_t c = 0; c < whole; c += Vec::size()) (Vec::loadu(yp + c) + Vec::loadu(p + c)).store(yp + c);
    for (int64_t c = whole; c < total; ++c) yp[c] += p[c];
  }
  if (bias) {
    const T* b = bias->data_ptr<T>();
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < out; ++c) yp[m * out + c] += static_cast<float>(b[c]);
    }
  }
  if constexpr (widened) kvwise::narrow(yp, total, y.data_ptr<T>());
}

at::Tensor matvec(const at::Tensor& x, const at::Tensor& weight_t, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && weight_t.dim() == 2 && x.scalar_type() == weight_t.scalar_type() && x.is_contiguous() &&
                  weight_t.is_contiguous() && x.size(1) == weight_t.size(0),
              "matvec: contiguous x [rows, in] and weight_t [in, out] of one dtype");
  TORCH_CHECK(!bias || (bias->scalar_type() == x.scalar_type() && bias->is_contiguous() && bias->numel() == weight_t.size(1)),
              "matvec: a bias of one element per output, of x's dtype");
  auto y = at::empty({x.size(0), weight_t.size(1)}, x.options());
  KVWISE_DISPATCH(x.scalar_type(), "matvec", [&] { matvec_into<scalar_t>(x, weight_t, bias, y); });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) { m.def("matvec(Tensor x, Tensor weight_t, Tensor? bias) -> Tensor"); }

TORCH_LIBRARY_IMPL(kvwise, CPU, m) { m.impl("matvec", matvec); }
