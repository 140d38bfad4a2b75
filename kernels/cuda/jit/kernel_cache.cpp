// The disk cache of kernels compiled at run time (kernel_cache.h).
#include "kernels/cuda/jit/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fusedlinear {
namespace cuda {
namespace jit {
namespace {

// The first line of every entry; a format of another version of the library reads as corrupt.
constexpr char kMagic[] = "fusedlinear kernel cache 1\n";

uint64_t fnv1a(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void notice(const std::string& message) {
  std::fprintf(stderr, "fusedlinear: notice: %s\n", message.c_str());
}

// An entry: the magic line, then length-prefixed fields (a decimal length, a newline, the bytes),
// then the hash of all that precedes it, in hexadecimal.
void put_field(std::string& out, const std::string& field) {
  out += std::to_string(field.size());
  out += '\n';
  out += field;
}

bool get_field(const std::string& in, size_t& at, std::string& field) {
  const size_t newline = in.find('\n', at);
  if (newline == std::string::npos || newline == at || newline - at > 19) return false;
  uint64_t size = 0;
  for (size_t i = at; i < newline; ++i) {
    if (in[i] < '0' || in[i] > '9') return false;
    size = size * 10 + uint64_t(in[i] - '0');
  }
  if (size > in.size() - (newline + 1)) return false;
  field.assign(in, newline + 1, size);
  at = newline + 1 + size;
  return true;
}

std::string encode(const std::string& key_text, const CompiledModule& module) {
  std::string out = kMagic;
  put_field(out, key_text);
  put_field(out, std::to_string(module.lowered_names.size()));
  for (const std::string& name : module.lowered_names) put_field(out, name);
  put_field(out, module.image);
  out += fnv1a_hex(out);
  return out;
}

// Why `bytes` is not an entry of `key_text`, or "" with `module` filled.
std::string decode(const std::string& bytes, const std::string& key_text, CompiledModule& module) {
  const size_t magic_size = sizeof kMagic - 1;
  if (bytes.compare(0, magic_size, kMagic) != 0) return "not an entry of this format";
  if (bytes.size() < magic_size + 16) return "truncated";
  const std::string body = bytes.substr(0, bytes.size() - 16);
  if (fnv1a_hex(body) != bytes.substr(bytes.size() - 16)) return "truncated or damaged";
  size_t at = magic_size;
  std::string field;
  if (!get_field(body, at, field)) return "damaged";
  if (field != key_text) return "an entry of another key";
  if (!get_field(body, at, field) || field.empty() || field.size() > 6) return "damaged";
  const long count = std::strtol(field.c_str(), nullptr, 10);
  CompiledModule read;
  for (long i = 0; i < count; ++i) {
    if (!get_field(body, at, field)) return "damaged";
    read.lowered_names.push_back(field);
  }
  if (!get_field(body, at, read.image) || at != body.size()) return "damaged";
  module = std::move(read);
  return "";
}

// Creates `directory` and its parents; false where it does not exist afterwards.
bool make_directories(const std::string& directory) {
  for (size_t slash = directory.find('/', 1);; slash = directory.find('/', slash + 1)) {
    const std::string part = directory.substr(0, slash);
    if (!part.empty()) ::mkdir(part.c_str(), 0755);  // an existing one is fine: checked below
    if (slash == std::string::npos) break;
  }
  struct stat info;
  return ::stat(directory.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

std::string fnv1a_hex(const std::string& bytes) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(fnv1a(bytes)));
  return text;
}

std::string KernelCacheKey::text() const {
  std::string out;
  put_field(out, family);
  put_field(out, source);
  put_field(out, kernels);
  put_field(out, architecture);
  put_field(out, versions);
  return out;
}

std::string KernelCacheKey::file_name() const { return fnv1a_hex(text()) + ".entry"; }

std::string kernel_cache_directory() {
  if (!env("FUSEDLINEAR_CACHE_DIR").empty()) return env("FUSEDLINEAR_CACHE_DIR");
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/fusedlinear";
  if (!env("HOME").empty()) return env("HOME") + "/.cache/fusedlinear";
  return "";
}

KernelCache::KernelCache(std::string directory) : directory_(std::move(directory)) {}

std::string KernelCache::path_of(const KernelCacheKey& key) const {
  return directory_ + "/" + key.file_name();
}

bool KernelCache::load(const KernelCacheKey& key, CompiledModule& module) const {
  if (directory_.empty()) return false;
  const std::string path = path_of(key);
  struct stat info;
  // A miss; where the directory cannot be used either, the store that follows says so.
  if (::stat(path.c_str(), &info) != 0) return false;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    notice("cannot read the kernel cache entry " + path + ": recompiling");
    return false;
  }
  std::ostringstream bytes;
  bytes << file.rdbuf();
  if (file.bad()) {
    notice("cannot read the kernel cache entry " + path + ": recompiling");
    return false;
  }
  const std::string why = decode(bytes.str(), key.text(), module);
  if (!why.empty()) {
    notice("the kernel cache entry " + path + " is " + why + ": recompiling");
    return false;
  }
  return true;
}

bool KernelCache::store(const KernelCacheKey& key, const CompiledModule& module) const {
  if (directory_.empty()) return false;
  const std::string cannot = "cannot write the kernel cache in " + directory_;
  // One notice a process: a cache that cannot be written fails every store alike.
  static std::atomic<bool> noticed{false};
  const auto failed = [&](const std::string& why) {
    if (!noticed.exchange(true)) {
      notice(cannot + " (" + why + "): the kernels compiled are kept for this run only");
    }
    return false;
  };
  if (!make_directories(directory_)) return failed("cannot create the directory");
  // A temporary name of this process and call, renamed over the entry: readers and other
  // writers see the old entry, or none, or a whole new one.
  static std::atomic<unsigned> serial{0};
  const std::string path = path_of(key);
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial.fetch_add(1));
  const std::string bytes = encode(key.text(), module);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  bool written = fd >= 0;
  for (size_t at = 0; written && at < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    written = n > 0;
    if (written) at += size_t(n);
  }
  if (fd >= 0 && ::close(fd) != 0) written = false;
  if (written && ::rename(temporary.c_str(), path.c_str()) == 0) return true;
  const std::string why = std::strerror(errno);
  if (fd >= 0) ::unlink(temporary.c_str());
  return failed(why);
}

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
