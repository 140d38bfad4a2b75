// The chains the ops know (chain_registry.h).
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
  std::map<std::string, std::shared_ptr<const ChainEntry>> by_name;  // names and specs as given
  std::vector<std::string> compiled;
  ChainKernels runtime;
  bool has_runtime = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_compiled_chain(const std::string& name, const ParsedChain& chain,
                             const ChainKernels& kernels) {
  for (const OpInfo& op : vocabulary()) {
    if (op.name == name) {
      throw std::invalid_argument("fusedlinear: a model may not be named after the op '" + name +
                                  "'");
    }
  }
  auto entry = std::make_shared<ChainEntry>();
  entry->name = name;
  entry->chain = chain;
  entry->compiled = true;
  entry->kernels = kernels;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.by_name.emplace(name, entry).second) {
    throw std::invalid_argument("fusedlinear: a chain named '" + name + "' is registered twice");
  }
  r.compiled.push_back(name);
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
#endif
  const auto canonical = r.by_name.emplace(entry->name, entry).first;
  r.by_name.emplace(name_or_spec, canonical->second);
  return *canonical->second;
}

std::vector<std::string> compiled_chain_names() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.compiled;
}

}  // namespace fusedlinear
