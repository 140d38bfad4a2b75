// Memory: byte sizes, what the run may still allocate, the out-of-memory errors that say what
// to lower, and the BLAS made safe under a memory limit.
#include "app/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "app/cli.h"
#include "app/platform.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace fusedlinear {

std::string byte_size(double bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) bytes /= 1024, ++unit;
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, unit ? "%.2f %s" : "%.0f %s", bytes, kUnits[unit]);
  return buffer;
}

namespace {

// What a size whose bytes overflow libtorch's int64 byte count asks for.
const char* const kBeyondInt64 = "more than 8.00 EiB (the size overflows 64-bit byte counts)";

// How much an out-of-memory error from libtorch's allocators asked for ("7.50 GiB"; "" when it
// does not say), or nullopt for any other error. CPU: "... can't allocate memory: you tried to
// allocate 123 bytes ..."; CUDA: "CUDA out of memory. Tried to allocate 2.00 GiB ...".
std::optional<std::string> requested_memory(const std::string& message) {
  static const std::string kCpu = "you tried to allocate ", kCuda = "Tried to allocate ";
  if (const size_t at = message.find(kCpu); at != std::string::npos) {
    return byte_size(std::strtod(message.c_str() + at + kCpu.size(), nullptr));
  }
  if (const size_t at = message.find(kCuda); at != std::string::npos) {
    // "20.00 GiB", followed by "." or " (" and more about the device.
    std::istringstream words(message.substr(at + kCuda.size()));
    std::string number, unit;
    words >> number >> unit;
    while (!unit.empty() && (unit.back() == '.' || unit.back() == ',')) unit.pop_back();
    return number + " " + unit;
  }
  if (message.find("out of memory") != std::string::npos ||
      message.find("can't allocate memory") != std::string::npos) {
    return "";
  }
  // Sizes whose bytes do not fit in 64 bits (--batch 2147483647 --in-features 2147483647).
  if (message.find("Storage size calculation overflowed") != std::string::npos) {
    return kBeyondInt64;
  }
  return std::nullopt;
}

}  // namespace

UsageError out_of_memory_error(const Settings& settings, const std::string& requested) {
  // What sets the sizes: --input's rows or --batch(es); the file's features or the options.
  const std::string batch = settings.command == "bench" ? "--batches" : "--batch";
  const std::string advice =
      !settings.input.empty() ? "use a smaller --input" +
                                    std::string(!settings.weights.empty()
                                                    ? " or a smaller model than --weights"
                                                    : ", or lower --in-features or --out-features")
      : !settings.weights.empty() ? "lower " + batch + ", or use a smaller model than --weights"
                                  : "lower " + batch + ", --in-features or --out-features";
  return UsageError("out of memory on " + settings.device.str() +
                    (requested.empty() ? "" : ": tried to allocate " + requested) + "; " + advice);
}

// The bytes this process may still allocate on `device`, or infinity where it cannot tell: on
// the CPU the least of what the system has available (MemAvailable and free swap), the headroom
// under an address-space limit (ulimit -v) and under its cgroup's memory.max; on a GPU its free
// memory.
double available_bytes(const torch::Device& device) {
#ifdef FUSEDLINEAR_WITH_CUDA
  if (device.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    return cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess ? double(free_bytes) : INFINITY;
  }
#endif
  double available = INFINITY, memory = -1, swap = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    const double kib = std::strtod(line.c_str() + line.find(':') + 1, nullptr);
    if (line.rfind("MemAvailable:", 0) == 0) memory = kib * 1024;
    if (line.rfind("SwapFree:", 0) == 0) swap = kib * 1024;
  }
  if (memory >= 0) available = memory + swap;
  struct rlimit limit {};
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && statm >> pages) {
    available =
        std::min(available, double(limit.rlim_cur) - pages * double(::sysconf(_SC_PAGESIZE)));
  }
  std::ifstream cgroup("/proc/self/cgroup");
  for (std::string line; std::getline(cgroup, line);) {
    if (line.rfind("0::", 0) != 0) continue;  // cgroup v2's one hierarchy
    const std::string folder = "/sys/fs/cgroup" + line.substr(3);
    double max = 0, current = 0;
    std::ifstream max_file(folder + "/memory.max"), current_file(folder + "/memory.current");
    if (max_file >> max && current_file >> current) available = std::min(available, max - current);
  }
  return std::max(available, 0.0);
}

