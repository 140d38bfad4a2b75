// The compile step and the disk cache of run-time chains (kernels/cuda/jit/), which need no GPU:
// NVRTC compiles chains covering the whole vocabulary for sm_90a, and kernels of the Hopper GEMM,
// the small-batch kernels and the fused-MLP kernel with chains in their epilogues; the cache finds
// what it stored, and a missing, read-only or corrupt cache, or two writers of one entry, leave a
// run correct. Torch-free: built wherever NVRTC is.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/jit/chain_units.h"
#include "kernels/cuda/jit/kernel_cache.h"
#include "kernels/cuda/jit/nvrtc_compile.h"
#include "kernels/math/program.h"

namespace fusedlinear {
namespace cuda {
namespace jit {
namespace {

// --- NVRTC -----------------------------------------------------------------------------------

// Chains as a declaration writes them, together holding every functor of the vocabulary.
const std::vector<std::string>& chains_of_the_whole_vocabulary() {
  static const std::vector<std::string> chains = {
      "act::Chain(act::AddParam{\"add_value\"}, act::Swish{0x1p+0f}, act::Tanh{}, act::Gelu{}, "
      "act::Hardtanh{-0x1p+0f, 0x1p+0f})",
      "act::Chain(act::Mish{}, act::Mish{})",
      "act::Chain(act::Relu{}, act::Relu6{}, act::LeakyRelu{0x1.99999ap-3f}, act::Elu{0x1p-1f}, "
      "act::Selu{}, act::Celu{0x1p+1f}, act::GeluTanh{}, act::Silu{})",
      "act::Chain(act::Sigmoid{}, act::Clamp{-INFINITY, 0x1p+0f}, act::Hardsigmoid{}, "
      "act::Hardswish{}, act::Softplus{0x1p+1f, 0x1.4p+3f}, act::Softsign{}, act::Tanhshrink{}, "
      "act::Logsigmoid{}, act::Square{})",
      "act::Chain(act::AddScalar{0x1.8p+0f}, act::SubScalar{0x1p-2f}, act::MulScalar{-0x1.8p+1f}, "
      "act::DivScalar{0x1.4p+1f}, act::SubParam{\"a\"}, act::MulParam{\"b\"}, "
      "act::DivParam{\"c\"})",
      "act::Chain()"};
  return chains;
}

// `request` compiled by NVRTC into `module`, how long it took printed after `what`; false with
// NVRTC's log in `error` where it fails.
bool compile_timed(const NvrtcRequest& request, const std::string& what, CompiledModule& module,
                   std::string& error) {
  const auto start = std::chrono::steady_clock::now();
  const bool compiled = compile_with_nvrtc(request, module, error);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << what << ": compiled by NVRTC for " << request.architecture << " in " << seconds
            << " s\n";
  return compiled;
}

#define SKIP_WITHOUT_TOOLKIT_HEADERS()                                                       \
  if (cuda_include_directory().empty())                                                      \
  GTEST_SKIP() << "the CUDA Toolkit's headers (cuda_fp16.h, cccl/) are not on this machine " \
                  "(set CUDA_HOME): NVRTC cannot compile the kernels"

TEST(NvrtcCompile, EveryFunctorOfTheVocabularyCompilesForHopper) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  std::string all;
  for (const std::string& chain : chains_of_the_whole_vocabulary()) all += chain;
  // The list above holds every functor: a new one must be added to it.
  const char* const names[] = {
#define FUSEDLINEAR_NAME(F) #F,
      FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_NAME)
#undef FUSEDLINEAR_NAME
  };
  for (const char* name : names) {
    EXPECT_NE(all.find(std::string("act::") + name + "{"), std::string::npos) << name;
  }
  // Each chain for float32, the first for each element type.
  for (size_t i = 0; i < chains_of_the_whole_vocabulary().size(); ++i) {
    for (const ElementType type :
         {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16}) {
      if (i > 0 && type != ElementType::kFloat32) continue;
      const std::string& chain = chains_of_the_whole_vocabulary()[i];
      CompiledModule module;
      std::string error;
      ASSERT_TRUE(compile_with_nvrtc(epilogue_unit(chain, type, "sm_90a"), module, error))
          << chain << "\n"
          << error;
      // An ELF image, and a lowered (mangled) name for each kernel and the chain's value.
      ASSERT_GT(module.image.size(), 4u);
      EXPECT_EQ(module.image.substr(0, 4),
                "\x7f"
                "ELF");
      ASSERT_EQ(module.lowered_names.size(), size_t(kEpilogueUnitChainValue + 1));
      for (const std::string& name : module.lowered_names) EXPECT_EQ(name.substr(0, 2), "_Z");
      EXPECT_NE(module.lowered_names[0], module.lowered_names[3]);
    }
  }
}

TEST(NvrtcCompile, OtherArchitecturesCompile) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  for (const char* architecture : {"sm_80"}) {
    CompiledModule module;
    std::string error;
    EXPECT_TRUE(compile_with_nvrtc(
        epilogue_unit(chains_of_the_whole_vocabulary()[0], ElementType::kBFloat16, architecture),
        module, error))
        << architecture << "\n"
        << error;
  }
}

// One kernel of the Hopper GEMM with a chain in its epilogue, as the library compiles it at a
// run-time chain's first forward on such a GPU: bf16x3's promoted products on the 128 x 128 tile,
// float32 x; and a bfloat16 model's. The time each takes is printed: the library compiles each
// kernel at its first use, not all of them at the chain's first call.
TEST(NvrtcCompile, HopperGemmKernelsCompileForHopper) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  HopperInstance promoted;
  promoted.type = ElementType::kFloat32;
  promoted.products = "kBf16x3Promoted";
  promoted.tile_n = 128;
  promoted.consumer_rows = 64;
  HopperInstance half_model;
  half_model.type = ElementType::kBFloat16;
  half_model.products = "kOne";
  half_model.tile_n = 256;
  half_model.consumer_rows = 64;
  for (const HopperInstance& instance : {promoted, half_model}) {
    CompiledModule module;
    std::string error;
    const std::string what =
        "the Hopper GEMM's " + instance.products + " kernel on " + std::to_string(instance.tile_n) +
        " columns, " + (instance.type == ElementType::kFloat32 ? "float32" : "bfloat16") + " x";
    ASSERT_TRUE(compile_timed(hopper_unit(chains_of_the_whole_vocabulary()[0], instance, "sm_90a"),
                              what, module, error))
        << instance.products << "\n"
        << error;
    EXPECT_EQ(module.image.substr(0, 4),
              "\x7f"
              "ELF");
    ASSERT_EQ(module.lowered_names.size(), size_t(kHopperUnitChainValue + 1));
    for (const std::string& name : module.lowered_names) EXPECT_EQ(name.substr(0, 2), "_Z");
    // The kernel is in the image under its lowered name, which the library loads it by.
    EXPECT_NE(module.image.find(module.lowered_names[0]), std::string::npos);
  }
}

