// Putting a state dict read from a file (torch_file.h) into a model: key matching, shape
// checks, dtype conversion, and the messages a user needs when something does not fit.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "modules/loader/key_names.h"
#include "modules/loader/torch_file.h"

namespace fusedlinear {

struct LoadOptions {
  // Missing or unexpected keys are errors when strict; otherwise they are listed in notices.
  bool strict = true;
  // For checkpoints holding several candidate dicts (read_state_dict's weights_key).
  std::string weights_key;
  // Removed from the file's keys first (read_state_dict's strip_prefix). When empty, a
  // training wrapper's attribute prefix is removed where strip_attribute_prefix finds one.
  std::string strip_prefix;
};

// A model's state-dict keys: its parameters', then its buffers', in its order.
std::vector<std::string> state_dict_keys(torch::nn::Module& model);

// A training wrapper's attribute prefix, e.g. PyTorch Lightning's `model.` (a LightningModule
// holding the network as `self.model` saves `model.linear.weight`), removed from `file`'s keys
// with a notice where attribute_prefix (key_names.h, ModelKeys there) finds one. Returns the
// prefix removed, or "".
std::string strip_attribute_prefix(NamedTensors& file, const std::vector<ModelKeys>& models);

// For a file whose keys do not fit `models`: key_names.h's strip_prefix_hint of its keys.
std::string strip_prefix_hint(const NamedTensors& file, const std::vector<ModelKeys>& models);

// Why converting `tensor` to `to` would lose more than rounding ("" when it would not): the
// imaginary part of complex values, the fractions of floats made integers, integers the target
// does not hold (out of its range, or beyond where a float holds integers exactly), finite
// floats that would become infinite. Rounding to a narrower float (float64 -> float32) is the
// usual conversion and only noted. The check of weights (apply_state_dict) and of inputs.
std::string conversion_loss(const torch::Tensor& tensor, c10::ScalarType to);

// Loads `path` into `model`'s parameters and buffers (converted to their dtype and device).
// Returns the notices to show the user once (conversions, keys ignored, prefixes stripped).
// Throws LoadError naming the file and the problem (missing keys with strip_prefix_hint, or a
// conversion that would lose more than rounding: complex to real, floats to integers, values
// out of the target's range), leaving the model as it was.
std::vector<std::string> load_state_dict(torch::nn::Module& model, const std::string& path,
                                         const LoadOptions& options = {});

// The same, from tensors already read; `source` names them in messages (usually the path).
std::vector<std::string> apply_state_dict(torch::nn::Module& model, const NamedTensors& file,
                                          const std::string& source, bool strict = true);

}  // namespace fusedlinear
