#include "modules/output/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <random>

namespace fusedlinear {
namespace {

// --- the registry of temporary files, and the signal handler that removes them ----------------

// A fixed table, so the handler touches no heap and takes no lock: a slot is claimed (kClaimed)
// while its name is copied in, and becomes kLive once the name is whole.
constexpr int kSlots = 16;
constexpr int kFree = 0, kClaimed = 1, kLive = 2;
std::atomic<int> g_slot_state[kSlots];
char g_slot_path[kSlots][PATH_MAX];
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temporary_files_and_reraise(int signal) {
  const int saved_errno = errno;
  for (int i = 0; i < kSlots; ++i) {
    if (g_slot_state[i].load(std::memory_order_acquire) == kLive) ::unlink(g_slot_path[i]);
  }
  // SA_RESETHAND has restored the default action; the signal stays blocked until this handler
  // returns, and then ends the process as it would have without the handler.
  ::raise(signal);
  errno = saved_errno;
}

// Installs the handler for the signals whose action is the default, each time a file is
// created (three system calls): an ignored SIGINT, as in a background job, stays ignored,
// someone else's handler stays theirs, and this handler, once there, stays.
void install_cleanup_handlers() {
  for (const int signal : kCleanupSignals) {
    struct sigaction old {};
    if (::sigaction(signal, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = remove_temporary_files_and_reraise;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(signal, &action, nullptr);
  }
}

// Registers `path` before the file is created, so that no moment exists in which the file is
// there and the handler does not know it. Returns the slot, or -1 when all are taken.
int register_temporary(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slot_state[i].compare_exchange_strong(expected, kClaimed)) {
      std::memcpy(g_slot_path[i], path.c_str(), path.size() + 1);
      g_slot_state[i].store(kLive, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_temporary(int& slot) {
  if (slot >= 0) g_slot_state[slot].store(kFree, std::memory_order_release);
  slot = -1;
}

// --- paths -----------------------------------------------------------------------------------

// "dir/" (with its slash) and "name" of a path; dir is "" for a bare name.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {path.substr(0, slash + 1), path.substr(slash + 1)};
}

std::string folder_of(const std::string& path) {
  const std::string dir = split_path(path).first;
  return dir.empty() ? "." : dir == "/" ? dir : dir.substr(0, dir.size() - 1);
}

std::string errno_text(int error) { return std::strerror(error); }

// What an existing non-regular file is, as the refusal says it.
std::string refusal(const std::string& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    const std::string to = n > 0 ? " (to " + std::string(target, size_t(n)) + ")" : "";
    return "is a symbolic link" + to +
           "; outputs are not written through symbolic links: give the path of the file itself";
  }
  if (S_ISDIR(st.st_mode)) return "is a directory, expected a file path";
  const char* kind = S_ISCHR(st.st_mode)    ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  return std::string("is ") + kind + "; only a regular file is ever replaced (--overwrite too)";
}

// The checks on the target itself. Returns true with its lstat in `st` when a regular file is
// there (and may be replaced), false when nothing is; throws otherwise.
bool check_target(const std::string& path, bool overwrite, struct stat& st) {
  if (path.empty()) throw OutputError("an output path is empty");
  if (split_path(path).second.empty())
    throw OutputError(path + ": names a folder, expected a file path");
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;  // nothing there (the folder says why)
    throw OutputError(path + ": cannot write: " + errno_text(errno));
  }
  if (!S_ISREG(st.st_mode)) throw OutputError(path + ": " + refusal(path, st));
  if (!overwrite) throw OutputError(path + ": already exists; pass --overwrite to replace it");
  return true;
}

// A name for the temporary file next to `path`: hidden, recognisable, 12 random characters.
std::string temporary_name(const std::string& path) {
  const auto [dir, name] = split_path(path);
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device random;  // fresh per name: a forked child does not repeat its parent's
  std::string suffix;
  for (int i = 0; i < 12; ++i) suffix += kChars[random() % (sizeof kChars - 1)];
  return dir + "." + name.substr(0, 100) + ".tmp-fusedlinear-" + suffix;
}

void sync_folder(const std::string& path) {
  const int fd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // the rename reaches the disk; a failure here changes nothing for the reader
  ::close(fd);
}

}  // namespace

void check_output_path(const std::string& path, bool overwrite,
                       const std::vector<std::string>& inputs) {
  struct stat out {};
  if (!path.empty() && ::stat(path.c_str(), &out) == 0) {
    for (const auto& input : inputs) {
      struct stat in {};
      if (!input.empty() && ::stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev &&
          in.st_ino == out.st_ino) {
        throw OutputError(path + ": is also an input of this run; choose another output path");
      }
    }
  }
  struct stat st {};
  check_target(path, overwrite, st);
  const std::string folder = folder_of(path);
  struct stat dir {};
  if (::stat(folder.c_str(), &dir) != 0) {
    throw OutputError(path + ": cannot write there: folder " + folder + ": " + errno_text(errno));
  }
  if (!S_ISDIR(dir.st_mode)) {
    throw OutputError(path + ": cannot write there: " + folder + " is not a folder");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw OutputError(path + ": cannot write there: folder " + folder + ": " + errno_text(errno));
  }
}

bool same_output_path(const std::string& a, const std::string& b) {
  if (a == b) return true;
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }
  const auto resolved = [](const std::string& path) {
    char buffer[PATH_MAX];
    if (!::realpath(folder_of(path).c_str(), buffer)) return path;
    return std::string(buffer) + "/" + split_path(path).second;
  };
  return resolved(a) == resolved(b);
}

OutputFile::OutputFile(std::string path, bool overwrite)
    : path_(std::move(path)), overwrite_(overwrite) {
  struct stat st {};
  check_target(path_, overwrite_, st);
  install_cleanup_handlers();
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = temporary_name(path_);
    slot_ = register_temporary(temp_);
    if (slot_ < 0) {
      throw OutputError(path_ + ": cannot write: " +
                        (temp_.size() >= PATH_MAX ? errno_text(ENAMETOOLONG)
                                                  : "too many files being written at once"));
    }
    // O_EXCL: a fresh file or nothing; an existing name, a symbolic link included, is not
    // opened but answered with EEXIST, and another name is drawn.
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd_ >= 0) return;
    const int error = errno;
    unregister_temporary(slot_);
    if (error != EEXIST) {
      const std::string folder = folder_of(path_);
      temp_.clear();
      throw OutputError(path_ + ": cannot write: cannot create a file in folder " + folder + ": " +
                        errno_text(error));
    }
  }
  temp_.clear();
  throw OutputError(path_ + ": cannot write: no free temporary name in its folder");
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
  unregister_temporary(slot_);
}