// Every small-batch kernel variant with a chain in its epilogue, as the library compiles one at a
// run-time chain's first forward that runs it: each variant in the element type it takes, the
// kernel with and without the TMA's tile copies and the reduce kernel, each under its lowered name
// in the image. The time each takes is printed.
TEST(NvrtcCompile, SmallBatchKernelsCompileForHopper) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  const std::pair<const char*, ElementType> variants[] = {
      {"kFloatRows1", ElementType::kFloat32},     {"kFloatRows4", ElementType::kFloat32},
      {"kFloatRows8", ElementType::kFloat32},     {"kFloatLaneRows", ElementType::kFloat32},
      {"kFloatUnaligned", ElementType::kFloat32}, {"kBf16TensorCore", ElementType::kFloat32},
      {"kBf16Unaligned", ElementType::kFloat32},  {"kBf16x3TensorCore", ElementType::kFloat32},
      {"kBf16x3Staged16", ElementType::kFloat32}, {"kBf16x3Staged32", ElementType::kFloat32},
      {"kBf16x3Staged64", ElementType::kFloat32}, {"kBf16x3Unaligned", ElementType::kFloat32},
      {"kHalfTensorCore", ElementType::kFloat16}, {"kHalfTensorCore", ElementType::kBFloat16},
      {"kHalfUnaligned", ElementType::kBFloat16}};
  for (const auto& [variant, type] : variants) {
    CompiledModule module;
    std::string error;
    ASSERT_TRUE(
        compile_timed(skinny_unit(chains_of_the_whole_vocabulary()[0], type, variant, "sm_90a"),
                      std::string("the small-batch kernel ") + variant, module, error))
        << variant << "\n"
        << error;
    ASSERT_EQ(module.lowered_names.size(), size_t(kSkinnyUnitChainValue + 1));
    for (int i = 0; i < kSkinnyUnitChainValue; ++i) {
      EXPECT_NE(module.image.find(module.lowered_names[i]), std::string::npos) << variant << i;
    }
    // No variable in the module holding a kernel's address (a variant's `kernel` named through
    // one): ptxas compiles a kernel whose address is stored with more registers than the library's.
    EXPECT_EQ(module.image.find("6kernelI"), std::string::npos) << variant;
  }
}

