// The platform a run is on, as reports name it: the BLAS, the CPU or GPU, libtorch's build
// settings, and the threads.
#include "app/platform.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kernels/cpu/epilogue.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace fusedlinear {

std::string sgemm_library() {
  void* sgemm = ::dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info where{};
  if (!sgemm || !::dladdr(sgemm, &where) || !where.dli_fname) return "";
  char* resolved = ::realpath(where.dli_fname, nullptr);
  std::string path = resolved ? resolved : where.dli_fname;
  std::free(resolved);
  return path;
}

namespace {

// Set by keep_blas_on_one_thread (prepare_blas_for_memory_limits): OpenBLAS keeps to the
// calling thread.
bool g_blas_on_one_thread = false;

// "model name" of /proc/cpuinfo (Linux), or "".
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      return line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
    }
  }
  return "";
}

// `key`=value from at::show_config()'s build settings ("BLAS_INFO" -> "mkl"), or "".
std::string build_setting(const std::string& key) {
  const std::string config = at::show_config();
  const size_t at = config.find(key + "=");
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 1;
  return config.substr(begin, config.find_first_of(", \n", begin) - begin);
}

}  // namespace

std::string blas_description() {
  // Which library libtorch's sgemm_ calls resolve to: the dynamic linker's choice (Debian's
  // libblas.so.3 alternative, LD_LIBRARY_PATH, ...), asked for its own name and threads.
  const std::string library = sgemm_library();
  const BlasLibrary blas(library);
  std::string name;
  int threads = 0;
  if (const auto config = blas_function<char* (*)()>(blas.get(), "openblas_get_config")) {
    name = config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
    if (const auto parallel = blas_function<int (*)()>(blas.get(), "openblas_get_parallel")) {
      const int kind = parallel();
      name += kind == 0 ? ", sequential" : kind == 1 ? ", pthreads" : ", OpenMP";
    }
    if (const auto core = blas_function<char* (*)()>(blas.get(), "openblas_get_corename")) {
      name += std::string(", ") + core() + " kernels";
    }
    if (const auto get = blas_function<int (*)()>(blas.get(), "openblas_get_num_threads"))
      threads = get();
  } else if (const auto version =
                 blas_function<const char* (*)()>(blas.get(), "bli_info_get_version_str")) {
    name = std::string("BLIS ") + version();
    if (const auto get = blas_function<long (*)()>(blas.get(), "bli_thread_get_num_threads")) {
      threads = int(get());
    }
  } else if (library.find("/blas/libblas.so") != std::string::npos) {
    name = "reference BLAS";  // Debian's libblas3: Netlib's Fortran, one thread
    threads = 1;
  } else if (!library.empty() && library.find("libtorch") == std::string::npos) {
    // Another BLAS (BLIS's libblas.so.3 exports only the BLAS functions): its folder and name.
    const size_t file = library.rfind('/');
    const size_t folder = file == 0 || file == std::string::npos ? 0 : library.rfind('/', file - 1);
    name = library.substr(folder == std::string::npos ? 0 : folder + 1);
  } else {
    // Linked into libtorch (the PyTorch wheel's MKL): what the build says; MKL's threads follow
    // at::set_num_threads.
    const std::string blas = build_setting("BLAS_INFO");
    name = "BLAS_INFO=" + (blas.empty() ? std::string("unknown") : blas) + " (built in)";
    if (blas == "mkl") threads = at::get_num_threads();
  }
  if (name == "reference BLAS") {
    static bool warned = false;
    if (!warned) {
      warned = true;
      std::cerr << "fusedlinear: warning: libtorch's GEMM runs on the reference BLAS (" << library
                << "), tens of times slower than an optimized one: install libopenblas0-pthread "
                   "(.ci/setup does)\n";
    }
  }
  // OpenBLAS takes its SSE3 (Prescott) kernels on a CPU it does not know (0.3.21 on Intel's
  // Sapphire Rapids), several times slower there; its OPENBLAS_CORETYPE chooses others.
  if (name.find(", Prescott kernels") != std::string::npos && __builtin_cpu_supports("avx2")) {
    name += std::string(" (OpenBLAS does not know this CPU; OPENBLAS_CORETYPE=") +
            (__builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell") + " runs faster kernels)";
  }
  std::ostringstream s;
  s << name << ", " << (threads > 0 ? std::to_string(threads) : std::string("?"))
    << (threads == 1 ? " thread" : " threads");
  if (!library.empty()) s << " (" << library << ")";
  return s.str();
}

void keep_blas_on_one_thread() { g_blas_on_one_thread = true; }

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
  at::set_num_threads(threads);
  // OpenBLAS and BLIS built with pthreads keep threads of their own.
  const BlasLibrary blas(sgemm_library());
  if (const auto set = blas_function<void (*)(int)>(blas.get(), "openblas_set_num_threads")) {
    set(g_blas_on_one_thread ? 1 : threads);
  }
  if (const auto set = blas_function<void (*)(long)>(blas.get(), "bli_thread_set_num_threads")) {
    set(threads);
  }
}

std::string device_name(const torch::Device& device) {
#ifdef FUSEDLINEAR_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getCurrentDeviceProperties()->name;
#endif
  const int threads = at::get_num_threads();
  const std::string model = cpu_model();
  return "CPU " + (model.empty() ? "" : model + " ") + "(" + std::to_string(threads) +
         (threads == 1 ? " thread)" : " threads)");
}

std::string cuda_version() {
#ifdef FUSEDLINEAR_WITH_CUDA
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  return std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
#else
  return "";
#endif
}

std::string platform_description(const torch::Device& device) {
  const std::string libtorch = std::string("libtorch ") + TORCH_VERSION + ", ";
  if (device.is_cuda()) return libtorch + "CUDA " + cuda_version() + ", " + device_name(device);
  return libtorch + device_name(device) + "; GEMM: " + blas_description() +
         "; fused ops: " + cpu::capability_name(cpu::capability()) + " loop";
}

}  // namespace fusedlinear
