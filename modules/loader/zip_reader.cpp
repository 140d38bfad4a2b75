#include "modules/loader/zip_reader.h"

#include <array>
#include <cstring>
#include <utility>

namespace fusedlinear {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const uint8_t* p) {
  return static_cast<uint64_t>(le32(p)) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

// Slice-by-8 tables: a 256 MiB weight file is checked in about a tenth of a second.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;
const CrcTables& crc_tables() {
  static const CrcTables tables = [] {
    CrcTables t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
    return t;
  }();
  return tables;
}

// Whether [offset, offset + length) lies within [0, limit), without overflow.
bool within(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

}  // namespace

std::string printable(const std::string& text, size_t max_length) {
  std::string out;
  for (const char ch : text) {
    if (out.size() >= max_length) return out + "...";
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc) {
  const CrcTables& t = crc_tables();
  uint32_t c = ~crc;
  while (size >= 8) {
    const uint32_t one = le32(data) ^ c;
    const uint32_t two = le32(data + 4);
    c = t[7][one & 0xFF] ^ t[6][(one >> 8) & 0xFF] ^ t[5][(one >> 16) & 0xFF] ^ t[4][one >> 24] ^
        t[3][two & 0xFF] ^ t[2][(two >> 8) & 0xFF] ^ t[1][(two >> 16) & 0xFF] ^ t[0][two >> 24];
    data += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ t[0][(c ^ *data++) & 0xFF];
  return ~c;
}

ZipArchive::ZipArchive(const uint8_t* data, size_t size, std::string resave)
    : data_(data), size_(size), resave_(std::move(resave)) {
  // The end-of-central-directory record: the last signature whose comment ends at the file's
  // end or before it (the comment is at most 65535 bytes).
  if (size < kEndSize) throw FormatError("zip archive truncated (no end of central directory)");
  size_t end_pos = size;  // not found
  const size_t lowest = size - kEndSize > 65535 ? size - kEndSize - 65535 : 0;
  for (size_t pos = size - kEndSize + 1; pos-- > lowest;) {
    if (le32(data + pos) == kEndSig && pos + kEndSize + le16(data + pos + 20) <= size) {
      end_pos = pos;
      break;
    }
  }
  if (end_pos == size) throw FormatError("zip archive truncated (no end of central directory)");
  const uint8_t* end = data + end_pos;
  uint64_t disk = le16(end + 4), cd_disk = le16(end + 6);
  uint64_t count = le16(end + 10);
  uint64_t cd_size = le32(end + 12), cd_offset = le32(end + 16);
  uint64_t cd_limit = end_pos;  // the central directory lies before the records that end it

  // Saturated fields mean the real values are in the zip64 end record (found via its locator).
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    if (end_pos < kZip64LocatorSize || le32(end - kZip64LocatorSize) != kZip64LocatorSig) {
      throw FormatError("zip64 archive without a zip64 end-of-central-directory locator");
    }
    const uint64_t z64_pos = le64(end - kZip64LocatorSize + 8);
    if (!within(z64_pos, kZip64EndSize, end_pos - kZip64LocatorSize) ||
        le32(data + z64_pos) != kZip64EndSig) {
      throw FormatError("zip64 end-of-central-directory record out of place");
    }
    const uint8_t* z64 = data + z64_pos;
    disk = le32(z64 + 16);
    cd_disk = le32(z64 + 20);
    count = le64(z64 + 32);
    cd_size = le64(z64 + 40);
    cd_offset = le64(z64 + 48);
    cd_limit = z64_pos;
  }
  if (disk != 0 || cd_disk != 0) throw FormatError("multi-volume zip archives are not supported");
  if (!within(cd_offset, cd_size, cd_limit)) {
    throw FormatError("zip central directory lies outside the file (truncated?)");
  }
  if (count > cd_size / kCentralHeaderSize) {
    throw FormatError("zip central directory holds fewer entries than it claims");
  }

  entries_.reserve(count);
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (!within(pos, kCentralHeaderSize, cd_end) || le32(data + pos) != kCentralHeaderSig) {
      throw FormatError("zip central directory entry " + std::to_string(i) + " is damaged");
    }
    const uint8_t* h = data + pos;
    const uint16_t flags = le16(h + 8), method = le16(h + 10);
    uint64_t csize = le32(h + 20), usize = le32(h + 24);
    const uint64_t name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
    uint64_t local = le32(h + 42);
    const uint64_t var_len = name_len + extra_len + comment_len;
    if (!within(pos + kCentralHeaderSize, var_len, cd_end)) {
      throw FormatError("zip central directory entry " + std::to_string(i) + " is damaged");
    }
    Entry entry;
    entry.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    entry.crc = le32(h + 16);

    // zip64 extended information: 8-byte values for exactly the saturated fields, in order.
    const uint8_t* extra = h + kCentralHeaderSize + name_len;
    for (uint64_t e = 0; e + 4 <= extra_len;) {
      const uint16_t id = le16(extra + e), len = le16(extra + e + 2);
      if (e + 4 + len > extra_len) break;
      if (id == 0x0001) {
        const uint8_t* v = extra + e + 4;
        uint64_t left = len;
        for (uint64_t* field : {&usize, &csize, &local}) {
          if (*field != 0xFFFFFFFF) continue;
          if (left < 8)
            throw FormatError("zip64 extra field of " + printable(entry.name) + " is too short");
          *field = le64(v);
          v += 8;
          left -= 8;
        }
      }
      e += 4 + len;
    }
    entry.method = method;
    entry.encrypted = flags & 0x1;
    if (method == 0 && csize != usize) {
      throw FormatError("zip entry " + printable(entry.name) + " has inconsistent sizes");
    }

    // The local header repeats the name and has its own extra field (torch pads with it to
    // align tensor data), so the data starts after both.
    if (!within(local, kLocalHeaderSize, size) || le32(data + local) != kLocalHeaderSig) {
      throw FormatError("zip local header of " + printable(entry.name) + " is missing or damaged");
    }
    const uint64_t local_name_len = le16(data + local + 26);
    const uint64_t local_extra_len = le16(data + local + 28);
    const uint64_t data_offset = local + kLocalHeaderSize + local_name_len + local_extra_len;
    if (!within(local + kLocalHeaderSize, local_name_len + local_extra_len, size)) {
      throw FormatError("zip local header of " + printable(entry.name) + " is truncated");
    }
    if (local_name_len != name_len ||
        std::memcmp(entry.name.data(), data + local + kLocalHeaderSize, name_len) != 0) {
      throw FormatError("zip local header of " + printable(entry.name) +
                        " does not match its directory entry");
    }
    if (!within(data_offset, csize, size)) {
      throw FormatError("zip entry " + printable(entry.name) + " extends past the end of the file");
    }
    entry.data_offset = data_offset;
    entry.size = csize;  // the bytes in the file (read() refuses compressed ones)
    index_.emplace(entry.name, entries_.size());  // keeps the first of duplicate names
    entries_.push_back(std::move(entry));
    pos += kCentralHeaderSize + var_len;
  }
}

const ZipArchive::Entry* ZipArchive::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const uint8_t* ZipArchive::read(const Entry& entry) const {
  if (entry.encrypted) throw FormatError("zip entry " + printable(entry.name) + " is encrypted");
  if (entry.method != 0) {
    throw FormatError("zip entry " + printable(entry.name) + " is compressed (method " +
                      std::to_string(entry.method) + "), which torch.save never writes; " +
                      resave_);
  }
  const uint8_t* bytes = data_ + entry.data_offset;
  if (entry.crc != 0 || entry.size == 0) {
    if (crc32(bytes, entry.size) != entry.crc) {
      throw FormatError("zip entry " + printable(entry.name) + " is corrupt (CRC-32 mismatch)");
    }
  }
  return bytes;
}

}  // namespace fusedlinear