// The fused-MLP kernel with a model's layers' chains compiled in: an instance of each form, as
// its launcher names it (fused_mlp.cuh: kernel_for), for a model of three layers (a chain with a
// parameter and rewrites, none, a cheap one).
TEST(NvrtcCompile, FusedMlpKernelsCompileForHopper) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  const std::vector<std::string> layers = {chains_of_the_whole_vocabulary()[0], "act::Chain()",
                                           "act::Chain(act::Relu{})"};
  const char* instances[] = {
      "fused_mlp_kernel<float, fusedlinear::cuda::mlp::FloatShape<1>",
      "fused_mlp_kernel<__half, fusedlinear::cuda::mlp::MmaShape",
      "cluster_mlp_kernel<__nv_bfloat16, fusedlinear::cuda::mlp::ClusterShape<__nv_bfloat16, 8>",
      "resident_mlp_kernel<float, 2, 4, fusedlinear::cuda::mlp::RuntimeShape",
      "resident_mlp_kernel<__half, 1, 4, fusedlinear::cuda::mlp::CompiledShape<2u, 32, 64, 64, 16>",
      "resident_mlp_kernel<__half, 1, 8, fusedlinear::cuda::mlp::RuntimeShape",
      "streamed_mlp_kernel<__nv_bfloat16, 1, 16"};
  for (const char* instance : instances) {
    CompiledModule module;
    std::string error;
    ASSERT_TRUE(compile_timed(mlp_unit(layers, instance, "sm_90a"),
                              std::string("the fused-MLP kernel ") + instance + ">", module, error))
        << instance << "\n"
        << error;
    ASSERT_EQ(module.lowered_names.size(), size_t(1));
    EXPECT_NE(module.image.find(module.lowered_names[0]), std::string::npos) << instance;
  }
}

// The code sections of an ELF image (a cubin), by name: what a kernel runs, without the symbol
// tables, which differ from one compile to the next.
std::map<std::string, std::string> code_sections(const std::string& image) {
  std::map<std::string, std::string> sections;
  const auto read = [&](size_t at, auto value) {
    if (at + sizeof(value) > image.size()) throw std::runtime_error("a truncated ELF image");
    std::memcpy(&value, image.data() + at, sizeof(value));
    return value;
  };
  const uint64_t table = read(0x28, uint64_t{});
  const uint16_t entry = read(0x3A, uint16_t{}), count = read(0x3C, uint16_t{}),
                 names = read(0x3E, uint16_t{});
  const uint64_t names_at = read(table + names * entry + 0x18, uint64_t{});
  for (uint16_t i = 0; i < count; ++i) {
    const size_t header = table + size_t(i) * entry;
    const std::string name(image.c_str() + names_at + read(header, uint32_t{}));
    const uint64_t at = read(header + 0x18, uint64_t{}), size = read(header + 0x20, uint64_t{});
    if (name.rfind(".text", 0) == 0) sections[name] = image.substr(at, size);
  }
  return sections;
}

// NVRTC keeps a unit's parsed headers for the process's later units (reuse_parsed_headers): the
// same code as compiled without them, for the unit that keeps them and those that use them. The
// times are printed (the front end's share of an epilogue's compile is what it saves).
TEST(NvrtcCompile, ReusedParsedHeadersGiveTheSameCode) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  for (int i = 0; i < 3; ++i) {
    const std::string& chain = chains_of_the_whole_vocabulary()[i];
    const ElementType type = i == 2 ? ElementType::kBFloat16 : ElementType::kFloat32;
    CompiledModule reused, alone;
    std::string error;
    NvrtcRequest request = epilogue_unit(chain, type, "sm_90a");
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(compile_with_nvrtc(request, reused, error)) << error;
    const double reused_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    request.reuse_parsed_headers = false;
    ASSERT_TRUE(compile_with_nvrtc(request, alone, error)) << error;
    const std::map<std::string, std::string> code = code_sections(alone.image);
    EXPECT_FALSE(code.empty());
    EXPECT_EQ(code_sections(reused.image), code) << chain;
    EXPECT_EQ(reused.lowered_names, alone.lowered_names);
    std::cout << "epilogue unit " << i << " with the parsed headers kept or reused: " << reused_ms
              << " ms\n";
  }
}

