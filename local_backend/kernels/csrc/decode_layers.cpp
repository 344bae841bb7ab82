// Every decoder layer of a decode step in one call (CPU): `kvwise::decode_layers`.
//
// A decode step is a few rows through each layer's ten small ops (norms, four projections, rope, the kv write,
// attention, silu·up), and from Python each op also pays a module call, a dispatch and a few views: on SmolLM2
// that was a third of a step at batch 1. CUDA engines replay the step as a graph; here the step's layer loop
// runs in C++ and calls the very same kernels (`torch.ops.kvwise.*`, through the dispatcher) in the order
// `model.DecoderLayer` does, so a step's results are bit for bit the Python loop's. `model.CausalLM` takes this
// path for steps of decodes alone that every kernel serves (`ops.NativeOps.decode_layers`), else the loop.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace {

constexpr int64_t LINEARS_PER_LAYER = 4;  // qkv, o, gate_up, down
constexpr int64_t NORMS_PER_LAYER = 2;    // input, post-attention
constexpr int64_t FLOAT_WEIGHT = -1;      // a kind that names a float `weight_t [in, out]`, not blocks

template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// The ops, each typed as its kernel is declared (the dispatcher checks the signature on the first lookup).
struct Kernels {
  using Bias = std::optional<at::Tensor>;
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, double)> rms_norm =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, double)>("kvwise::rms_norm");
  c10::TypedOperatorHandle<void(at::Tensor, at::Tensor, const at::Tensor&, double)> add_rms_norm_ =
      op<void(at::Tensor, at::Tensor, const at::Tensor&, double)>("kvwise::add_rms_norm_");
  c10::TypedOperatorHandle<void(at::Tensor, at::Tensor, const at::Tensor&, const at::Tensor&)> rotary_embedding_ =
      op<void(at::Tensor, at::Tensor, const at::Tensor&, const at::Tensor&)>("kvwise::rotary_embedding_");
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)> silu_and_mul =
      op<at::Tensor(const at::Tensor&)>("kvwise::silu_and_mul");
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const Bias&)> matvec =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, const Bias&)>("kvwise::matvec");
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, const Bias&)> quant_matvec =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, const Bias&)>("kvwise::quant_matvec");
  c10::TypedOperatorHandle<void(at::Tensor, const at::Tensor&, const at::Tensor&, const at::Tensor&)> write_kv_ =
      op<void(at::Tensor, const at::Tensor&, const at::Tensor&, const at::Tensor&)>("kvwise::write_kv_");
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      int64_t, double)>
      paged_decode_attention = op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                             const at::Tensor&, int64_t, double)>("kvwise::paged_decode_attention");

  at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, int64_t kind, const Bias& bias) const {
    return kind == FLOAT_WEIGHT ? matvec.call(x, weight, bias) : quant_matvec.call(x, weight, kind, bias);
  }
};

const Kernels& kernels() {
  static const Kernels found;  // looked up once, after every fragment of the library has registered
  return found;
}

// x: the step's embedded tokens [rows, hidden]. Per layer, in order: `norms` its input and post-attention norm
// weights; `weights`, `kinds` and `biases` its qkv, o, gate_up and down projections (a kind is a `QuantType`
// id for a weight kept as blocks, FLOAT_WEIGHT for a float `weight_t`). `kv_cache` is every layer's
// `[layers, slots, 2, kv_heads, row]`. Returns (the last layer's MLP output, the residual stream before it),
// as `model.DecoderLayer` does; the caller's final norm adds them.
std::tuple<at::Tensor, at::Tensor> decode_layers(at::Tensor x, at::TensorList norms, at::TensorList weights,
                                                 at::IntArrayRef kinds, const c10::List<std::optional<at::Tensor>>& biases,
                                                 const at::Tensor& cos, const at::Tensor& sin, at::Tensor kv_cache,
                                                 const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                                                 const at::Tensor& context_lens, int64_t block_size, double scale,
                                                 int64_t q_size, int64_t kv_size, int64_t head_dim, double eps) {
  const int64_t layers = kv_cache.size(0);
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "decode_layers: x must be contiguous [rows, hidden]");
  TORCH_CHECK(static_cast<int64_t>(norms.size()) == NORMS_PER_LAYER * layers &&
                  static_cast<int64_t>(weights.size()) == LINEARS_PER_LAYER * layers &&
                  static_cast<int64_t>(kinds.size()) == LINEARS_PER_LAYER * layers &&
                  static_cast<int64_t>(biases.size()) == LINEARS_PER_LAYER * layers,
              "decode_layers: two norms and four projections (weight, kind, bias) per layer of kv_cache");
  const Kernels& k = kernels();
  const int64_t rows = x.size(0);
  at::Tensor hidden = x, residual;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const at::Tensor& input_norm = norms[NORMS_PER_LAYER * layer];
    const at::Tensor& post_norm = norms[NORMS_PER_LAYER * layer + 1];
    const int64_t first = LINEARS_PER_LAYER * layer;
    auto project = [&](const at::Tensor& h, int64_t which) {
      return k.linear(h, weights[first + which], kinds[first + which], biases.get(first + which));
    };
    at::Tensor h;
    if (layer == 0) {
      residual = hidden;
      h = k.rms_norm.call(hidden, input_norm, eps);
    } else {
      k.add_rms_norm_.call(hidden, residual, input_norm, eps);  // the sum into residual, its norm into hidden
      h = hidden;
    }
    const at::Tensor qkv = project(h, 0);
    const at::Tensor q = qkv.narrow(1, 0, q_size).view({rows, -1, head_dim});
    const at::Tensor key = qkv.narrow(1, q_size, kv_size).view({rows, -1, head_dim});
    const at::Tensor value = qkv.narrow(1, q_size + kv_size, kv_size).view({rows, -1, head_dim});
    k.rotary_embedding_.call(q, key, cos, sin);
    const at::Tensor layer_cache = kv_cache.select(0, layer);
    k.write_kv_.call(layer_cache, key, value, slot_mapping);
    const at::Tensor attended =
        k.paged_decode_attention.call(q.contiguous(), layer_cache, block_tables, context_lens, block_size, scale);
    at::Tensor out = project(attended.view({rows, -1}), 1);
    k.add_rms_norm_.call(out, residual, post_norm, eps);
    hidden = project(k.silu_and_mul.call(project(out, 2)), 3);
  }
  return {hidden, residual};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(kvwise, m) {
  m.def("decode_layers(Tensor(a!) x, Tensor[] norms, Tensor[] weights, int[] kinds, Tensor?[] biases, Tensor cos, "
        "Tensor sin, Tensor(b!) kv_cache, Tensor slot_mapping, Tensor block_tables, Tensor context_lens, int block_size, "
        "float scale, int q_size, int kv_size, int head_dim, float eps) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(kvwise, CPU, m) { m.impl("decode_layers", decode_layers); }