void check_fits(const Settings& settings, double bytes, const torch::Device& device,
                const std::string& what) {
  if (bytes >= 9223372036854775808.0) throw out_of_memory_error(settings, kBeyondInt64);
  const double available = available_bytes(device);
  if (std::isfinite(available) && bytes > available) {
    throw out_of_memory_error(settings, byte_size(bytes) + " for " + what + " (" +
                                            byte_size(available) + " available on " + device.str() +
                                            ")");
  }
}

UsageError usage_error(const c10::Error& error, const Settings& settings, const std::string& what) {
  const std::string message = error.what_without_backtrace();
  if (const auto requested = requested_memory(message)) {
    return out_of_memory_error(settings, *requested);
  }
  const std::string first_line = message.substr(0, message.find('\n'));
  return UsageError((what.empty() ? "libtorch " TORCH_VERSION ": "
                                  : what + ": libtorch " TORCH_VERSION " cannot run it: ") +
                    first_line);
}

void run_in_context(const std::string& model, const Settings& settings,
                    const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    throw usage_error(e, settings,
                      model + " in " + dtype_name(settings.dtype) + " on " + settings.device.str());
  }
}

namespace {

// "the address-space limit of 585.94 MiB (ulimit -v 600000)", or "" without a limit.
std::string memory_limit() {
  for (const auto& [resource, name, flag] :
       {std::tuple{RLIMIT_AS, "address-space", "-v"}, std::tuple{RLIMIT_DATA, "data", "-d"}}) {
    struct rlimit limit {};
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      return std::string("the ") + name + " limit of " + byte_size(double(limit.rlim_cur)) +
             " (ulimit " + flag + " " + std::to_string(limit.rlim_cur / 1024) + ")";
    }
  }
  return "";
}

}  // namespace

void prepare_blas_for_memory_limits() {
  const std::string limit = memory_limit();
  if (limit.empty()) return;
  const BlasLibrary blas(sgemm_library());
  using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);
  const auto set = blas_function<void (*)(int)>(blas.get(), "openblas_set_num_threads");
  const auto sgemm = blas_function<Sgemm>(blas.get(), "sgemm_");
  if (!set || !sgemm) return;  // not OpenBLAS: nothing known to loop
  // Threads of OpenBLAS whose buffers failed as it started would take a share of every GEMM
  // and never finish it; the calling thread alone never waits for them.
  keep_blas_on_one_thread();
  set(1);
  const std::string message =
      "out of memory on cpu: the BLAS cannot allocate its work buffer under " + limit +
      "; raise the limit";
  const std::string line = "fusedlinear: error: " + message + "\n";
  // OpenBLAS's buffer is 128 MiB on x86-64: without room for it, say so at once.
  void* probe = std::malloc(size_t{129} << 20);
  if (!probe) throw UsageError(message);
  std::free(probe);
  struct Watch {
    std::mutex mutex;
    std::condition_variable changed;
    bool done = false;
  };
  const auto watch = std::make_shared<Watch>();
  std::thread watchdog;
  try {
    watchdog = std::thread([watch, line] {
      std::unique_lock<std::mutex> lock(watch->mutex);
      if (!watch->changed.wait_for(lock, std::chrono::seconds(10), [&] { return watch->done; })) {
        // The GEMM below spins in OpenBLAS's allocation loop: nothing returns from it.
        if (::write(2, line.data(), line.size()) < 0) {
          // Nothing more to say it with.
        }
        ::_exit(2);
      }
    });
  } catch (const std::system_error&) {
    throw UsageError(message);  // no memory even for a thread
  }
  // 128 x 128 x 128: above OpenBLAS's small-matrix path, which takes no buffer.
  const int n = 128;
  const float one = 1, zero = 0;
  const std::vector<float> a(size_t(n) * n, 1.0f);
  std::vector<float> c(size_t(n) * n);
  sgemm("N", "N", &n, &n, &n, &one, a.data(), &n, a.data(), &n, &zero, c.data(), &n);
  {
    const std::lock_guard<std::mutex> lock(watch->mutex);
    watch->done = true;
  }
  watch->changed.notify_one();
  watchdog.join();
}

}  // namespace fusedlinear