TEST(NvrtcCompile, ACompileErrorIsReportedWithTheLog) {
  SKIP_WITHOUT_TOOLKIT_HEADERS();
  CompiledModule module;
  std::string error;
  EXPECT_FALSE(compile_with_nvrtc(
      epilogue_unit("act::Chain(act::NoSuchFunctor{})", ElementType::kFloat32, "sm_90a"), module,
      error));
  EXPECT_NE(error.find("NVRTC"), std::string::npos) << error;
  EXPECT_NE(error.find("NoSuchFunctor"), std::string::npos) << error;
}

TEST(NvrtcCompile, VersionsAreKnown) {
  EXPECT_EQ(nvrtc_version().rfind("nvrtc ", 0), 0u) << nvrtc_version();
  EXPECT_EQ(library_fingerprint().rfind("fusedlinear ", 0), 0u);
}

// --- the disk cache --------------------------------------------------------------------------

// A fresh directory under the system's temporary one.
std::string fresh_directory() {
  char name[] = "/tmp/fusedlinear_jit_cache_XXXXXX";
  if (!::mkdtemp(name)) throw std::runtime_error("mkdtemp failed");
  return name;
}

KernelCacheKey key_of(const std::string& source) {
  KernelCacheKey key;
  key.source = source;
  key.kernels = "&kernel<1>\n-ftz=true\n";
  key.architecture = "sm_90a";
  key.versions = "fusedlinear test; nvrtc 13.0; driver 13000";
  return key;
}

CompiledModule module_of(const std::string& image) {
  CompiledModule module;
  module.image = image;
  module.lowered_names = {"_Z6kernelILi1EEvv", "_Z1x"};
  return module;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(KernelCache, StoresAndFindsAnEntryOfItsKeyOnly) {
  const KernelCache cache(fresh_directory() + "/nested/dir");  // created at the first store
  const std::string image(
      "\x7f"
      "ELF\0binary\n\xff",
      13);
  CompiledModule read;
  EXPECT_FALSE(cache.load(key_of("a"), read));  // a miss, silently
  ASSERT_TRUE(cache.store(key_of("a"), module_of(image)));
  ASSERT_TRUE(cache.load(key_of("a"), read));
  EXPECT_EQ(read.image, image);
  EXPECT_EQ(read.lowered_names, module_of(image).lowered_names);
  EXPECT_FALSE(cache.load(key_of("b"), read));
  KernelCacheKey other_driver = key_of("a");
  other_driver.versions += "1";
  EXPECT_NE(other_driver.file_name(), key_of("a").file_name());
  EXPECT_FALSE(cache.load(other_driver, read));
}

TEST(KernelCache, DirectoryFromTheEnvironment) {
  const char* saved[3];
  const char* names[3] = {"FUSEDLINEAR_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) saved[i] = std::getenv(names[i]);
  const std::string kept[3] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "",
                               saved[2] ? saved[2] : ""};
  ::setenv("FUSEDLINEAR_CACHE_DIR", "/a", 1);
  ::setenv("XDG_CACHE_HOME", "/b", 1);
  ::setenv("HOME", "/c", 1);
  EXPECT_EQ(kernel_cache_directory(), "/a");
  ::unsetenv("FUSEDLINEAR_CACHE_DIR");
  EXPECT_EQ(kernel_cache_directory(), "/b/fusedlinear");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(kernel_cache_directory(), "/c/.cache/fusedlinear");
  ::unsetenv("HOME");
  EXPECT_EQ(kernel_cache_directory(), "");
  for (int i = 0; i < 3; ++i) {
    if (saved[i]) ::setenv(names[i], kept[i].c_str(), 1);
  }
}

TEST(KernelCache, CorruptEntriesAreRecompiledWithANotice) {
  const KernelCache cache(fresh_directory());
  ASSERT_TRUE(cache.store(key_of("a"), module_of(std::string(1000, 'x'))));
  const std::string path = cache.path_of(key_of("a"));
  const std::string whole = read_all(path);
  const std::vector<std::string> damaged = {
      whole.substr(0, whole.size() / 2),                  // truncated
      whole.substr(0, 10),                                // truncated in the magic line
      "",                                                 // empty
      std::string(5000, '\x5a'),                          // garbage
      "fusedlinear kernel cache 0\n" + whole.substr(27),  // another format's
      whole.substr(0, 600) + "y" + whole.substr(601),     // a byte changed
  };
  for (const std::string& bytes : damaged) {
    write_all(path, bytes);
    CompiledModule read;
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cache.load(key_of("a"), read));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("fusedlinear: notice: the kernel cache entry"), std::string::npos) << err;
    EXPECT_NE(err.find("recompiling"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  // An entry of another key under this key's name (a hash collision) is not taken either.
  const KernelCache other(fresh_directory());
  ASSERT_TRUE(other.store(key_of("b"), module_of("other")));
  write_all(path, read_all(other.path_of(key_of("b"))));
  CompiledModule read;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.load(key_of("a"), read));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("another key"), std::string::npos);
  // And a new store replaces the damaged entry.
  ASSERT_TRUE(cache.store(key_of("a"), module_of("fresh")));
  ASSERT_TRUE(cache.load(key_of("a"), read));
  EXPECT_EQ(read.image, "fresh");
}

