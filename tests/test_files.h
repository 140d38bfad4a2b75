// Files the tests write as Python's tools would: a state dict as torch.save writes it, a
// .safetensors file, and the metadata weights/fx_chain.py's save_with_chain puts in one.
#pragma once

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace fusedlinear {
namespace testing_support {

// A state dict torch.save would write, through libtorch's pickler, the tensors in their dtypes.
inline void save_state_dict(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, tensor] : tensors) dict.insert(key, tensor);
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// A .safetensors file of float32 tensors (little-endian, as x86 holds them), with `metadata` as
// its __metadata__ where given.
inline void write_safetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  std::string header = "{", data;
  if (!metadata.empty()) header += "\"__metadata__\":" + nlohmann::json(metadata).dump();
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.to(torch::kFloat32).contiguous();
    std::string shape;
    for (const int64_t size : t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(size);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + name +
              "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(data.size()) + "," + std::to_string(data.size() + t.nbytes()) + "]}";
    data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  header += "}";
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << length << header << data;
}

// The metadata weights/fx_chain.py writes for a model of one Linear at `linear`.
inline std::map<std::string, std::string> chain_metadata(const std::string& chain,
                                                         const std::string& linear = "fc",
                                                         const std::string& version = "1") {
  return {{"fusedlinear.version", version},
          {"fusedlinear.chain", chain},
          {"fusedlinear.linear", linear}};
}

}  // namespace testing_support
}  // namespace fusedlinear
