// What the ops' implementations and entry points share (ops.cpp, ops_cpu.cpp, ops_cuda.cpp,
// model_op.cpp): the ops' names, the checks of the epilogue's inputs, their messages, the chain an
// op's `chain` argument names, and the call of an op below autograd.
#pragma once

#include <ATen/core/LegacyTypeDispatch.h>  // AutoDispatchBelowADInplaceOrView
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/types.h>

#include <string>
#include <type_traits>
#include <utility>

#include "kernels/ops/chain_registry.h"

namespace fusedlinear {
namespace detail {

// The ops' names, as the schemas (ops.cpp) declare them and their messages say them.
inline constexpr const char* kEpilogueOp = "fusedlinear::epilogue";
inline constexpr const char* kLinearEpilogueOp = "fusedlinear::linear_epilogue";
inline constexpr const char* kGemmEpilogueOp = "fusedlinear::gemm_epilogue";
inline constexpr const char* kSplitBf16Op = "fusedlinear::split_bf16";
inline constexpr const char* kSplitBf16ThreeOp = "fusedlinear::split_bf16_three";
inline constexpr const char* kLinearBf16x6Op = "fusedlinear::linear_bf16x6";
inline constexpr const char* kLinearBf16x3Op = "fusedlinear::linear_bf16x3";
inline constexpr const char* kLinearBf16Op = "fusedlinear::linear_bf16";
inline constexpr const char* kLinearTf32Op = "fusedlinear::linear_tf32";
inline constexpr const char* kModelOp = "fusedlinear::model";

// The ops' messages, joined as strings (std::to_string for numbers) rather than through an
// ostream, which TORCH_CHECK's several-argument form builds in this library: in a Python process
// that has loaded PyTorch 2.11, this library's ostream code crashed (docs/RESULTS.md, "Tests").
// TORCH_CHECK(cond, text(...)) passes one string, which c10 takes as it is.
inline void append_text(std::string& s, const char* v) { s += v; }
inline void append_text(std::string& s, const std::string& v) { s += v; }
inline void append_text(std::string& s, c10::string_view v) { s.append(v.data(), v.size()); }
template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
void append_text(std::string& s, I v) {
  s += std::to_string(v);
}
// Sizes as the checks read them (sym_size, sym_sizes), printed as c10 prints shapes ([2, 3]):
// symbolic under torch.compile's fake tensors, where a failing check prints the size it was
// traced with.
inline void append_text(std::string& s, const c10::SymInt& v) {
  s += std::to_string(v.guard_int(__FILE__, __LINE__));
}
inline void append_text(std::string& s, c10::SymIntArrayRef shape) {
  s += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    append_text(s, shape[i]);
  }
  s += ']';
}
inline void append_text(std::string& s, c10::ScalarType dtype) { s += c10::toString(dtype); }
inline void append_text(std::string& s, const c10::Device& device) { s += device.str(); }

template <class... Parts>
std::string text(const Parts&... parts) {
  std::string s;
  (append_text(s, parts), ...);
  return s;
}

// The ops' `params` (Tensor[]?, ops.cpp says why): a missing list is an empty one.
using OptionalTensors = c10::optional<at::TensorList>;
inline at::TensorList listed(const OptionalTensors& params) {
  return params.value_or(at::TensorList());
}

void check_epilogue_inputs(const char* op, c10::DeviceType device, const torch::Tensor& y,
                           const c10::optional<torch::Tensor>& bias,
                           c10::ArrayRef<torch::Tensor> params, size_t chain_params,
                           const c10::optional<torch::Tensor>& gate = c10::nullopt);

// op(args...) from the library's C++ entry points, below autograd as the ops' Autograd kernel
// (ops.cpp: run_below_autograd) runs it, without that kernel's boxed re-dispatch, which converts
// every argument to an IValue and back: the same kernel and result, less host time a call.
template <class Op, class... Args>
auto call_below_autograd(const Op& op, Args&&... args) {
  const at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

// The op named kName, its schema's handle typed as Signature (looked up at the first call), called
// with args below autograd: what each of the library's C++ entry points (ops.h) does.
template <const char* const& kName, class Signature, class... Args>
auto call_op(Args&&... args) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kName, "").template typed<Signature>();
  return call_below_autograd(op, std::forward<Args>(args)...);
}

// find_chain, its ChainSpecError as the op's error.
const ChainEntry& chain_for(const char* op, c10::string_view chain);

}  // namespace detail
}  // namespace fusedlinear