TEST(KernelCache, UnwritableDirectoriesOnlyNotice) {
  const std::string directory = fresh_directory();
  write_all(directory + "/file", "in the way");
  std::vector<KernelCache> unwritable = {KernelCache(directory + "/file"),
                                         KernelCache(directory + "/file/sub"),
                                         KernelCache("/proc/fusedlinear_cannot_be_made")};
  if (::geteuid() != 0) {  // root writes to read-only directories
    ASSERT_EQ(::chmod(directory.c_str(), 0555), 0);
    unwritable.emplace_back(directory);
    unwritable.emplace_back(directory + "/sub");
  }
  ::testing::internal::CaptureStderr();
  for (const KernelCache& cache : unwritable) {
    EXPECT_FALSE(cache.store(key_of("a"), module_of("x"))) << cache.directory();
    CompiledModule read;
    EXPECT_FALSE(cache.load(key_of("a"), read)) << cache.directory();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  // One line a process, however many stores fail.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("kept for this run only"), std::string::npos) << err;
  ::chmod(directory.c_str(), 0755);
  // No temporary file is left behind.
  EXPECT_EQ(::unlink((directory + "/file").c_str()), 0);
  EXPECT_EQ(::rmdir(directory.c_str()), 0);
}

// A disk that fills while an entry is written (the file-size limit stands in for it: writes past
// it fail as on a full disk): the store fails, leaves no partial file, and the entry stays a miss.
TEST(KernelCache, AFullDiskLeavesNoPartialEntry) {
  const std::string directory = fresh_directory();
  const KernelCache cache(directory);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead
    struct rlimit limit;
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 4096;
    const bool limited = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
    CompiledModule read;
    const bool ok = limited && !cache.store(key_of("a"), module_of(std::string(100000, 'q'))) &&
                    !cache.load(key_of("a"), read);
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Nothing is left behind, and a store with room writes the entry whole.
  EXPECT_EQ(::rmdir(directory.c_str()), 0) << "the failed store left a file in " << directory;
  ASSERT_EQ(::mkdir(directory.c_str(), 0755), 0);
  ASSERT_TRUE(cache.store(key_of("a"), module_of("fits")));
  CompiledModule read;
  ASSERT_TRUE(cache.load(key_of("a"), read));
  EXPECT_EQ(read.image, "fits");
}

TEST(KernelCache, AnEmptyDirectoryHoldsNothing) {
  const KernelCache none("");
  CompiledModule read;
  EXPECT_FALSE(none.store(key_of("a"), module_of("x")));
  EXPECT_FALSE(none.load(key_of("a"), read));
}

TEST(KernelCache, ProcessesRacingOnOneEntryAllSucceed) {
  const KernelCache cache(fresh_directory());
  const std::string image(200000, 'q');
  constexpr int kWriters = 8;
  std::vector<pid_t> children;
  for (int i = 0; i < kWriters; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Each writes the entry many times and reads it back whole between its writes.
      bool ok = true;
      for (int round = 0; round < 20 && ok; ++round) {
        CompiledModule read;
        ok = cache.store(key_of("a"), module_of(image)) &&
             (!cache.load(key_of("a"), read) || read.image == image);
      }
      std::_Exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CompiledModule read;
  ASSERT_TRUE(cache.load(key_of("a"), read));
  EXPECT_EQ(read.image, image);
}

}  // namespace
}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
