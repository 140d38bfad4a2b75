// Every file the program writes (tensors, JSON, CSV, SVG) goes through OutputFile: a temporary
// file with a fresh name in the target's folder (created with O_EXCL, so nothing planted there
// is followed or reused), written, fsynced and then renamed into place. A reader of the path
// sees the old file or the whole new one, never part of one; concurrent writers of one path
// each publish a complete file or fail, and the last rename wins.
//
// Only a regular file (or nothing) is ever replaced, and an existing one only when asked
// (`overwrite`). Directories, devices, FIFOs and sockets are refused and left as they are, and
// so are symbolic links: the program does not write through them (give the file's own path).
//
// While a temporary file exists its name is in a small registry; SIGINT, SIGTERM and SIGHUP
// remove the registered files (with unlink, which is async-signal-safe) and then end the
// process with the signal's default action, so an interrupted write leaves nothing behind.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fusedlinear {

// A refused or failed output: one line, "<path>: <reason>" (the errno text where there is one).
struct OutputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Checks an output path before any work is done, so that a long run does not end in a refusal:
// the path is not empty, not one of `inputs` (by identity: a hard link or a symbolic link to an
// input counts), not a symbolic link, directory, device, FIFO or socket, not an existing file
// unless `overwrite`, and its folder exists and is writable. Throws OutputError.
// (OutputFile checks the same again when it publishes; this check only comes earlier.)
void check_output_path(const std::string& path, bool overwrite,
                       const std::vector<std::string>& inputs = {});

// Whether two output paths name the same file: the same text, or the same folder (symbolic
// links in it resolved) and the same name, or one existing file (hard links included).
bool same_output_path(const std::string& a, const std::string& b);

// One output being written. The constructor checks `path` (as check_output_path, without the
// inputs) and creates the temporary file; write() appends; commit() fsyncs and renames it into
// place. Destroying an uncommitted OutputFile removes the temporary file. Every failure throws
// OutputError and leaves `path` as it was.
class OutputFile {
 public:
  OutputFile(std::string path, bool overwrite);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();

  const std::string& path() const { return path_; }
  // The temporary file's path (for tests).
  const std::string& temp_path() const { return temp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int error);
  void discard();

  std::string path_, temp_;
  bool overwrite_;
  int fd_ = -1;
  int slot_ = -1;      // the registry entry of temp_
  unsigned mode_ = 0;  // the replaced file's permission bits, or 0 for a new file
};

// The whole of `bytes` to `path` through an OutputFile.
void write_output_file(const std::string& path, std::string_view bytes, bool overwrite);

}  // namespace fusedlinear