void OutputFile::fail(const std::string& what, int error) {
  discard();
  throw OutputError(path_ + ": " + what + (error ? ": " + errno_text(error) : ""));
}

void OutputFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw OutputError(path_ + ": cannot write: the file is already closed");
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write", errno);
    bytes += n;
    size -= size_t(n);
  }
}

void OutputFile::commit() {
  if (fd_ < 0) throw OutputError(path_ + ": cannot write: the file is already closed");
  // Checked again just before the rename: what is there now decides (a regular file or nothing).
  struct stat st {};
  bool replacing = false;
  try {
    replacing = check_target(path_, overwrite_, st);
  } catch (const OutputError&) {
    discard();
    throw;
  }
  if (replacing) {
    // The replaced file's permissions and, where allowed, owner carry over to the new one.
    ::fchmod(fd_, st.st_mode & 07777);
    if (::fchown(fd_, st.st_uid, st.st_gid) != 0) {
      // Not permitted (another user's file): the new file keeps this process's owner.
    }
  }
  if (::fsync(fd_) != 0) fail("cannot write", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot write", errno);

  if (overwrite_) {
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("cannot write", errno);
  } else {
    // link() fails if the name exists, so "no overwrite" holds even against a concurrent writer.
    int error = ::link(temp_.c_str(), path_.c_str()) == 0 ? 0 : errno;
    if (error == EPERM || error == ENOTSUP || error == EXDEV || error == EMLINK ||
        error == ENOSYS) {
      // A file system without hard links: checked above, then renamed (not atomic against a
      // concurrent writer of the same path).
      error = ::rename(temp_.c_str(), path_.c_str()) == 0 ? 0 : errno;
    }
    if (error == EEXIST) fail("already exists; pass --overwrite to replace it", 0);
    if (error != 0) fail("cannot write", error);
    ::unlink(temp_.c_str());
  }
  temp_.clear();
  unregister_temporary(slot_);
  sync_folder(path_);
}

void write_output_file(const std::string& path, std::string_view bytes, bool overwrite) {
  OutputFile out(path, overwrite);
  out.write(bytes);
  out.commit();
}

}  // namespace fusedlinear
