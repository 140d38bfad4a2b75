// CPU twin of fused_epilogue.cu: the same per-column adds and the same activation functors
// (activations.h), over rows split across threads with at::parallel_for.
#include <ATen/Parallel.h>

#include "ops.h"

namespace fusedlinear {
namespace detail {
namespace {

template <typename T, class Activations>
void run_rows(const T* y, const T* bias, const T* shift, T* out, int64_t rows, int64_t cols) {
  const Activations activations;
  // About 32K elements per task: large enough to amortise the task, small enough to balance.
  const int64_t grain_rows = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(cols, 1));
  at::parallel_for(0, rows, grain_rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* y_row = y + row * cols;
      T* out_row = out + row * cols;
      for (int64_t c = 0; c < cols; ++c) {
        float v = static_cast<float>(y_row[c]);
        if (bias) v += static_cast<float>(bias[c]);
        if (shift) v += static_cast<float>(shift[c]);
        out_row[c] = static_cast<T>(activations(v));
      }
    }
  });
}

}  // namespace

torch::Tensor fused_epilogue_cpu(EpilogueKind kind, const torch::Tensor& y,
                                 const c10::optional<torch::Tensor>& bias,
                                 const c10::optional<torch::Tensor>& shift) {
  const torch::Tensor input = y.contiguous();
  torch::Tensor out = torch::empty_like(input, at::MemoryFormat::Contiguous);
  if (input.numel() == 0) return out;
  const int64_t cols = input.size(-1);
  const int64_t rows = input.numel() / cols;
  const torch::Tensor bias_c = bias && bias->defined() ? bias->contiguous() : torch::Tensor();
  const torch::Tensor shift_c = shift && shift->defined() ? shift->contiguous() : torch::Tensor();
  const auto run = [&](auto element) {
    using T = decltype(element);
    const T* b = bias_c.defined() ? bias_c.data_ptr<T>() : nullptr;
    const T* s = shift_c.defined() ? shift_c.data_ptr<T>() : nullptr;
    // The same chains as the GPU's for each dtype (on the host both tanh functors are libm's).
    dispatch_epilogue<kResultPrecisionOf<T>>(kind, [&](auto activations) {
      run_rows<T, decltype(activations)>(input.data_ptr<T>(), b, s, out.data_ptr<T>(), rows, cols);
    });
  };
  switch (input.scalar_type()) {
    case torch::kFloat32:
      run(float{});
      break;
    case torch::kFloat16:
      run(c10::Half{});
      break;
    case torch::kBFloat16:
      run(c10::BFloat16{});
      break;
    default:
      TORCH_CHECK(false, "fused_epilogue_cpu: unsupported dtype ", input.scalar_type());
  }
  return out;
}

}  // namespace detail
}  // namespace fusedlinear
