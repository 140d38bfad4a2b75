// NVRTC, the CUDA Toolkit's run-time compiler, on a translation unit that includes the library's
// kernel headers: their text is embedded in the library at build time (embed_headers.cmake), so
// an installed library needs no source tree; CUDA's own headers (cuda_fp16.h, cccl/) come from the
// toolkit's include directory, found at run time. The standard headers the kernel headers include
// are given to NVRTC as libcu++'s (cuda::std), which is what NVRTC compiles. Needs no GPU, no CUDA
// runtime and no torch.
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/jit/kernel_cache.h"

namespace fusedlinear {
namespace cuda {
namespace jit {

// A translation unit and what to take from it.
struct NvrtcRequest {
  std::string family;  // the kernel family: "epilogue", "hopper"
  std::string source;  // includes the embedded headers by their paths
  // Each's lowered name is kept: "&ns::kernel<...>", or a constexpr call giving a kernel's address.
  std::vector<std::string> name_expressions;
  std::vector<std::string> options;  // added to the library's, e.g. "-ftz=true"
  std::string architecture;          // "sm_90a", "sm_80"
  // Whether NVRTC may keep the headers the unit starts with, parsed, for the process's later
  // units that start alike, and use those it kept (its automatic precompiled headers, from NVRTC
  // 12.8): the same code, the C++ front end's work done once. Off for comparisons.
  bool reuse_parsed_headers = true;
};

// Compiles `request` to a cubin. False, with `error` (a line, then NVRTC's log where it has one),
// where NVRTC or the toolkit's headers are missing or the source does not compile.
bool compile_with_nvrtc(const NvrtcRequest& request, CompiledModule& module, std::string& error);

// Every option NVRTC is given for `request`, the include directories included (part of a cache
// entry's key).
std::vector<std::string> nvrtc_options(const NvrtcRequest& request);

// The CUDA Toolkit's include directory: $CUDA_HOME/include or $CUDA_PATH/include, else the
// toolkit this library was built with, else /usr/local/cuda/include, the first that holds
// cuda_fp16.h and cccl/cuda/std; "" where none does.
std::string cuda_include_directory();

// "nvrtc 13.0", or "" where NVRTC does not answer.
std::string nvrtc_version();

// The library's version and a hash of the embedded headers' text: what a compiled kernel depends
// on in this library (part of a cache entry's key).
std::string library_fingerprint();

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
