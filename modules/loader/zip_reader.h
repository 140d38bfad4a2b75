// A minimal, bounds-checked reader for the zip container torch.save writes: stored
// (uncompressed) entries found through the central directory, zip64 records understood, CRC-32
// checked. It only indexes a buffer it does not own, and allocates no more than one small
// entry per central-directory record the file really holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace fusedlinear {

// A problem with the file's content. The message names no file (callers add the path).
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `text` (a name from a file) made safe for a one-line message: control characters escaped,
// cut after about `max_length` characters.
std::string printable(const std::string& text, size_t max_length = 80);

// CRC-32 (the zip / zlib polynomial) of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc = 0);

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint64_t data_offset = 0;  // of the entry's bytes in the buffer (after the local header)
    uint64_t size = 0;
    uint32_t crc = 0;
    uint16_t method = 0;     // 0: stored; read() refuses anything else
    bool encrypted = false;  // read() refuses it
  };

  // Indexes the zip archive `data[0, size)`; the buffer must outlive the archive. Throws
  // FormatError for anything malformed. `resave` ends the refusal of a compressed entry: how to
  // write the file again ("re-save with torch.save(model.state_dict(), path)").
  ZipArchive(const uint8_t* data, size_t size,
             std::string resave = "re-save with torch.save(model.state_dict(), path)");

  const std::vector<Entry>& entries() const { return entries_; }
  // The first entry named `name`, or nullptr.
  const Entry* find(const std::string& name) const;
  // The entry's bytes, after checking its CRC-32 (a CRC of 0 on a non-empty entry is taken as
  // "not computed": torch.serialization.config.save.compute_crc32 = False writes that).
  // Throws FormatError for a compressed or encrypted entry.
  const uint8_t* read(const Entry& entry) const;

 private:
  const uint8_t* data_;
  size_t size_;
  std::string resave_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace fusedlinear
