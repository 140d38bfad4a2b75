// CPU implementations of the split-precision linear ops, beside the CUDA ones (ops_cuda.cpp); the
// epilogue ops' are in ops.cpp, with their Meta twins. The split is the CUDA kernel's own
// function (bf16_split.h), and the tensor-core products are emulated: products of bfloat16 (or
// TF32) operands are exact in float32, so float32 matrix products of the parts, summed in the
// order the GPU sums them, give what the tensor cores compute up to the order of accumulation.
// For testing the modes without a GPU: slower than x W^T itself.
#include <ATen/Parallel.h>

#include <vector>

#include "kernels/math/bf16_split.h"
#include "kernels/ops/op_support.h"
#include "kernels/ops/ops.h"

namespace fusedlinear {
namespace detail {
namespace {

// hi (and lo, where given) of every value of the contiguous float32 tensor v; with `third` too,
// the three-way split's hi, mid (in lo) and lo (in third).
void split_into(const torch::Tensor& v, torch::Tensor& hi, torch::Tensor* lo,
                torch::Tensor* third = nullptr) {
  const float* values = v.data_ptr<float>();
  auto* hi_bits = reinterpret_cast<uint16_t*>(hi.data_ptr());
  uint16_t* lo_bits = lo ? reinterpret_cast<uint16_t*>(lo->data_ptr()) : nullptr;
  uint16_t* third_bits = third ? reinterpret_cast<uint16_t*>(third->data_ptr()) : nullptr;
  const int parts = third_bits ? 3 : lo_bits ? 2 : 1;
  at::parallel_for(0, v.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const split::Bf16Triple split = split::split_into_parts(values[i], parts);
      hi_bits[i] = split.hi;
      if (lo_bits) lo_bits[i] = split.mid;
      if (third_bits) third_bits[i] = split.lo;
    }
  });
}

torch::Tensor empty_bf16_like(const torch::Tensor& v) {
  return torch::empty(v.sizes(), v.options().dtype(torch::kBFloat16));
}

// v rounded to TF32 (10 significand bits, to nearest even), as a float32 value.
float to_tf32(float v) {
  const uint32_t bits = split::bits_of(v);
  if ((bits & 0x7fffffffu) >= 0x7f800000u) return v;  // +-inf, NaN
  return split::float_of((bits + 0xfffu + ((bits >> 13) & 1u)) & ~0x1fffu);
}

torch::Tensor rounded_to_tf32(const torch::Tensor& v) {
  torch::Tensor out = torch::empty_like(v);
  const float* in = v.data_ptr<float>();
  float* result = out.data_ptr<float>();
  at::parallel_for(0, v.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) result[i] = to_tf32(in[i]);
  });
  return out;
}

// v's bfloat16 parts, two or three (split_into), after the split ops' check.
std::vector<torch::Tensor> split_parts_cpu(const char* op, const torch::Tensor& v, int parts) {
  check_split_input(op, c10::DeviceType::CPU, v);
  const torch::Tensor input = v.contiguous();
  std::vector<torch::Tensor> out(static_cast<size_t>(parts));
  for (torch::Tensor& part : out) part = empty_bf16_like(input);
  split_into(input, out[0], &out[1], parts == 3 ? &out[2] : nullptr);
  return out;
}

// The sums of y [rows, out] that came out inf or NaN, formed again as eager's
// (split::eager_sum_if_not_finite); finite ones are left as they are. x_rows contiguous.
void restore_non_finite_sums(torch::Tensor& y, const torch::Tensor& x_rows,
                             const std::vector<torch::Tensor>& w_parts) {
  if (w_parts.size() < 2 || torch::isfinite(y).all().item<bool>()) return;
  std::vector<torch::Tensor> contiguous_parts;
  std::vector<const void*> parts;
  for (const torch::Tensor& part : w_parts) {
    contiguous_parts.push_back(part.contiguous());
    parts.push_back(contiguous_parts.back().data_ptr());
  }
  const int64_t out_features = y.size(1);
  const split::SplitOperands operands =
      split::split_operands(x_rows.data_ptr<float>(), parts.data(), int(parts.size()),
                            x_rows.size(1), out_features, /*w_input_major=*/false);
  float* sums = y.data_ptr<float>();
  at::parallel_for(0, y.numel(), int64_t{1} << 12, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      sums[i] =
          split::eager_sum_if_not_finite(operands, i / out_features, i % out_features, sums[i]);
    }
  });
}

