// Helpers of `fusedlinear bench` (bench.cpp) small enough to live here, so that the tests can
// use them without the rest of the program.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "app/cli.h"

namespace fusedlinear {
namespace bench {

inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

// "1,8,64" -> {1, 8, 64}, each in 1..kMaxCount. Throws UsageError naming `option` otherwise.
inline std::vector<int64_t> parse_batches(const std::string& text,
                                          const std::string& option = "--batches") {
  std::vector<int64_t> batches;
  for (const auto& part : split_commas(text)) {
    try {
      batches.push_back(parse_integer(option, part, 1, kMaxCount));
    } catch (const UsageError&) {
      throw UsageError(option + ": expected positive integers up to " + std::to_string(kMaxCount) +
                       ", separated by commas, got '" + text + "'");
    }
  }
  return batches;
}

// "float32,bfloat16" -> {kFloat32, kBFloat16}. Throws UsageError naming `option` otherwise.
inline std::vector<torch::ScalarType> parse_dtypes(const std::string& text,
                                                   const std::string& option = "--dtypes") {
  std::vector<torch::ScalarType> dtypes;
  for (const auto& part : split_commas(text)) {
    const auto dtype = dtype_named(part);
    if (!dtype) {
      throw UsageError(option +
                       ": expected float32, float16 or bfloat16 separated by commas, got '" + text +
                       "'");
    }
    dtypes.push_back(*dtype);
  }
  return dtypes;
}

// How many buffers of `bytes` each to rotate among so that the set covers ~4x the last-level
// cache (`cache_bytes`), keeping the set under 1 GiB where it can: between 2 and 64.
inline int rotation_count(int64_t bytes, int64_t cache_bytes) {
  const int64_t per = std::max<int64_t>(bytes, 1);
  int64_t n = (4 * cache_bytes + per - 1) / per;
  n = std::min<int64_t>(n, (int64_t{1} << 30) / per);
  return int(std::clamp<int64_t>(n, 2, 64));
}

// The bytes one configuration of bench certainly holds at once, beside the models' weights:
// its rotating inputs and GEMM outputs (rotation_count of each), eager's output with a
// temporary, one fused output, and the float64 reference (x, W, its output and a temporary).
// In double: the shapes' bytes may not fit in 64 bits.
inline double batch_bytes(int64_t batch, int64_t in_features, int64_t out_features,
                          int64_t element_size, int64_t cache_bytes) {
  const auto rotated = [&](int64_t features) {
    const double one = double(batch) * double(features) * double(element_size);
    // rotation_count takes int64; beyond 2^62 bytes a buffer is certainly too large anyway.
    const int count = one < 4e18 ? rotation_count(int64_t(one), cache_bytes) : 2;
    return one * count;
  };
  const double rows_out = double(batch) * double(out_features);
  return rotated(in_features) + rotated(out_features) + 3 * rows_out * double(element_size) +
         8 * (double(batch) * double(in_features) + double(in_features) * double(out_features) +
              2 * rows_out);
}

}  // namespace bench
}  // namespace fusedlinear
