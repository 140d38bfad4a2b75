// Run-time chains with kernels compiled by NVRTC (compiled_chains.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "kernels/cuda/epilogue.cuh"
#include "kernels/cuda/jit/chain_units.h"
#include "kernels/cuda/jit/compiled_chain.cuh"
#include "kernels/cuda/jit/compiled_chains.h"
#include "kernels/cuda/jit/kernel_cache.h"
#include "kernels/cuda/jit/nvrtc_compile.h"

namespace fusedlinear {
namespace cuda {
namespace jit {
namespace {

// A chain's epilogue for one architecture and element type, loaded, or not (`ready` false: the
// interpreter runs it).
struct LoadedEpilogue {
  bool ready = false;
  cudaLibrary_t library = nullptr;
  EpilogueKernels kernels;
  CompiledChainBytes chain = {};
};

struct CompiledChain {
  std::string expression;
  CudaEpilogueFn interpreter_epilogue = nullptr;
  std::mutex mutex;  // held while a module is compiled and loaded: its other callers wait for it
  std::map<std::pair<std::string, ElementType>, LoadedEpilogue> epilogues;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<CompiledChain>> by_program;
  CompileCounts counts;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The program's ops and arguments as bytes, field by field (its padding is not initialised).
std::string program_key(const act::Program& program) {
  std::string key;
  const auto append = [&](const void* p, size_t size) {
    key.append(static_cast<const char*>(p), size);
  };
  append(&program.count, sizeof program.count);
  append(&program.terms, sizeof program.terms);
  for (int i = 0; i < program.count; ++i) {
    const act::ProgramOp& op = program.ops[i];
    append(&op.code, sizeof op.code);
    append(&op.slot, sizeof op.slot);
    append(op.args, sizeof op.args);
  }
  return key;
}

void notice(const std::string& message) {
  std::fprintf(stderr, "fusedlinear: notice: %s\n", message.c_str());
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// NVRTC's name for the current device's architecture: Hopper's arch-specific sm_90a (the wgmma
// the library's Hopper kernels take), else sm_XY.
cudaError_t current_architecture(std::string& architecture) {
  DeviceLimits limits;
  const cudaError_t err = current_device_limits(limits);
  if (err != cudaSuccess) return err;
  architecture = "sm_" + std::to_string(limits.compute_major) +
                 std::to_string(limits.compute_minor) +
                 (limits.compute_major == 9 && limits.compute_minor == 0 ? "a" : "");
  return cudaSuccess;
}

// Everything besides the source that a compiled module depends on.
std::string versions() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return library_fingerprint() + "; " + nvrtc_version() + "; driver " + std::to_string(driver) +
         "; runtime " + std::to_string(runtime);
}

// Loads an epilogue unit's module (chain_units.h: the kernels, then the chain's value).
bool load_epilogue(const CompiledModule& module, LoadedEpilogue& loaded, std::string& error) {
  if (module.lowered_names.size() != kEpilogueUnitChainValue + 1) {
    error = "the module lacks names";
    return false;
  }
  cudaLibrary_t library = nullptr;
  cudaError_t err =
      cudaLibraryLoadData(&library, module.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  for (int i = 0; err == cudaSuccess && i < kEpilogueUnitChainValue; ++i) {
    cudaKernel_t kernel = nullptr;
    err = cudaLibraryGetKernel(&kernel, library, module.lowered_names[i].c_str());
    loaded.kernels.kernel[i / 4][i / 2 % 2][i % 2] = reinterpret_cast<const void*>(kernel);
  }
  void* chain = nullptr;
  size_t chain_bytes = 0;
  if (err == cudaSuccess) {
    err = cudaLibraryGetGlobal(&chain, &chain_bytes, library,
                               module.lowered_names[kEpilogueUnitChainValue].c_str());
  }
  if (err == cudaSuccess && chain_bytes > sizeof loaded.chain.bytes) err = cudaErrorInvalidValue;
  if (err == cudaSuccess) {
    err = cudaMemcpy(loaded.chain.bytes, chain, chain_bytes, cudaMemcpyDeviceToHost);
  }
  if (err != cudaSuccess) {
    error = std::string("loading the module: ") + cudaGetErrorString(err);
    if (library) cudaLibraryUnload(library);
    return false;
  }
  loaded.library = library;
  loaded.ready = true;
  return true;
}

const char* element_name(ElementType type) {
  return type == ElementType::kFloat32   ? "float32"
         : type == ElementType::kFloat16 ? "float16"
                                         : "bfloat16";
}

// The chain's epilogue for `architecture` and `type`: from memory, else from the disk cache,
// else compiled (and stored); not ready, after a notice, where none of that works.
const LoadedEpilogue& epilogue_of(CompiledChain& chain, const std::string& architecture,
                                  ElementType type) {
  const std::lock_guard<std::mutex> lock(chain.mutex);
  const auto found = chain.epilogues.find({architecture, type});
  if (found != chain.epilogues.end()) return found->second;
  LoadedEpilogue& loaded = chain.epilogues[{architecture, type}];
  const NvrtcRequest request = epilogue_unit(chain.expression, type, architecture);
  KernelCacheKey key;
  key.source = request.source;
  for (const std::string& name : request.name_expressions) key.kernels += name + "\n";
  for (const std::string& option : nvrtc_options(request)) key.kernels += option + "\n";
  key.architecture = architecture;
  key.versions = versions();
  const KernelCache cache(kernel_cache_directory());
  CompiledModule module;
  std::string error;
  if (cache.load(key, module) && load_epilogue(module, loaded, error)) {
    const std::lock_guard<std::mutex> count_lock(registry().mutex);
    ++registry().counts.read_from_disk;
    return loaded;
  }
  const bool compiled = compile_with_nvrtc(request, module, error);
  if (compiled) cache.store(key, module);
  const bool ready = compiled && load_epilogue(module, loaded, error);
  const std::lock_guard<std::mutex> count_lock(registry().mutex);
  ++(ready ? registry().counts.compiled : registry().counts.failed);
  if (!ready) {
    notice(std::string("the ") + element_name(type) + " epilogue of " + chain.expression +
           " was not compiled for " + architecture + " (" + first_line(error) +
           "): the interpreter runs it");
  }
  return loaded;
}

std::shared_ptr<CompiledChain> chain_of(const act::Program& program) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto found = r.by_program.find(program_key(program));
  return found == r.by_program.end() ? nullptr : found->second;
}

// The epilogue of a compiled chain (a CudaEpilogueFn): its compiled kernels, launched as a
// declaration's are, or the interpreter's.
cudaError_t compiled_epilogue(const act::Program& program, const EpilogueCall& call,
                              cudaStream_t stream) {
  const std::shared_ptr<CompiledChain> chain = chain_of(program);
  if (!chain) return cudaErrorInvalidValue;
  std::string architecture;
  cudaError_t err = current_architecture(architecture);
  if (err != cudaSuccess) return err;
  const LoadedEpilogue& loaded = epilogue_of(*chain, architecture, call.type);
  if (!loaded.ready) return chain->interpreter_epilogue(program, call, stream);
  err = cudaErrorInvalidValue;
  dispatch_element(call.type, [&](auto element) {
    using T = DeviceElement<decltype(element)::value>;
    using Shape = ProductionShape<T, CompiledRuntimeChain, CompiledChainBytes>;
    const ColumnEpilogue<T, CompiledChainBytes> epilogue(call.bias, call.terms, loaded.chain);
    err = launch_fused_epilogue_typed<T, Shape>(
        loaded.kernels, static_cast<const T*>(call.y), static_cast<const T*>(call.gate),
        static_cast<T*>(call.out), call.rows, call.cols, epilogue, stream);
  });
  return err;
}

}  // namespace

bool compiling_enabled() {
  const char* setting = std::getenv("FUSEDLINEAR_JIT");
  return setting && std::strcmp(setting, "1") == 0;
}

CudaChainKernels compiled_chain_kernels(const act::Program& program,
                                        const std::string& chain_expression,
                                        const CudaChainKernels& interpreter) {
  if (!compiling_enabled()) return interpreter;
  Registry& r = registry();
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    auto& chain = r.by_program[program_key(program)];
    if (!chain) {
      chain = std::make_shared<CompiledChain>();
      chain->expression = chain_expression;
      chain->interpreter_epilogue = interpreter.epilogue;
    }
  }
  CudaChainKernels kernels = interpreter;
  kernels.epilogue = &compiled_epilogue;
  return kernels;
}

CompileCounts compile_counts() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.counts;
}

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
