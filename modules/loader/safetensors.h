// The .safetensors format: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian tensor bytes. Parsed and checked here; the caller copies the bytes out.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "modules/loader/zip_reader.h"

namespace fusedlinear {

struct SafetensorsEntry {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of the tensor's bytes in the whole file
  uint64_t size = 0;    // numel * element size, checked
};

// Whether `data` starts like a safetensors file (a plausible header length, then '{').
bool looks_like_safetensors(const uint8_t* data, size_t size);

// The tensors of the safetensors file `data[0, size)`, sorted by name (the order
// safetensors.torch.load_file returns), checked as the format says: every key once, each
// tensor's data_offsets in order and matching its shape and dtype, and the tensors covering the
// data section exactly, without overlap or gap. `metadata`, if given, receives the header's
// __metadata__ (text to text). Throws FormatError.
std::vector<SafetensorsEntry> parse_safetensors(
    const uint8_t* data, size_t size, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace fusedlinear
