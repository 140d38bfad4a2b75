// The registry of models and chains (chain_registry.h).
#include "kernels/ops/chain_registry.h"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#ifdef FUSEDLINEAR_WITH_JIT
#include "kernels/cuda/jit/compiled_chains.h"
#include "kernels/ops/chain_source.h"
#endif

namespace fusedlinear {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<ModelSpec> models;
  std::map<std::string, std::shared_ptr<const ChainEntry>> by_name;  // names and specs as given
  std::vector<std::string> compiled;
  ChainKernels runtime;
  bool has_runtime = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Throws std::invalid_argument unless `name` may name a compiled chain: not an op of the
// vocabulary, nor registered.
void check_chain_name(const Registry& r, const std::string& name) {
  for (const OpInfo& op : vocabulary()) {
    if (op.name == name) {
      throw std::invalid_argument("fusedlinear: a model may not be named after the op '" + name +
                                  "'");
    }
  }
  if (r.by_name.count(name) > 0) {
    throw std::invalid_argument("fusedlinear: a chain named '" + name + "' is registered twice");
  }
}

}  // namespace

void register_model(const ModelSpec& model, const std::vector<ChainEntry>& compiled_chains) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const ModelSpec& known : r.models) {
    if (known.name == model.name) {
      throw std::invalid_argument("fusedlinear: a model named '" + model.name +
                                  "' is registered twice");
    }
  }
  for (const ChainEntry& chain : compiled_chains) check_chain_name(r, chain.name);
  for (const ChainEntry& chain : compiled_chains) {
    auto entry = std::make_shared<ChainEntry>(chain);
    entry->compiled = true;
    r.by_name.emplace(chain.name, entry);
    r.compiled.push_back(chain.name);
  }
  r.models.push_back(model);
}

void register_runtime_kernels(const ChainKernels& kernels) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.runtime = kernels;
  r.has_runtime = true;
}

const ChainEntry& find_chain(const std::string& name_or_spec) {
  Registry& r = registry();
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.by_name.find(name_or_spec);
    if (it != r.by_name.end()) return *it->second;
  }
  // A spec: parsed outside the lock (it may throw), then kept under its text and canonical form.
  auto entry = std::make_shared<ChainEntry>();
  entry->chain = parse_chain_or_empty(name_or_spec);
  entry->name = entry->chain.to_string();
  entry->program = program_of(entry->chain);
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.has_runtime) {
    throw ChainSpecError("chain '" + entry->name + "': this build has no run-time chain kernels");
  }
  entry->kernels = r.runtime;
#ifdef FUSEDLINEAR_WITH_JIT
  // The kernels a declaration of the chain gets, compiled at their first call where they can be.
  entry->kernels.cuda = cuda::jit::compiled_chain_kernels(
      entry->program, chain_expression(entry->chain), r.runtime.cuda);
  entry->compiled_at_run_time = cuda::jit::compiling_enabled();
#endif
  const auto canonical = r.by_name.emplace(entry->name, entry).first;
  r.by_name.emplace(name_or_spec, canonical->second);
  return *canonical->second;
}

ChainKernelKind gpu_chain_kernels(const ChainEntry& entry) {
  return entry.compiled               ? ChainKernelKind::kDeclaration
         : entry.compiled_at_run_time ? ChainKernelKind::kCompiledAtRunTime
                                      : ChainKernelKind::kInterpreter;
}

std::vector<std::string> compiled_chain_names() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.compiled;
}

std::vector<ModelSpec> registered_models() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.models;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelSpec& spec : registered_models()) names.push_back(spec.name);
  return names;
}

ModelSpec find_model(const std::string& name) {
  std::string known;
  for (const ModelSpec& spec : registered_models()) {
    if (spec.name == name) return spec;
    known += (known.empty() ? "" : ", ") + spec.name;
  }
  throw std::invalid_argument("unknown model '" + name + "' (expected one of: " + known + ")");
}

}  // namespace fusedlinear
