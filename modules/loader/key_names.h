// State-dict key names: the one place their rules are written. A Linear's keys from its
// attribute path and back ("fc1" <-> "fc1.weight", "fc1.bias"), a bare nn.Linear's keys
// ("weight", "bias"), and the prefixes that come off every key: --strip-prefix's, the training
// wrappers' ("module.", "_orig_mod."), a training module's attribute prefix (Lightning's
// "model."), and the hint that names a prefix to strip. Plain strings, no tensors: the loader
// (torch_file, state_dict) and the program (app/model_setup.cpp) call these.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fusedlinear {

// The keys of the Linear at attribute path `path`: "fc1.weight" and "fc1.bias"; a bare
// nn.Linear's (path "") are "weight" and "bias".
std::string weight_key(const std::string& path);
std::string bias_key(const std::string& path);
// The attribute path of the Linear whose weight `key` is ("fc1" for "fc1.weight", "" for a bare
// Linear's "weight"); nullopt for a key that is not a weight's ("fc1.bias", "xweight").
std::optional<std::string> weight_path(const std::string& key);

// The path the program gives a bare nn.Linear's keys ("weight", "bias" -> "linear.weight",
// "linear.bias"): the one-Linear models' and --chain's Linear.
inline constexpr const char* kBareLinearPath = "linear";
// Whether `keys` are a bare nn.Linear's: "weight", and "bias" or not, nothing else.
bool is_bare_linear(const std::vector<std::string>& keys);

// Whether `key` starts with `prefix` and has more after it.
bool under_prefix(const std::string& key, const std::string& prefix);
// --strip-prefix's text as a prefix of whole components: a final '.' added where missing.
std::string as_key_prefix(std::string prefix);
// Removes `prefix` from every key under it (under_prefix); returns how many.
size_t strip_key_prefix(std::vector<std::string>& keys, const std::string& prefix);
// The longest prefix of whole components ("a.b.") that every key starts with; never a whole key.
std::string common_key_prefix(const std::vector<std::string>& keys);

// The prefixes training wrappers put before every key, removed from `keys` while every key
// starts with one, nested in any order: "module." (DataParallel, DistributedDataParallel) and
// "_orig_mod." (torch.compile). Returns a notice for each removal.
std::vector<std::string> strip_wrapper_prefixes(std::vector<std::string>& keys);

// A model's name and state-dict keys, for attribute_prefix and strip_prefix_hint.
using ModelKeys = std::pair<std::string, std::vector<std::string>>;

// A training module's attribute prefix found in keys: the prefix, the keys without it (and
// without the wrappers' prefixes after it) and the notices that say so.
struct StrippedKeys {
  std::string prefix;
  std::vector<std::string> keys;
  std::vector<std::string> notices;
};
// When every key starts with the same components, and removing the first one or more of them
// (and any "module." / "_orig_mod." after them) leaves exactly the keys of one of `models`, no
// more and no fewer: that removal. nullopt when the keys fit a model as they are, or no prefix
// makes them one model's.
std::optional<StrippedKeys> attribute_prefix(const std::vector<std::string>& keys,
                                             const std::vector<ModelKeys>& models);

// For keys that do not fit `models`: " (...; pass --strip-prefix P)" naming the prefix under
// which some model's keys all are, or else the longest prefix of whole components that every
// key shares; "" when there is neither.
std::string strip_prefix_hint(const std::vector<std::string>& keys,
                              const std::vector<ModelKeys>& models);

}  // namespace fusedlinear
