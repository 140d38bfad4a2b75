// Reading and writing the files PyTorch users exchange: torch.save archives and safetensors.
//
// The reader parses the zip container and the pickle inside it itself, executes nothing from
// the file, accepts only an allow-list of pickle globals, and bounds-checks every size,
// offset and stride before touching memory. Every failure is a LoadError whose message is
// one line naming the file and what is wrong.
#pragma once

#include <torch/types.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "modules/loader/key_names.h"  // strip_wrapper_prefixes, read_state_dict's rules

namespace fusedlinear {

struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Name -> tensor, in file order (CPU tensors, in the dtype the file holds).
struct NamedTensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  // One line each for anything the reader changed or chose that the user should hear about
  // (e.g. "took the state dict under key 'model_state_dict'", "stripped prefix 'module.'").
  std::vector<std::string> notices;
  // Text the file carries for fusedlinear beside the tensors: from a torch.save'd state dict (an
  // OrderedDict) the string entries of its _metadata["fusedlinear"] dict; from a .safetensors
  // file, the __metadata__ entries named "fusedlinear.<key>" (prefix removed). E.g. "chain",
  // "linear".
  std::map<std::string, std::string> metadata;
};

// Reads a state dict from `path`: a torch.save archive (dict or OrderedDict of tensors, or a
// checkpoint dict holding one under `weights_key` or an unambiguous well-known key) or a
// .safetensors file, with its metadata (NamedTensors::metadata: each value at most 64 KiB, an
// int kept as its decimal text, any other kind an error). Then `strip_prefix` (--strip-prefix;
// a final '.' is added if missing), if given, comes off every key that starts with it (none
// doing so is an error), and the prefixes of training wrappers come off as
// strip_wrapper_prefixes (key_names.h) says; each with a notice. The file is read whole into
// memory; one that is not a regular file, or that changes while it is read, is refused. Throws
// LoadError.
NamedTensors read_state_dict(const std::string& path, const std::string& weights_key = "",
                             const std::string& strip_prefix = "");

// The version of the metadata's fields (docs/CHAINS.md) this program reads: the one
// weights/fx_chain.py writes (an int in a .pt file, which reads as this text; this text in a
// .safetensors file).
inline constexpr const char* kMetadataVersion = "1";

// Throws LoadError, one line starting with `source`, when `file` carries metadata (any entry)
// whose "version" is missing or other than kMetadataVersion exactly ("01", " 1" and "2" too):
// fields of another version may mean something else.
void check_metadata_version(const NamedTensors& file, const std::string& source);

// Reads a single tensor written by torch.save(tensor, path). Throws LoadError.
torch::Tensor read_tensor(const std::string& path);

// Writes `tensor` so that torch.load(path) in Python returns it, through an OutputFile
// (output_file.h): an existing regular file is replaced only when `overwrite` is set, anything
// else never. Throws OutputError.
void write_tensor(const torch::Tensor& tensor, const std::string& path, bool overwrite = false);

}  // namespace fusedlinear
