// The disk cache of kernels compiled at run time (kernels/cuda/jit/): an entry a compiled module,
// under a name hashed from everything that made it (the kernel family, the source, the kernels
// asked for, the GPU's architecture, the versions of the library, NVRTC and the driver), holding
// that key in full so that a hash collision or a stale entry is told from a hit. Entries are
// written to a temporary file and renamed into place, so a reader sees a whole entry or none and
// two processes writing the same one both succeed. A missing, unreadable, read-only or corrupt
// cache never stops a run: load and store report false (with one line on stderr where it is not
// a plain miss) and the caller compiles. Torch-free and GPU-free, so that it is tested on any
// machine.
#pragma once

#include <string>
#include <vector>

namespace fusedlinear {
namespace cuda {
namespace jit {

// A compiled module: its image (a cubin) and the lowered names of the kernels and variables asked
// for, in the order asked.
struct CompiledModule {
  std::string image;
  std::vector<std::string> lowered_names;
};

// What makes an entry.
struct KernelCacheKey {
  std::string family;        // the kernel family: "epilogue", "hopper"
  std::string source;        // the translation unit's text
  std::string kernels;       // the name expressions asked for, and the compile options
  std::string architecture;  // "sm_90a"
  std::string versions;      // the library's, NVRTC's and the driver's
  // The key as one text, and its 64-bit FNV-1a hash in hexadecimal (the entry's file name).
  std::string text() const;
  std::string file_name() const;
};

// The cache's directory: $FUSEDLINEAR_CACHE_DIR, else $XDG_CACHE_HOME/fusedlinear, else
// $HOME/.cache/fusedlinear; "" where none of them is set.
std::string kernel_cache_directory();

class KernelCache {
 public:
  // `directory` is created at the first store; "" makes a cache that holds nothing.
  explicit KernelCache(std::string directory);

  // The module stored under `key`: false for a miss, silently, and for an entry that cannot be
  // read or is not a whole entry of this key and format, with a notice.
  bool load(const KernelCacheKey& key, CompiledModule& module) const;
  // Stores `module` under `key`; false, with a notice, where the directory or the file cannot be
  // written (the module is then kept in memory only).
  bool store(const KernelCacheKey& key, const CompiledModule& module) const;

  const std::string& directory() const { return directory_; }
  std::string path_of(const KernelCacheKey& key) const;

 private:
  std::string directory_;
};

// The 64-bit FNV-1a hash of `bytes` in 16 hexadecimal digits.
std::string fnv1a_hex(const std::string& bytes);

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
