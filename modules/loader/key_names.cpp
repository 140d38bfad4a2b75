#include "modules/loader/key_names.h"

#include <algorithm>

namespace fusedlinear {
namespace {

const std::string kWeightSuffix = ".weight", kBiasSuffix = ".bias";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool same_keys(std::vector<std::string> a, std::vector<std::string> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

}  // namespace

std::string weight_key(const std::string& path) {
  return path.empty() ? "weight" : path + kWeightSuffix;
}

std::string bias_key(const std::string& path) { return path.empty() ? "bias" : path + kBiasSuffix; }

std::optional<std::string> weight_path(const std::string& key) {
  if (key == "weight") return std::string();
  if (key.size() > kWeightSuffix.size() &&
      key.compare(key.size() - kWeightSuffix.size(), kWeightSuffix.size(), kWeightSuffix) == 0) {
    return key.substr(0, key.size() - kWeightSuffix.size());
  }
  return std::nullopt;
}

bool is_bare_linear(const std::vector<std::string>& keys) {
  return same_keys(keys, {weight_key("")}) || same_keys(keys, {weight_key(""), bias_key("")});
}

bool under_prefix(const std::string& key, const std::string& prefix) {
  return starts_with(key, prefix) && key.size() > prefix.size();
}

std::string as_key_prefix(std::string prefix) {
  if (!prefix.empty() && prefix.back() != '.') prefix += '.';
  return prefix;
}

size_t strip_key_prefix(std::vector<std::string>& keys, const std::string& prefix) {
  size_t stripped = 0;
  for (auto& key : keys) {
    if (under_prefix(key, prefix)) {
      key.erase(0, prefix.size());
      ++stripped;
    }
  }
  return stripped;
}

std::string common_key_prefix(const std::vector<std::string>& keys) {
  if (keys.empty()) return "";
  std::string prefix = keys.front();
  for (const auto& key : keys) {
    size_t n = 0;
    while (n < prefix.size() && n < key.size() && prefix[n] == key[n]) ++n;
    prefix.resize(n);
  }
  // Whole components only, and never a whole key.
  const size_t dot = prefix.rfind('.');
  prefix.resize(dot == std::string::npos ? 0 : dot + 1);
  for (const auto& key : keys) {
    if (key.size() == prefix.size()) return "";
  }
  return prefix;
}

std::vector<std::string> strip_wrapper_prefixes(std::vector<std::string>& keys) {
  struct Wrapper {
    const char* prefix;
    const char* by;
  };
  static const Wrapper kWrappers[] = {
      {"module.", "saved from DataParallel or DistributedDataParallel"},
      {"_orig_mod.", "saved from a torch.compile'd model"}};
  std::vector<std::string> notices;
  if (keys.empty()) return notices;
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const Wrapper& wrapper : kWrappers) {
      const std::string prefix = wrapper.prefix;
      const bool all = std::all_of(keys.begin(), keys.end(), [&](const std::string& key) {
        return under_prefix(key, prefix);
      });
      if (!all) continue;
      for (auto& key : keys) key.erase(0, prefix.size());
      notices.push_back("stripped the prefix '" + prefix + "' from every key (" + wrapper.by + ")");
      stripped = true;
    }
  }
  return notices;
}

std::optional<StrippedKeys> attribute_prefix(const std::vector<std::string>& keys,
                                             const std::vector<ModelKeys>& models) {
  for (const auto& model : models) {
    if (same_keys(keys, model.second)) return std::nullopt;  // the keys fit a model as they are
  }
  const std::string common = common_key_prefix(keys);
  for (size_t dot = common.find('.'); dot != std::string::npos; dot = common.find('.', dot + 1)) {
    StrippedKeys out;
    out.prefix = common.substr(0, dot + 1);
    out.keys = keys;
    for (auto& key : out.keys) key.erase(0, out.prefix.size());
    const std::vector<std::string> wrapper_notices = strip_wrapper_prefixes(out.keys);
    const ModelKeys* match = nullptr;
    int matches = 0;
    for (const auto& model : models) {
      if (same_keys(out.keys, model.second)) match = &model, ++matches;
    }
    if (matches != 1) continue;
    out.notices.push_back("stripped the prefix '" + out.prefix +
                          "' from every key (a training wrapper's attribute, as PyTorch "
                          "Lightning's 'model.'; without it the keys are " +
                          match->first + "'s)");
    out.notices.insert(out.notices.end(), wrapper_notices.begin(), wrapper_notices.end());
    return out;
  }
  return std::nullopt;
}

std::string strip_prefix_hint(const std::vector<std::string>& keys,
                              const std::vector<ModelKeys>& models) {
  // A prefix under which every key of a model is found (other keys may be beside them).
  for (const auto& model : models) {
    if (model.second.empty()) continue;
    const std::string& first = model.second.front();
    for (const auto& key : keys) {
      if (key.size() <= first.size() + 1 ||
          key.compare(key.size() - first.size(), first.size(), first) != 0 ||
          key[key.size() - first.size() - 1] != '.') {
        continue;
      }
      const std::string prefix = key.substr(0, key.size() - first.size());
      const bool all = std::all_of(model.second.begin(), model.second.end(), [&](const auto& k) {
        return std::find(keys.begin(), keys.end(), prefix + k) != keys.end();
      });
      if (!all) continue;
      const bool others = !std::all_of(
          keys.begin(), keys.end(), [&](const std::string& k) { return starts_with(k, prefix); });
      return " (" + model.first + "'s keys are all there under the prefix '" + prefix +
             "'; pass --strip-prefix " + prefix + (others ? " and --no-strict" : "") + ")";
    }
  }
  const std::string common = common_key_prefix(keys);
  if (common.empty()) return "";
  // A prefix of a model's own keys (a layer's name, as fc1. of a file holding fc1 alone) is no
  // wrapper's: stripping it would lead nowhere.
  for (const auto& model : models) {
    for (const std::string& key : model.second) {
      if (starts_with(key, common)) return "";
    }
  }
  return " (every key starts with '" + common + "'; if a wrapper added it, pass --strip-prefix " +
         common + ")";
}

}  // namespace fusedlinear
