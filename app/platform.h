// The platform a run is on (platform.cpp), as reports name it: the BLAS, the CPU or GPU,
// libtorch's build settings, and the threads.
#pragma once

#include <dlfcn.h>
#include <torch/torch.h>

#include <string>

namespace fusedlinear {

// "NVIDIA H200" on a GPU, "CPU AMD EPYC 9654 (2 threads)" on the CPU.
std::string device_name(const torch::Device& device);
// The CUDA runtime's version, "13.0"; "" without CUDA.
std::string cuda_version();
// "libtorch 2.11.0, CUDA 13.0, NVIDIA H200" or, on the CPU, "libtorch 1.13.1, CPU AMD EPYC (2
// threads); GEMM: <blas_description()>; fused ops: avx512 loop".
std::string platform_description(const torch::Device& device);
// The BLAS that libtorch's CPU GEMM calls and the threads it may use, e.g. "OpenBLAS 0.3.21
// DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64, pthreads, Haswell kernels, 2 threads
// (/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3)". The first call warns on stderr, in
// one line, when it is the reference BLAS.
std::string blas_description();
// --threads N: libtorch's threads (at::set_num_threads) and, where the BLAS keeps threads of its
// own (OpenBLAS, BLIS), the BLAS's (one under a memory limit: prepare_blas_for_memory_limits).
// 0 changes nothing.
void set_cpu_threads(int threads);

// The BLAS libtorch's sgemm_ resolves to, as prepare_blas_for_memory_limits (memory.h) needs it.
// The file the process's sgemm_ comes from, as the dynamic linker binds it, links resolved
// (Debian's /lib/x86_64-linux-gnu/libblas.so.3 is an alternative pointing into
// openblas-pthread/, blas/, ...); "" where none is exported (a BLAS linked into libtorch).
std::string sgemm_library();
// A function of a loaded library (`library` a dlopen handle, or RTLD_DEFAULT), or null.
template <class Fn>
Fn blas_function(void* library, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(library, name));
}
// A handle to the library sgemm_ comes from, so that its own functions are asked (another BLAS
// may be loaded as well: Debian's liblapack.so.3 can load OpenBLAS beside the reference BLAS).
struct BlasLibrary {
  explicit BlasLibrary(const std::string& path)
      : handle(path.empty() ? nullptr : ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {}
  ~BlasLibrary() {
    if (handle) ::dlclose(handle);
  }
  BlasLibrary(const BlasLibrary&) = delete;
  BlasLibrary& operator=(const BlasLibrary&) = delete;
  void* get() const { return handle ? handle : RTLD_DEFAULT; }
  void* handle;
};
// From now on OpenBLAS keeps to the calling thread: set_cpu_threads leaves its threads at one.
void keep_blas_on_one_thread();

}  // namespace fusedlinear
