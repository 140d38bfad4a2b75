// CPU implementations of the split-precision linear ops: the split is the CUDA kernel's own
// function (bf16_split.h), and the tensor-core products are emulated: products of bfloat16 (or
// TF32) operands are exact in float32, so float32 matrix products of the parts, summed in the
// order the GPU sums them, give what the tensor cores compute up to the order of accumulation.
// For testing the modes without a GPU: slower than x W^T itself.
#include <ATen/Parallel.h>

#include "kernels/math/bf16_split.h"
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
  at::parallel_for(0, v.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (third_bits) {
        const split::Bf16Triple parts = split::split_bf16_three(values[i]);
        hi_bits[i] = parts.hi;
        lo_bits[i] = parts.mid;
        third_bits[i] = parts.lo;
        continue;
      }
      const split::Bf16Pair parts = split::split_bf16(values[i]);
      hi_bits[i] = parts.hi;
      if (lo_bits) lo_bits[i] = parts.lo;
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

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> split_bf16_cpu(const torch::Tensor& v) {
  check_split_input("fusedlinear::split_bf16", c10::DeviceType::CPU, v);
  const torch::Tensor input = v.contiguous();
  torch::Tensor hi = empty_bf16_like(input), lo = empty_bf16_like(input);
  split_into(input, hi, &lo);
  return {hi, lo};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> split_bf16_three_cpu(
    const torch::Tensor& v) {
  check_split_input("fusedlinear::split_bf16_three", c10::DeviceType::CPU, v);
  const torch::Tensor input = v.contiguous();
  torch::Tensor hi = empty_bf16_like(input), mid = empty_bf16_like(input),
                lo = empty_bf16_like(input);
  split_into(input, hi, &mid, &lo);
  return {hi, mid, lo};
}

// Each product on its own, then added, smallest first: as the GPU's beta = 1 accumulation.
torch::Tensor linear_bf16x3_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_lo) {
  check_linear_inputs("fusedlinear::linear_bf16x3", c10::DeviceType::CPU, x, w_hi, torch::kBFloat16,
                      &w_lo);
  const torch::Tensor x_rows = linear_rows(x);
  torch::Tensor x_hi = empty_bf16_like(x_rows), x_lo = empty_bf16_like(x_rows);
  split_into(x_rows, x_hi, &x_lo);
  const torch::Tensor xh = x_hi.to(torch::kFloat32), xl = x_lo.to(torch::kFloat32);
  const torch::Tensor wh = w_hi.to(torch::kFloat32).t(), wl = w_lo.to(torch::kFloat32).t();
  torch::Tensor y = torch::mm(xl, wh);
  y += torch::mm(xh, wl);
  y += torch::mm(xh, wh);
  return y.view(linear_output_shape(x.sizes(), w_hi.size(0)));
}

// The six products of gemm_bf16_parts with three parts, in its order: those of parts i and j with
// i + j = 2 (the smallest), then 1, then hi hi.
torch::Tensor linear_bf16x6_cpu(const torch::Tensor& x, const torch::Tensor& w_hi,
                                const torch::Tensor& w_mid, const torch::Tensor& w_lo) {
  check_linear_inputs("fusedlinear::linear_bf16x6", c10::DeviceType::CPU, x, w_hi, torch::kBFloat16,
                      &w_mid, &w_lo);
  const torch::Tensor x_rows = linear_rows(x);
  torch::Tensor x_hi = empty_bf16_like(x_rows), x_mid = empty_bf16_like(x_rows),
                x_lo = empty_bf16_like(x_rows);
  split_into(x_rows, x_hi, &x_mid, &x_lo);
  const torch::Tensor xp[3] = {x_hi.to(torch::kFloat32), x_mid.to(torch::kFloat32),
                               x_lo.to(torch::kFloat32)};
  const torch::Tensor wp[3] = {w_hi.to(torch::kFloat32).t(), w_mid.to(torch::kFloat32).t(),
                               w_lo.to(torch::kFloat32).t()};
  torch::Tensor y;
  for (int order = 2; order >= 0; --order) {
    for (int i = order; i >= 0; --i) {
      const torch::Tensor product = torch::mm(xp[i], wp[order - i]);
      if (y.defined()) {
        y += product;
      } else {
        y = product;
      }
    }
  }
  return y.view(linear_output_shape(x.sizes(), w_hi.size(0)));
}

torch::Tensor linear_bf16_cpu(const torch::Tensor& x, const torch::Tensor& w_hi) {
  check_linear_inputs("fusedlinear::linear_bf16", c10::DeviceType::CPU, x, w_hi, torch::kBFloat16);
  const torch::Tensor x_rows = linear_rows(x);
  torch::Tensor x_hi = empty_bf16_like(x_rows);
  split_into(x_rows, x_hi, nullptr);
  const torch::Tensor y = torch::mm(x_hi.to(torch::kFloat32), w_hi.to(torch::kFloat32).t());
  return y.view(linear_output_shape(x.sizes(), w_hi.size(0)));
}

torch::Tensor linear_tf32_cpu(const torch::Tensor& x, const torch::Tensor& w) {
  check_linear_inputs("fusedlinear::linear_tf32", c10::DeviceType::CPU, x, w, torch::kFloat32);
  const torch::Tensor y =
      torch::mm(rounded_to_tf32(linear_rows(x)), rounded_to_tf32(w.contiguous()).t());
  return y.view(linear_output_shape(x.sizes(), w.size(0)));
}

}  // namespace detail
}  // namespace fusedlinear
