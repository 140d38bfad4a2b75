#include "modules/loader/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace fusedlinear {
namespace {

// The reference implementation refuses headers over 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
constexpr int kMaxJsonDepth = 16;
constexpr size_t kMaxDims = 64;

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Nesting depth of the JSON text (outside strings), so a hostile header cannot make the
// parser or the value tree recurse deeply. Returns kMaxJsonDepth + 1 as soon as it is exceeded.
int json_depth(const char* text, size_t size) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < size; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxJsonDepth) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

bool dtype_from_name(const std::string& name, c10::ScalarType* dtype) {
  static const std::pair<const char*, c10::ScalarType> kTypes[] = {
      {"F32", c10::ScalarType::Float},     {"F16", c10::ScalarType::Half},
      {"BF16", c10::ScalarType::BFloat16}, {"F64", c10::ScalarType::Double},
      {"I64", c10::ScalarType::Long},      {"I32", c10::ScalarType::Int},
      {"I16", c10::ScalarType::Short},     {"I8", c10::ScalarType::Char},
      {"U8", c10::ScalarType::Byte},       {"BOOL", c10::ScalarType::Bool},
  };
  for (const auto& [type_name, type] : kTypes) {
    if (name == type_name) {
      *dtype = type;
      return true;
    }
  }
  return false;
}

// The first key that one JSON object gives twice, and the key of that object ("" at the top
// level), from the parser's events: nlohmann::json would keep one value silently.
struct DuplicateKeys {
  struct Open {
    std::unordered_set<std::string> keys;
    std::string last;  // the key being read in this object
  };
  std::vector<Open> open;  // the objects being parsed, outermost first
  std::string key, parent;

  void see(nlohmann::json::parse_event_t event, const nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end && !open.empty()) {
      open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      Open& object = open.back();
      object.last = parsed.get<std::string>();
      if (!object.keys.insert(object.last).second && key.empty()) {
        key = object.last;
        parent = open.size() > 1 ? open[open.size() - 2].last : "";
      }
    }
  }
};

// Tensors may neither share bytes nor leave any unused: sorted by offset, each begins where the
// one before ends, and the last ends where the data section does. (Together they then fit in
// the data section: what the caller allocates is bounded by the file's size.)
void check_coverage(const std::vector<SafetensorsEntry>& entries, uint64_t data_start,
                    uint64_t data_size) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& entry : entries) sorted.push_back(&entry);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->size < b->size;
  });
  const auto range = [&](const SafetensorsEntry& entry) {
    return "'" + printable(entry.name) + "' (data_offsets [" +
           std::to_string(entry.offset - data_start) + ", " +
           std::to_string(entry.offset - data_start + entry.size) + "])";
  };
  uint64_t at = data_start;  // where the bytes so far end
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* entry : sorted) {
    if (entry->offset < at) {
      throw FormatError("safetensors tensors " + range(*previous) + " and " + range(*entry) +
                        " overlap");
    }
    if (entry->offset > at) {
      throw FormatError("safetensors data section has a gap of " +
                        std::to_string(entry->offset - at) + " bytes " +
                        (previous ? "between " + range(*previous) + " and " + range(*entry)
                                  : "before the first tensor, " + range(*entry)));
    }
    at = entry->offset + entry->size;
    previous = entry;
  }
  if (at != data_start + data_size) {
    throw FormatError("safetensors data section has " +
                      std::to_string(data_start + data_size - at) + " bytes " +
                      (previous ? "after the last tensor, " + range(*previous)
                                : "but the header describes no tensor") +
                      ", which belong to no tensor");
  }
}

}  // namespace

bool looks_like_safetensors(const uint8_t* data, size_t size) {
  if (size < 10) return false;
  const uint64_t header = le64(data);
  return header >= 2 && header <= size - 8 && data[8] == '{';
}

std::vector<SafetensorsEntry> parse_safetensors(const uint8_t* data, size_t size,
                                                std::map<std::string, std::string>* metadata) {
  if (size < 8) throw FormatError("safetensors file truncated (no header length)");
  const uint64_t header_size = le64(data);
  if (header_size > size - 8) {
    throw FormatError("safetensors header length " + std::to_string(header_size) +
                      " exceeds the file (truncated?)");
  }
  if (header_size > kMaxHeaderSize) throw FormatError("safetensors header over 100 MB");
  const char* text = reinterpret_cast<const char*>(data + 8);
  if (json_depth(text, header_size) > kMaxJsonDepth) {
    throw FormatError("safetensors header is nested too deeply");
  }
  DuplicateKeys duplicates;
  const nlohmann::json header = nlohmann::json::parse(
      text, text + header_size,
      [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        duplicates.see(event, parsed);
        return true;
      },
      /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    throw FormatError("safetensors header is not a JSON object");
  }
  if (!duplicates.key.empty()) {
    throw FormatError("safetensors header gives the key '" + printable(duplicates.key) + "' twice" +
                      (duplicates.parent.empty() ? " (tensor names must be unique)"
                                                 : " in '" + printable(duplicates.parent) + "'"));
  }

  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = size - data_start;
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, info] : header.items()) {  // sorted by name (nlohmann::json's map)
    if (name == "__metadata__") {                    // text to text
      if (!info.is_object()) throw FormatError("safetensors __metadata__ is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          throw FormatError("safetensors __metadata__ entry '" + printable(key) + "' is a JSON " +
                            std::string(value.type_name()) + ", not a string");
        }
        if (metadata) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = "safetensors tensor " + printable(name);
    if (!info.is_object()) throw FormatError(what + " is not described by an object");
    const auto dtype = info.find("dtype");
    const auto shape = info.find("shape");
    const auto offsets = info.find("data_offsets");
    if (dtype == info.end() || shape == info.end() || offsets == info.end()) {
      throw FormatError(what + " lacks dtype, shape or data_offsets");
    }
    SafetensorsEntry entry;
    entry.name = name;
    if (!dtype->is_string() || !dtype_from_name(dtype->get<std::string>(), &entry.dtype)) {
      throw FormatError(what + " has unsupported dtype " + printable(dtype->dump()));
    }
    if (!shape->is_array() || shape->size() > kMaxDims)
      throw FormatError(what + " has a bad shape");
    uint64_t numel = 1;
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned() || __builtin_mul_overflow(numel, dim.get<uint64_t>(), &numel) ||
          dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        throw FormatError(what + " has a bad shape");
      }
      entry.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    }
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      throw FormatError(what + " has bad data_offsets");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) {
      throw FormatError(what + " has data_offsets [" + std::to_string(begin) + ", " +
                        std::to_string(end) + "] out of order (the end before the begin)");
    }
    if (end > data_size) {
      throw FormatError(what + " lies outside the data section (truncated?)");
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, c10::elementSize(entry.dtype), &bytes) ||
        bytes != end - begin) {
      throw FormatError(what + ": shape and dtype need " + std::to_string(bytes) +
                        " bytes, data_offsets give " + std::to_string(end - begin));
    }
    entry.offset = data_start + begin;
    entry.size = bytes;
    entries.push_back(std::move(entry));
  }
  check_coverage(entries, data_start, data_size);
  return entries;
}

}  // namespace fusedlinear
