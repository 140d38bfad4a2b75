#include "modules/loader/state_dict.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>

namespace fusedlinear {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out.empty() ? "(none)" : out;
}

std::string shape_string(torch::IntArrayRef sizes) {
  std::ostringstream s;
  s << sizes;
  return s.str();
}

std::vector<std::string> keys_of(const NamedTensors& file) {
  std::vector<std::string> keys;
  for (const auto& item : file.tensors) keys.push_back(item.first);
  return keys;
}

// A model's parameters, then its buffers, by state-dict key.
std::vector<std::pair<std::string, torch::Tensor>> named_state(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    state.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true))
    state.emplace_back(item.key(), item.value());
  return state;
}

}  // namespace

std::string conversion_loss(const torch::Tensor& tensor, c10::ScalarType to) {
  const c10::ScalarType from = tensor.scalar_type();
  if (tensor.numel() == 0) return "";
  if (c10::isComplexType(from) && !c10::isComplexType(to)) {
    return "the imaginary part would be dropped (save tensor.real if only it is meant)";
  }
  const bool float_from = c10::isFloatingType(from) || c10::isComplexType(from);
  const bool float_to = c10::isFloatingType(to) || c10::isComplexType(to);
  if (float_from && !float_to) return "floating-point values would be cut to integers";
  if (float_from) {
    const int64_t overflows =
        (torch::isfinite(tensor) & ~torch::isfinite(tensor.to(to))).sum().item<int64_t>();
    if (overflows == 0) return "";
    return std::to_string(overflows) + " finite values beyond its range would become infinite";
  }
  // Integers (and bools): every value must come through exactly.
  const torch::Tensor values = tensor.to(torch::kLong);
  const int64_t low = values.min().item<int64_t>(), high = values.max().item<int64_t>();
  int64_t min_to = 0, max_to = 0;
  switch (to) {
    case c10::ScalarType::Bool:
      max_to = 1;
      break;
    case c10::ScalarType::Byte:
      max_to = 255;
      break;
    case c10::ScalarType::Char:
      min_to = -128, max_to = 127;
      break;
    case c10::ScalarType::Short:
      min_to = INT16_MIN, max_to = INT16_MAX;
      break;
    case c10::ScalarType::Int:
      min_to = INT32_MIN, max_to = INT32_MAX;
      break;
    case c10::ScalarType::Long:
      return "";
    default: {  // a float: integers up to 2^53 compared exactly through float64
      constexpr int64_t kExact = int64_t{1} << 53;
      const torch::Tensor exact = values.to(torch::kDouble);
      const bool same = low >= -kExact && high <= kExact &&
                        torch::equal(exact.to(c10::toRealValueType(to)).to(torch::kDouble), exact);
      if (same) return "";
      return "integer values from " + std::to_string(low) + " to " + std::to_string(high) +
             " would not all come through exactly";
    }
  }
  if (low >= min_to && high <= max_to) return "";
  return "values from " + std::to_string(low) + " to " + std::to_string(high) +
         " do not fit its range " + std::to_string(min_to) + " to " + std::to_string(max_to);
}

std::vector<std::string> state_dict_keys(torch::nn::Module& model) {
  std::vector<std::string> keys;
  for (const auto& item : named_state(model)) keys.push_back(item.first);
  return keys;
}

std::string strip_attribute_prefix(NamedTensors& file, const std::vector<ModelKeys>& models) {
  const std::optional<StrippedKeys> stripped = attribute_prefix(keys_of(file), models);
  if (!stripped) return "";
  for (size_t i = 0; i < stripped->keys.size(); ++i) file.tensors[i].first = stripped->keys[i];
  file.notices.insert(file.notices.end(), stripped->notices.begin(), stripped->notices.end());
  return stripped->prefix;
}

std::string strip_prefix_hint(const NamedTensors& file, const std::vector<ModelKeys>& models) {
  return fusedlinear::strip_prefix_hint(keys_of(file), models);
}

std::vector<std::string> apply_state_dict(torch::nn::Module& model, const NamedTensors& file,
                                          const std::string& source, bool strict) {
  std::vector<std::string> notices = file.notices;
  std::map<std::string, torch::Tensor> targets;
  std::vector<std::string> expected_keys;
  for (const auto& [key, tensor] : named_state(model)) {
    targets[key] = tensor;
    expected_keys.push_back(key);
  }

  std::vector<std::string> file_keys, unexpected;
  std::map<std::string, const torch::Tensor*> found;
  for (const auto& [key, tensor] : file.tensors) {
    file_keys.push_back(key);
    if (targets.count(key)) {
      found[key] = &tensor;
    } else {
      unexpected.push_back(key);
    }
  }
  std::vector<std::string> missing;
  for (const auto& key : expected_keys) {
    if (!found.count(key)) missing.push_back(key);
  }
  if (strict && !missing.empty()) {
    throw LoadError(source + ": missing key(s) " + join(missing) + "; the file has " +
                    join(file_keys) + strip_prefix_hint(file, {{"the model", expected_keys}}));
  }
  if (strict && !unexpected.empty()) {
    throw LoadError(source + ": unexpected key(s) " + join(unexpected) + "; the model expects " +
                    join(expected_keys) + " (--no-strict ignores them)");
  }
  if (!missing.empty())
    notices.push_back("not in " + source + ", kept as initialised: " + join(missing));
  if (!unexpected.empty()) notices.push_back("ignored from " + source + ": " + join(unexpected));

  // Check every shape before changing anything, so a failed load leaves the model untouched.
  // Model order (Python's state-dict order), so messages list keys as Python would.
  for (const auto& key : expected_keys) {
    const auto it = found.find(key);
    if (it == found.end()) continue;
    const torch::Tensor& target = targets[key];
    if (it->second->sizes() != target.sizes()) {
      throw LoadError(source + ": " + key + " has shape " + shape_string(it->second->sizes()) +
                      ", expected " + shape_string(target.sizes()));
    }
    if (it->second->scalar_type() == target.scalar_type()) continue;
    const std::string loss = conversion_loss(*it->second, target.scalar_type());
    if (!loss.empty()) {
      std::ostringstream s;
      s << source << ": " << key << ": cannot convert " << it->second->scalar_type()
        << " to the model's " << target.scalar_type() << ": " << loss;
      throw LoadError(s.str());
    }
  }
  std::vector<std::string> converted;
  torch::NoGradGuard no_grad;
  for (const auto& key : expected_keys) {
    const auto it = found.find(key);
    if (it == found.end()) continue;
    const torch::Tensor& tensor = *it->second;
    torch::Tensor& target = targets[key];
    if (tensor.scalar_type() != target.scalar_type()) {
      std::ostringstream s;
      s << key << " " << tensor.scalar_type() << "->" << target.scalar_type();
      converted.push_back(s.str());
    }
    target.copy_(tensor);
  }
  if (!converted.empty()) notices.push_back("converted dtype: " + join(converted));
  return notices;
}

std::vector<std::string> load_state_dict(torch::nn::Module& model, const std::string& path,
                                         const LoadOptions& options) {
  NamedTensors file = read_state_dict(path, options.weights_key, options.strip_prefix);
  if (options.strip_prefix.empty())
    strip_attribute_prefix(file, {{"the model", state_dict_keys(model)}});
  return apply_state_dict(model, file, path, options.strict);
}

}  // namespace fusedlinear
