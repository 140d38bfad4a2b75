// fused_mlp_forward (mlp_forward.h): the layers' tensors as the fused-MLP kernel's call, launched
// on the current CUDA stream under a guard for x's device.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/cuda/mlp/fused_mlp.h"
#include "kernels/ops/mlp_forward.h"
#include "kernels/ops/op_support.h"
#include "kernels/ops/ops.h"

namespace fusedlinear {

torch::Tensor fused_mlp_forward(const torch::Tensor& x, const std::vector<MlpLayerTensors>& layers,
                                bool residual, cuda::MlpForm form, Precision precision,
                                const cuda::MlpKernelOf& compiled) {
  using detail::text;
  constexpr const char* kOp = "fusedlinear::model (the fused MLP kernel)";
  TORCH_CHECK(!layers.empty() && layers.size() <= size_t(cuda::kMaxMlpLayers),
              text(kOp, ": takes 1 to ", cuda::kMaxMlpLayers, " layers, got ", layers.size()));
  const c10::cuda::CUDAGuard device_guard(x.device());
  const torch::Tensor x_rows = detail::linear_rows(x);
  cuda::MlpCall call;
  call.type = detail::element_type_of(x_rows);
  call.x = x_rows.data_ptr();
  call.rows = x_rows.size(0);
  call.layers = int(layers.size());
  call.residual = residual;
  call.form = form;
  call.precision = precision;
  // What the call points to, alive until the launch has been issued (on the stream: libtorch's
  // allocator keeps their memory for it).
  std::vector<torch::Tensor> kept;
  kept.reserve(layers.size() * 6);  // W, a gate's W, and their parts
  std::vector<detail::ColumnInputs> columns;
  columns.reserve(layers.size() * 2);
  const auto keep = [&](const torch::Tensor& t) {
    kept.push_back(t.contiguous());
    return kept.back();
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    const MlpLayerTensors& in = layers[l];
    cuda::MlpLayer& layer = call.layer[l];
    const torch::Tensor weight = keep(in.weight);
    layer.in = int(weight.size(1));
    columns.push_back(detail::column_inputs(in.bias, in.params));
    const detail::ColumnInputs& main = columns.back();
    layer.terms = main.terms;
    layer.chain.program = act::with_result_precision(*in.program, result_precision_of(call.type));
    // W's parts (at most two: bf16x3's hi and lo), each from row `first` on.
    const auto set_parts = [&](const std::vector<torch::Tensor>& parts, int64_t first,
                               const void*(&to)[2]) {
      for (size_t p = 0; p < parts.size() && p < 2; ++p) {
        const torch::Tensor part = keep(parts[p]);
        to[p] = part.narrow(0, first, part.size(0) - first).data_ptr();
      }
    };
    if (in.half >= 0) {
      // The chunked Linear's halves: the chain's and the gate's rows of W and of its bias.
      const int64_t width = weight.size(0) / 2;
      const int64_t chain_half = in.half, gate_half = 1 - in.half;
      layer.out = int(width);
      layer.w = weight.narrow(0, chain_half * width, width).data_ptr();
      layer.gate_w = weight.narrow(0, gate_half * width, width).data_ptr();
      set_parts(in.weight_parts, chain_half * width, layer.w_part);
      set_parts(in.weight_parts, gate_half * width, layer.gate_w_part);
      if (main.bias.defined()) {
        layer.bias = main.bias.narrow(0, chain_half * width, width).data_ptr();
        layer.gate_bias = main.bias.narrow(0, gate_half * width, width).data_ptr();
      }
      layer.round_before_chain = true;
    } else {
      layer.out = int(weight.size(0));
      layer.w = weight.data_ptr();
      set_parts(in.weight_parts, 0, layer.w_part);
      layer.bias = main.bias_data;
      if (in.gate_weight.defined()) {
        layer.gate_w = keep(in.gate_weight).data_ptr();
        set_parts(in.gate_weight_parts, 0, layer.gate_w_part);
        columns.push_back(detail::column_inputs(in.gate_bias, {}));
        layer.gate_bias = columns.back().bias_data;
      }
    }
  }
  const MlpLayerTensors& last = layers.back();
  call.residual_in_product = residual && last.half < 0 && !last.gate_weight.defined() &&
                             !(last.bias && last.bias->defined()) && last.program->count == 0;
  const int64_t out_features = call.layer[call.layers - 1].out;
  // Made in x's leading dimensions: no view of it to make after.
  const torch::Tensor out =
      torch::empty(detail::linear_output_shape(x.sizes(), out_features), x.options());
  call.out = out.data_ptr();
  const cudaError_t err = cuda::launch_fused_mlp(call, at::cuda::getCurrentCUDAStream(), compiled);
  TORCH_CHECK(err != cudaErrorNotSupported,
              text(kOp, ": the kernel does not take this model (layers 1 to ", cuda::kMaxMlpWidth,
                   " wide, at most ", cuda::kMaxMlpLayers,
                   " of them, 16-bit models on compute capability 8.0 or newer, in the form the "
                   "plan chose)"));
  TORCH_CHECK(err == cudaSuccess,
              text(kOp, ": CUDA kernel launch failed: ", cudaGetErrorString(err)));
  return out;
}

}  // namespace fusedlinear
