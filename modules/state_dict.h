// Putting a state dict read from a file (torch_file.h) into a model: key matching, shape
// checks, dtype conversion, and the messages a user needs when something does not fit.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "torch_file.h"

namespace fusedlinear {

struct LoadOptions {
  // Missing or unexpected keys are errors when strict; otherwise they are listed in notices.
  bool strict = true;
  // For checkpoints holding several candidate dicts (read_state_dict's weights_key).
  std::string weights_key;
};

// Loads `path` into `model`'s parameters and buffers (converted to their dtype and device).
// Returns the notices to show the user once (conversions, keys ignored, prefixes stripped).
// Throws LoadError naming the file and the problem.
std::vector<std::string> load_state_dict(torch::nn::Module& model, const std::string& path,
                                         const LoadOptions& options = {});

// The same, from tensors already read; `source` names them in messages (usually the path).
std::vector<std::string> apply_state_dict(torch::nn::Module& model, const NamedTensors& file,
                                          const std::string& source, bool strict = true);

}  // namespace fusedlinear
