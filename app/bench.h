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

// "1,8,64" -> {1, 8, 64}. Throws UsageError naming `option` on anything else.
inline std::vector<int64_t> parse_batches(const std::string& text,
                                          const std::string& option = "--batches") {
  const auto bad = [&] {
    return UsageError(option + ": expected positive integers separated by commas, got '" + text +
                      "'");
  };
  std::vector<int64_t> batches;
  for (const auto& part : split_commas(text)) {
    if (part.empty() || part.size() > 12 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw bad();
    }
    const int64_t value = std::stoll(part);
    if (value <= 0) throw bad();
    batches.push_back(value);
  }
  return batches;
}

// "float32,bfloat16" -> {kFloat32, kBFloat16}. Throws UsageError naming `option` otherwise.
inline std::vector<torch::ScalarType> parse_dtypes(const std::string& text,
                                                   const std::string& option = "--dtypes") {
  std::vector<torch::ScalarType> dtypes;
  for (const auto& part : split_commas(text)) {
    if (part == "float32") {
      dtypes.push_back(torch::kFloat32);
    } else if (part == "float16") {
      dtypes.push_back(torch::kFloat16);
    } else if (part == "bfloat16") {
      dtypes.push_back(torch::kBFloat16);
    } else {
      throw UsageError(option +
                       ": expected float32, float16 or bfloat16 separated by commas, got '" + text +
                       "'");
    }
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

// allclose-style tolerances of the fused-vs-eager chain check, per dtype: 1e-4 in float32
// (shared/SPEC.md); the half types differ by design, since eager rounds after every op and the
// fused op once at the end: a few units in the last place of 11 (fp16) or 8 (bf16) bits.
inline double chain_tolerance(torch::ScalarType dtype) {
  if (dtype == torch::kFloat16) return 1e-2;
  if (dtype == torch::kBFloat16) return 5e-2;
  return 1e-4;
}

}  // namespace bench
}  // namespace fusedlinear