// x W^T from W's bfloat16 parts (1: hi; 2: hi, lo; 3: hi, mid, lo), x split into as many: the
// products of gemm_bf16_parts in its order (parts i, j with i + j < parts, larger i + j first),
// each on its own and then added, as the GPU's beta = 1 accumulation; sums that come out inf or
// NaN then as eager's (restore_non_finite_sums).
torch::Tensor linear_bf16_parts_cpu(const char* op, const torch::Tensor& x,
                                    const std::vector<torch::Tensor>& w_parts) {
  const int parts = int(w_parts.size());
  check_linear_inputs(op, c10::DeviceType::CPU, x, w_parts[0], torch::kBFloat16,
                      parts > 1 ? &w_parts[1] : nullptr, parts > 2 ? &w_parts[2] : nullptr);
  const torch::Tensor x_rows = linear_rows(x);
  std::vector<torch::Tensor> x_split(static_cast<size_t>(parts));
  for (torch::Tensor& part : x_split) part = empty_bf16_like(x_rows);
  split_into(x_rows, x_split[0], parts > 1 ? &x_split[1] : nullptr,
             parts > 2 ? &x_split[2] : nullptr);
  // Each part in float32 once (exact), as the products' operands: x's [rows, in], W's [in, out].
  std::vector<torch::Tensor> xf, wf;
  for (int i = 0; i < parts; ++i) {
    xf.push_back(x_split[size_t(i)].to(torch::kFloat32));
    wf.push_back(w_parts[size_t(i)].to(torch::kFloat32).t());
  }
  torch::Tensor y;
  for (int order = parts - 1; order >= 0; --order) {
    for (int i = order; i >= 0; --i) {
      const torch::Tensor product = torch::mm(xf[size_t(i)], wf[size_t(order - i)]);
      if (y.defined()) {
        y += product;
      } else {
        y = product;
      }
    }
  }
  restore_non_finite_sums(y, x_rows, w_parts);
  return y.view(linear_output_shape(x.sizes(), w_parts[0].size(0)));
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> split_bf16_cpu(const torch::Tensor& v) {
  const std::vector<torch::Tensor> parts = split_parts_cpu(kSplitBf16Op, v, 2);
  return {parts[0], parts[1]};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three_cpu(
    const torch::Tensor& v) {
  const std::vector<torch::Tensor> parts = split_parts_cpu(kSplitBf16ThreeOp, v, 3);
  return {parts[0], parts[1], parts[2]};
}

torch::Tensor linear_bf16x6_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_mid, const torch::Tensor& w_lo) {
  return linear_bf16_parts_cpu(kLinearBf16x6Op, x, {w_hi, w_mid, w_lo});
}

torch::Tensor linear_bf16x3_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_lo) {
  return linear_bf16_parts_cpu(kLinearBf16x3Op, x, {w_hi, w_lo});
}

torch::Tensor linear_bf16_cpu(const torch::Tensor& x, const torch::Tensor& w_hi) {
  return linear_bf16_parts_cpu(kLinearBf16Op, x, {w_hi});
}

torch::Tensor linear_tf32_cpu(const torch::Tensor& x, const torch::Tensor& w) {
  check_linear_inputs(kLinearTf32Op, c10::DeviceType::CPU, x, w, torch::kFloat32);
  const torch::Tensor y =
      torch::mm(rounded_to_tf32(linear_rows(x)), rounded_to_tf32(w.contiguous()).t());
  return y.view(linear_output_shape(x.sizes(), w.size(0)));
}

}  // namespace detail
}  // namespace fusedlinear
