// NVRTC on a translation unit of the library's kernel headers (nvrtc_compile.h).
#include "kernels/cuda/jit/nvrtc_compile.h"

#include <cuda.h>  // CUDA_VERSION
#include <nvrtc.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "kernels/cuda/jit/embedded_headers.h"

namespace fusedlinear {
namespace cuda {
namespace jit {
namespace {

bool exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// A standard header as NVRTC takes it: libcu++'s, its names made visible in std (the kernel
// headers write std::is_same_v, std::isnan, ...). libcu++ has no std::erf, which a functor's
// float64 form (never compiled for the GPU, but parsed) calls: NVRTC's own.
struct StandardHeader {
  const char* name;            // as the kernel headers include it
  const char* libcu;           // libcu++'s <cuda/std/...> that stands for it
  const char* more = nullptr;  // and a second one
};
constexpr StandardHeader kStandardHeaders[] = {
    {"type_traits", "type_traits"},
    {"utility", "utility"},
    {"tuple", "tuple"},
    {"cstdint", "cstdint"},
    {"stdint.h", "cstdint"},
    {"cstring", "cstring"},
    {"string.h", "cstring"},
    // libcu++ has no <algorithm>: the kernel
    // headers take std::max and std::min of it.
    {"algorithm", "__algorithm/max.h", "__algorithm/min.h"},
    {"cmath", "cmath"},
    {"math.h", "cmath"}};

std::string text_of(const StandardHeader& header) {
  std::string text = std::string("#pragma once\n#include <cuda/std/") + header.libcu + ">\n";
  if (header.more) text += std::string("#include <cuda/std/") + header.more + ">\n";
  text += "namespace std {\nusing namespace cuda::std;\n";
  if (std::string(header.libcu) == "cmath") text += "using ::erf;\n";
  return text + "}\n";
}

struct ProgramDeleter {
  void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using ProgramHandle = std::unique_ptr<_nvrtcProgram, ProgramDeleter>;

std::string log_of(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, &log[0]) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);
  return log;
}

// NVRTC's automatic precompiled headers (12.8 on): kept in a heap of the process, which one
// compile at a time uses.
bool precompiled_headers_available() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return false;
  return major > 12 || (major == 12 && minor >= 8);
}
std::mutex& precompiled_headers_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Where the heap was too small to keep a unit's headers, makes it as large as they need, for the
// next unit (a compile that could not keep them is whole all the same).
void grow_heap_if_exhausted(nvrtcProgram program) {
#if CUDA_VERSION >= 12080
  size_t required = 0;
  if (nvrtcGetPCHCreateStatus(program) == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED &&
      nvrtcGetPCHHeapSizeRequired(program, &required) == NVRTC_SUCCESS) {
    nvrtcSetPCHHeapSize(required);
  }
#else
  (void)program;
#endif
}

}  // namespace

std::string cuda_include_directory() {
  std::vector<std::string> candidates;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(variable);
    if (root && *root) candidates.push_back(std::string(root) + "/include");
  }
  candidates.push_back(FUSEDLINEAR_CUDA_INCLUDE_DIR);  // the toolkit the library was built with
  candidates.push_back("/usr/local/cuda/include");
  for (const std::string& dir : candidates) {
    if (exists(dir + "/cuda_fp16.h") && exists(dir + "/cccl/cuda/std/type_traits")) return dir;
  }
  return "";
}

std::vector<std::string> nvrtc_options(const NvrtcRequest& request) {
  const std::string include = cuda_include_directory();
  // As nvcc compiles the library's CUDA files: C++17, NDEBUG (a Release build's), unannotated
  // functions (the functors' float64 forms, constexpr helpers) as device functions.
  std::vector<std::string> options = {"--gpu-architecture=" + request.architecture,
                                      "-std=c++17",
                                      "-default-device",
                                      "-DNDEBUG",
                                      "-I" + include,
                                      "-I" + include + "/cccl"};
  options.insert(options.end(), request.options.begin(), request.options.end());
  return options;
}

bool compile_with_nvrtc(const NvrtcRequest& request, CompiledModule& module, std::string& error) {
  if (cuda_include_directory().empty()) {
    error = "the CUDA Toolkit's headers (cuda_fp16.h, cccl/) were not found: set CUDA_HOME";
    return false;
  }
  std::vector<const char*> names, texts;
  for (int i = 0; i < kEmbeddedHeaderCount; ++i) {
    names.push_back(kEmbeddedHeaders[i].path);
    texts.push_back(kEmbeddedHeaders[i].text);
  }
  std::vector<std::string> standard_texts;
  for (const StandardHeader& header : kStandardHeaders) standard_texts.push_back(text_of(header));
  for (size_t i = 0; i < standard_texts.size(); ++i) {
    names.push_back(kStandardHeaders[i].name);
    texts.push_back(standard_texts[i].c_str());
  }
  nvrtcProgram raw = nullptr;
  nvrtcResult result = nvrtcCreateProgram(&raw, request.source.c_str(), "fusedlinear_chain.cu",
                                          int(names.size()), texts.data(), names.data());
  if (result != NVRTC_SUCCESS) {
    error = std::string("NVRTC: ") + nvrtcGetErrorString(result);
    return false;
  }
  const ProgramHandle program(raw);
  for (const std::string& expression : request.name_expressions) {
    nvrtcAddNameExpression(raw, expression.c_str());
  }
  const std::vector<std::string> options = nvrtc_options(request);
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());
  // Not among nvrtc_options (a cache entry's key): the code is the same either way.
  const bool reuse = request.reuse_parsed_headers && precompiled_headers_available();
  std::unique_lock<std::mutex> heap_lock(precompiled_headers_mutex(), std::defer_lock);
  if (reuse) {
    heap_lock.lock();
    for (const char* option : {"-pch", "--pch-messages=false", "--pch-verbose=false"})
      option_pointers.push_back(option);
  }
  result = nvrtcCompileProgram(raw, int(option_pointers.size()), option_pointers.data());
  if (reuse) {
    grow_heap_if_exhausted(raw);
    heap_lock.unlock();
  }
  if (result != NVRTC_SUCCESS) {
    error = std::string("NVRTC: ") + nvrtcGetErrorString(result) + "\n" + log_of(raw);
    return false;
  }
  size_t size = 0;
  result = nvrtcGetCUBINSize(raw, &size);
  CompiledModule compiled;
  compiled.image.resize(size);
  if (result == NVRTC_SUCCESS) result = nvrtcGetCUBIN(raw, &compiled.image[0]);
  for (const std::string& expression : request.name_expressions) {
    const char* lowered = nullptr;
    if (result == NVRTC_SUCCESS) result = nvrtcGetLoweredName(raw, expression.c_str(), &lowered);
    if (result == NVRTC_SUCCESS) compiled.lowered_names.push_back(lowered);
  }
  if (result != NVRTC_SUCCESS) {
    error = std::string("NVRTC: ") + nvrtcGetErrorString(result);
    return false;
  }
  module = std::move(compiled);
  return true;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "";
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
}

std::string library_fingerprint() {
  std::string headers;
  for (int i = 0; i < kEmbeddedHeaderCount; ++i) {
    headers += kEmbeddedHeaders[i].path;
    headers += '\n';
    headers += kEmbeddedHeaders[i].text;
  }
  return std::string("fusedlinear ") + FUSEDLINEAR_VERSION + " headers " + fnv1a_hex(headers);
}

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
