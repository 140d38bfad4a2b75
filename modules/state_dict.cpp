#include "state_dict.h"

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

}  // namespace

std::vector<std::string> apply_state_dict(torch::nn::Module& model, const NamedTensors& file,
                                          const std::string& source, bool strict) {
  std::vector<std::string> notices = file.notices;
  std::map<std::string, torch::Tensor> targets;
  std::vector<std::string> expected_keys;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    targets[item.key()] = item.value();
    expected_keys.push_back(item.key());
  }
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    targets[item.key()] = item.value();
    expected_keys.push_back(item.key());
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
                    join(file_keys));
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
  return apply_state_dict(model, read_state_dict(path, options.weights_key), path, options.strict);
}

}  // namespace fusedlinear
