// Run-time chains with kernels compiled by NVRTC (compiled_chains.h).
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/gemm/launch.cuh"
#include "kernels/cuda/jit/chain_units.h"
#include "kernels/cuda/jit/compiled_chain.cuh"
#include "kernels/cuda/jit/compiled_chains.h"
#include "kernels/cuda/jit/kernel_cache.h"
#include "kernels/cuda/jit/nvrtc_compile.h"
#include "kernels/cuda/skinny/launch.cuh"

namespace fusedlinear {
namespace cuda {
namespace jit {
namespace {

// A module of a chain's kernels (a translation unit of chain_units.h) loaded, or not (`ready`
// false: the interpreter runs what it holds).
struct LoadedModule {
  bool ready = false;
  cudaLibrary_t library = nullptr;
  std::vector<const void*> kernels;  // the unit's kernels, in the order its names ask for them
  CompiledChainBytes chain = {};     // the chain's value, as they take it
};

// What a module of a chain's is compiled for besides the chain: the device's architecture (its
// compute capability), the unit's kind, element type and instance as numbers, and the fused-MLP
// kernel's instance as the address of the library's kernel of that instance and the widths it is
// compiled for. Numbers, so that a launch finds its module without writing text.
struct UnitKey {
  int architecture = 0;
  std::array<int, 8> unit = {};
  const void* mlp_instance = nullptr;
  MlpShape mlp_shape;  // the shape the fused-MLP kernel's instance is compiled for, if any
  bool operator<(const UnitKey& other) const {
    return std::tie(architecture, unit, mlp_instance, mlp_shape) <
           std::tie(other.architecture, other.unit, other.mlp_instance, other.mlp_shape);
  }
};
enum UnitKind { kEpilogueUnit, kHopperUnit, kSkinnyUnit, kMlpUnit };

struct CompiledChain {
  std::string expression;
  CudaChainKernels interpreter;
  std::mutex mutex;  // held while a module is compiled and loaded: its other callers wait for it
  std::map<UnitKey, LoadedModule> modules;
};

// Programs by their ops and arguments, field by field (their padding is not initialised); the
// arguments bitwise, as a chain's value holds them.
struct ProgramOrder {
  bool operator()(const act::Program& a, const act::Program& b) const {
    if (a.count != b.count) return a.count < b.count;
    if (a.terms != b.terms) return a.terms < b.terms;
    for (int i = 0; i < a.count; ++i) {
      const act::ProgramOp& x = a.ops[i];
      const act::ProgramOp& y = b.ops[i];
      if (x.code != y.code) return x.code < y.code;
      if (x.slot != y.slot) return x.slot < y.slot;
      const int args = std::memcmp(x.args, y.args, sizeof x.args);
      if (args != 0) return args < 0;
    }
    return false;
  }
};

struct Registry {
  std::mutex mutex;
  std::map<act::Program, std::shared_ptr<CompiledChain>, ProgramOrder> by_program;
  // The fused-MLP kernels of models, by their layers' chains (expression: the chains, one a line).
  std::map<std::string, std::shared_ptr<CompiledChain>> by_layers;
  CompileCounts counts;
};

Registry& registry() {
  static Registry r;
  return r;
}

void notice(const std::string& message) {
  std::fprintf(stderr, "fusedlinear: notice: %s\n", message.c_str());
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The current device's architecture: its compute capability, major * 10 + minor.
cudaError_t current_architecture(int& architecture) {
  DeviceLimits limits;
  const cudaError_t err = current_device_limits(limits);
  architecture = limits.compute_major * 10 + limits.compute_minor;
  return err;
}

// NVRTC's name for an architecture: Hopper's arch-specific sm_90a (the wgmma the library's Hopper
// kernels take), else sm_XY.
std::string architecture_name(int architecture) {
  return "sm_" + std::to_string(architecture) + (architecture == 90 ? "a" : "");
}

// Everything besides the source that a compiled module depends on.
std::string versions() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return library_fingerprint() + "; " + nvrtc_version() + "; driver " + std::to_string(driver) +
         "; runtime " + std::to_string(runtime);
}

// Loads a unit's module: its names are its kernels, then, where `chain_value`, the chain's value.
bool load_module(const CompiledModule& module, size_t names, bool chain_value, LoadedModule& loaded,
                 std::string& error) {
  if (module.lowered_names.size() != names || names < (chain_value ? 2u : 1u)) {
    error = "the module lacks names";
    return false;
  }
  const size_t kernel_count = chain_value ? names - 1 : names;
  cudaLibrary_t library = nullptr;
  cudaError_t err =
      cudaLibraryLoadData(&library, module.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  std::vector<const void*> kernels;
  for (size_t i = 0; err == cudaSuccess && i < kernel_count; ++i) {
    cudaKernel_t kernel = nullptr;
    err = cudaLibraryGetKernel(&kernel, library, module.lowered_names[i].c_str());
    kernels.push_back(reinterpret_cast<const void*>(kernel));
  }
  void* chain = nullptr;
  size_t chain_bytes = 0;
  if (err == cudaSuccess && chain_value) {
    err = cudaLibraryGetGlobal(&chain, &chain_bytes, library, module.lowered_names.back().c_str());
  }
  if (err == cudaSuccess && chain_bytes > sizeof loaded.chain.bytes) err = cudaErrorInvalidValue;
  if (err == cudaSuccess && chain_value) {
    err = cudaMemcpy(loaded.chain.bytes, chain, chain_bytes, cudaMemcpyDeviceToHost);
  }
  if (err != cudaSuccess) {
    error = std::string("loading the module: ") + cudaGetErrorString(err);
    if (library) cudaLibraryUnload(library);
    return false;
  }
  loaded.library = library;
  loaded.kernels = std::move(kernels);
  loaded.ready = true;
  return true;
}

const char* element_name(ElementType type) {
  return type == ElementType::kFloat32   ? "float32"
         : type == ElementType::kFloat16 ? "float16"
                                         : "bfloat16";
}

// A unit of the chain's (chain_units.h) as it is compiled at its first use: the NVRTC request, and
// what it holds, for the notice where it cannot be; whether its last name is the chain's value.
struct Unit {
  NvrtcRequest request;
  std::string what;
  bool chain_value = true;
};

// The module of the unit `unit_key` names in memory (everything but the chain that makes the
// unit), loaded at its first use from the unit `make_unit()` builds then: from the disk cache, else
// compiled (and stored); not ready, after a notice, where none of that works. A call that finds it
// in memory builds nothing.
template <class MakeUnit>
const LoadedModule& module_of(CompiledChain& chain, const UnitKey& unit_key, MakeUnit&& make_unit) {
  const std::lock_guard<std::mutex> lock(chain.mutex);
  const auto found = chain.modules.find(unit_key);
  if (found != chain.modules.end()) return found->second;
  LoadedModule& loaded = chain.modules[unit_key];
  const Unit unit = make_unit();
  const NvrtcRequest& request = unit.request;
  KernelCacheKey key;
  key.family = request.family;
  key.source = request.source;
  for (const std::string& name : request.name_expressions) key.kernels += name + "\n";
  for (const std::string& option : nvrtc_options(request)) key.kernels += option + "\n";
  key.architecture = request.architecture;
  key.versions = versions();
  const KernelCache cache(kernel_cache_directory());
  const size_t count = request.name_expressions.size();
  CompiledModule module;
  std::string error;
  if (cache.load(key, module) && load_module(module, count, unit.chain_value, loaded, error)) {
    const std::lock_guard<std::mutex> count_lock(registry().mutex);
    ++registry().counts.read_from_disk;
    return loaded;
  }
  const bool compiled = compile_with_nvrtc(request, module, error);
  if (compiled) cache.store(key, module);
  const bool ready = compiled && load_module(module, count, unit.chain_value, loaded, error);
  const std::lock_guard<std::mutex> count_lock(registry().mutex);
  ++(ready ? registry().counts.compiled : registry().counts.failed);
  if (!ready) {
    notice(unit.what + " of " + chain.expression + " was not compiled for " + request.architecture +
           " (" + first_line(error) + "): the interpreter runs it");
  }
  return loaded;
}

std::shared_ptr<CompiledChain> chain_of(const act::Program& program) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto found = r.by_program.find(program);
  return found == r.by_program.end() ? nullptr : found->second;
}

// The epilogue of a compiled chain (a CudaEpilogueFn): its compiled kernels, launched as a
// declaration's are, or the interpreter's.
cudaError_t compiled_epilogue(const act::Program& program, const EpilogueCall& call,
                              cudaStream_t stream) {
  const std::shared_ptr<CompiledChain> chain = chain_of(program);
  if (!chain) return cudaErrorInvalidValue;
  UnitKey unit_key;
  cudaError_t err = current_architecture(unit_key.architecture);
  if (err != cudaSuccess) return err;
  unit_key.unit = {kEpilogueUnit, int(call.type)};
  const LoadedModule& loaded = module_of(*chain, unit_key, [&] {
    return Unit{
        epilogue_unit(chain->expression, call.type, architecture_name(unit_key.architecture)),
        std::string("the ") + element_name(call.type) + " epilogue"};
  });
  if (!loaded.ready) return chain->interpreter.epilogue(program, call, stream);
  EpilogueKernels kernels;
  for (int i = 0; i < kEpilogueUnitChainValue; ++i) {
    kernels.kernel[i / 4][i / 2 % 2][i % 2] = loaded.kernels[i];
  }
  err = cudaErrorInvalidValue;
  dispatch_element(call.type, [&](auto element) {
    using T = DeviceElement<decltype(element)::value>;
    using Shape = ProductionShape<T, CompiledRuntimeChain, CompiledChainBytes>;
    const ColumnEpilogue<T, CompiledChainBytes> epilogue(call.bias, call.terms, loaded.chain);
    err = launch_fused_epilogue_typed<T, Shape>(
        kernels, static_cast<const T*>(call.y), static_cast<const T*>(call.gate),
        static_cast<T*>(call.out), call.rows, call.cols, epilogue, stream);
  });
  return err;
}

// The whole forward of a compiled chain on the Hopper GEMM (a CudaHopperFn): each kernel the
// launcher picks compiled at its first use (a GEMM's compile takes seconds: a forward compiles the
// one it runs, not every tile and mode), launched as a declaration's are; where one is not
// compiled, the interpreter's launcher runs the call (nothing was launched yet).
template <HopperFamily kFamily>
cudaError_t compiled_hopper(const act::Program& program, const LinearCall& call, float* workspace,
                            cudaStream_t stream) {
  using Types = HopperTypes<kFamily>;
  const std::shared_ptr<CompiledChain> chain = chain_of(program);
  if (!chain) return cudaErrorInvalidValue;
  int architecture = 0;
  cudaError_t err = current_architecture(architecture);
  if (err != cudaSuccess) return err;
  ColumnEpilogue<typename Types::Out, CompiledChainBytes> epilogue(call.bias, call.terms,
                                                                   CompiledChainBytes{});
  epilogue.gate_bias = static_cast<const typename Types::Out*>(call.gate_bias);
  const bool gated = call.gate_w != nullptr;
  bool interpret = false;
  const auto kernel_of = [&](auto shape) {
    using Shape = decltype(shape);
    UnitKey unit_key;
    unit_key.architecture = architecture;
    unit_key.unit = {kHopperUnit,   int(Types::kOut), int(Shape::kProducts), Shape::kTileM,
                     Shape::kTileN, Shape::kTurns,    Shape::kConsumerRows,  gated};
    const LoadedModule& loaded = module_of(*chain, unit_key, [&] {
      const std::string products = gemm::products_name(Shape::kProducts);
      const std::string tile = std::to_string(Shape::kTileM) + " x " +
                               std::to_string(Shape::kTileN) + (Shape::kTurns ? " in turns" : "");
      HopperInstance instance;
      instance.type = Types::kOut;
      instance.products = products;
      instance.tile_n = Shape::kTileN;
      instance.consumer_rows = Shape::kConsumerRows;
      instance.turns = Shape::kTurns;
      instance.gated = gated;
      return Unit{hopper_unit(chain->expression, instance, architecture_name(architecture)),
                  std::string("the Hopper GEMM's ") + element_name(Types::kOut) + " " + products +
                      (gated ? " gated-pair" : "") + " kernel on " + tile + " tiles"};
    });
    if (!loaded.ready) {
      interpret = true;
      return gemm::GemmKernelHandle{};
    }
    epilogue.chain = loaded.chain;
    return gemm::GemmKernelHandle{loaded.kernels[0], &epilogue};
  };
  err = launch_hopper_family<kFamily>(kernel_of, call, workspace, stream);
  if (interpret) return chain->interpreter.hopper[int(kFamily)](program, call, workspace, stream);
  return err;
}

// A SkinnyVariant enumerator's name, as a unit names the variant's kernel.
const char* variant_name(SkinnyVariant variant) {
  switch (variant) {
#define FUSEDLINEAR_VARIANT_NAME(V) \
  case SkinnyVariant::V:            \
    return #V;
    FUSEDLINEAR_VARIANT_NAME(kFloatRows1)
    FUSEDLINEAR_VARIANT_NAME(kFloatRows4)
    FUSEDLINEAR_VARIANT_NAME(kFloatRows8)
    FUSEDLINEAR_VARIANT_NAME(kFloatLaneRows)
    FUSEDLINEAR_VARIANT_NAME(kFloatUnaligned)
    FUSEDLINEAR_VARIANT_NAME(kBf16TensorCore)
    FUSEDLINEAR_VARIANT_NAME(kBf16Unaligned)
    FUSEDLINEAR_VARIANT_NAME(kBf16x3TensorCore)
    FUSEDLINEAR_VARIANT_NAME(kBf16x3Staged16)
    FUSEDLINEAR_VARIANT_NAME(kBf16x3Staged32)
    FUSEDLINEAR_VARIANT_NAME(kBf16x3Staged64)
    FUSEDLINEAR_VARIANT_NAME(kBf16x3Unaligned)
    FUSEDLINEAR_VARIANT_NAME(kHalfTensorCore)
    FUSEDLINEAR_VARIANT_NAME(kHalfUnaligned)
#undef FUSEDLINEAR_VARIANT_NAME
  }
  return "";
}

// The small-batch forward of a compiled chain (a CudaSkinnyFn): the plan's variant compiled at its
// first use in each element type, launched as a declaration's; where it is not compiled, the
// interpreter's launcher runs the call (nothing was launched yet).
template <SkinnyFamily kFamily>
cudaError_t compiled_skinny(const act::Program& program, const LinearCall& call,
                            const SkinnyPlan& plan, float* workspace, cudaStream_t stream) {
  const std::shared_ptr<CompiledChain> chain = chain_of(program);
  if (!chain) return cudaErrorInvalidValue;
  UnitKey unit_key;
  const cudaError_t err = current_architecture(unit_key.architecture);
  if (err != cudaSuccess) return err;
  unit_key.unit = {kSkinnyUnit, int(call.type), int(plan.variant)};
  const LoadedModule& loaded = module_of(*chain, unit_key, [&] {
    const char* variant = variant_name(plan.variant);
    return Unit{skinny_unit(chain->expression, call.type, variant,
                            architecture_name(unit_key.architecture)),
                std::string("the ") + element_name(call.type) + " small-batch kernel " + variant};
  });
  if (!loaded.ready) {
    return chain->interpreter.skinny[int(kFamily)](program, call, plan, workspace, stream);
  }
  skinny::SkinnyKernels kernels;
  kernels.kernel[0] = loaded.kernels[0];
  kernels.kernel[1] = loaded.kernels[1];
  kernels.reduce = loaded.kernels[kSkinnyUnitReduce];
  const auto epilogue_of = [&](auto element) {
    return ColumnEpilogue<DeviceElement<decltype(element)::value>, CompiledChainBytes>(
        call.bias, call.terms, loaded.chain);
  };
  return launch_skinny_family<kFamily>(call, plan, workspace, stream, epilogue_of,
                                       [&](auto, auto) { return kernels; });
}

}  // namespace

MlpKernelOf compiled_mlp_kernels(const std::vector<std::string>& layer_chains) {
  std::string expression;
  for (const std::string& chain : layer_chains) expression += chain + "\n";
  std::shared_ptr<CompiledChain> model;
  {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    auto& entry = r.by_layers[expression];
    if (!entry) {
      entry = std::make_shared<CompiledChain>();
      entry->expression = "the model of chains " + expression.substr(0, expression.size() - 1);
      std::replace(entry->expression.begin(), entry->expression.end(), '\n', ';');
    }
    model = entry;
  }
  // Whether compiling is on is asked at each launch, not once here: a model's layout is kept for
  // the process, and FUSEDLINEAR_JIT may change after it is made (tests turn it off and on).
  return [model, layer_chains](const void* library, const MlpShape& shape,
                               const std::function<std::string()>& instance_name) -> const void* {
    UnitKey unit_key;
    if (!compiling_enabled() || current_architecture(unit_key.architecture) != cudaSuccess) {
      return nullptr;
    }
    unit_key.unit = {kMlpUnit};
    unit_key.mlp_instance = library;
    unit_key.mlp_shape = shape;
    const LoadedModule& loaded = module_of(*model, unit_key, [&] {
      const std::string instance = instance_name();
      Unit unit{mlp_unit(layer_chains, instance, architecture_name(unit_key.architecture)),
                "the fused-MLP kernel " + instance + ">"};
      unit.chain_value = false;
      return unit;
    });
    return loaded.ready ? loaded.kernels[0] : nullptr;
  };
}

bool compiling_enabled() {
  const char* setting = std::getenv("FUSEDLINEAR_JIT");
  return !(setting && std::strcmp(setting, "0") == 0);
}

CudaChainKernels compiled_chain_kernels(const act::Program& program,
                                        const std::string& chain_expression,
                                        const CudaChainKernels& interpreter) {
  if (!compiling_enabled()) return interpreter;
  Registry& r = registry();
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    auto& chain = r.by_program[program];
    if (!chain) {
      chain = std::make_shared<CompiledChain>();
      chain->expression = chain_expression;
      chain->interpreter = interpreter;
    }
  }
  CudaChainKernels kernels = interpreter;
  kernels.epilogue = &compiled_epilogue;
  kernels.hopper[int(HopperFamily::kFloat32)] = &compiled_hopper<HopperFamily::kFloat32>;
  kernels.hopper[int(HopperFamily::kBf16)] = &compiled_hopper<HopperFamily::kBf16>;
  kernels.hopper[int(HopperFamily::kHalf)] = &compiled_hopper<HopperFamily::kHalf>;
  kernels.skinny[int(SkinnyFamily::kFloat)] = &compiled_skinny<SkinnyFamily::kFloat>;
  kernels.skinny[int(SkinnyFamily::kBf16)] = &compiled_skinny<SkinnyFamily::kBf16>;
  kernels.skinny[int(SkinnyFamily::kBf16x3)] = &compiled_skinny<SkinnyFamily::kBf16x3>;
  kernels.skinny[int(SkinnyFamily::kHalf)] = &compiled_skinny<SkinnyFamily::kHalf>;
  return kernels;
}

CompileCounts compile_counts() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.counts;
}

void unload_compiled_modules() {
  Registry& r = registry();
  std::vector<std::shared_ptr<CompiledChain>> chains;
  {
    // Not held below: a chain's lock is taken before the registry's (module_of's counts).
    const std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& entry : r.by_program) chains.push_back(entry.second);
    for (const auto& entry : r.by_layers) chains.push_back(entry.second);
  }
  for (const std::shared_ptr<CompiledChain>& chain : chains) {
    const std::lock_guard<std::mutex> chain_lock(chain->mutex);
    for (auto& [name, module] : chain->modules) {
      if (module.library) cudaLibraryUnload(module.library);
    }
    chain->modules.clear();
  }
}

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
