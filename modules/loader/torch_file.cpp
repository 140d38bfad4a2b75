#include "modules/loader/torch_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string_view>
#include <unordered_map>

#include "modules/loader/pickle_reader.h"
#include "modules/loader/safetensors.h"
#include "modules/loader/zip_reader.h"
#include "modules/output/output_file.h"

namespace fusedlinear {
namespace {

using Kind = PickleValue::Kind;

// Checkpoint keys that usually hold the model's state dict, tried when the top-level dict is
// not itself one.
const char* const kWellKnownKeys[] = {"state_dict", "model_state_dict", "model",   "module",
                                      "net",        "network",          "weights", "params"};
const char kResave[] = "re-save with torch.save(model.state_dict(), path)";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw LoadError(path + ": " + what);
}

// What an input that is not a regular file is, for the refusal.
std::string file_kind(const struct stat& st) {
  return S_ISDIR(st.st_mode)    ? std::strerror(EISDIR)
         : S_ISFIFO(st.st_mode) ? "not a regular file (a FIFO)"
         : S_ISCHR(st.st_mode)  ? "not a regular file (a character device)"
         : S_ISBLK(st.st_mode)  ? "not a regular file (a block device)"
         : S_ISSOCK(st.st_mode) ? "not a regular file (a socket)"
                                : "not a regular file";
}

// "64.02 MiB", for messages about a file's size.
std::string size_text(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double value = double(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) value /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

// The file is read whole: one too large for the memory left is refused like a damaged one.
[[noreturn]] void fail_out_of_memory(const std::string& path, uint64_t size) {
  fail(path, "out of memory reading the file (" + size_text(size) +
                 ", which is read whole into memory); free memory, raise the memory limit or use "
                 "a smaller file");
}

// Whether a libtorch error is an allocation that failed (libtorch 1.13 has no type of its own
// for it on the CPU).
bool is_allocation_failure(const c10::Error& error) {
  const std::string message = error.what_without_backtrace();
  for (const char* text :
       {"tried to allocate", "can't allocate memory", "not enough memory", "out of memory"}) {
    if (message.find(text) != std::string::npos) return true;
  }
  return false;
}

// The whole file, read into memory the reader owns (a byte tensor, which the tensors read from
// it may view). A mapping of the file would die of SIGBUS when the file shrinks under it
// (torch.save rewriting it in place); a read sees the shrink and says so. Only regular files are
// read: a FIFO would block in open() until a writer came, and a device may never end.
class FileBytes {
 public:
  explicit FileBytes(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      fail(path, std::string("cannot open: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, "cannot open: " + file_kind(st));
    // O_NONBLOCK: what was checked may have been replaced by a FIFO since; its open returns.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
    try {
      read_all(path, fd);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const uint8_t* data() const { return bytes_.data_ptr<uint8_t>(); }
  size_t size() const { return size_; }
  const torch::Tensor& bytes() const { return bytes_; }

 private:
  void read_all(const std::string& path, int fd) {
    struct stat before {};
    if (::fstat(fd, &before) != 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
    if (!S_ISREG(before.st_mode)) fail(path, "cannot open: " + file_kind(before));
    size_ = size_t(before.st_size);
    try {
      bytes_ = torch::empty({int64_t(size_)}, torch::TensorOptions().dtype(torch::kByte));
    } catch (const std::bad_alloc&) {
      fail_out_of_memory(path, size_);
    } catch (const c10::Error& e) {
      if (is_allocation_failure(e)) fail_out_of_memory(path, size_);
      throw;
    }
    uint8_t* buffer = bytes_.data_ptr<uint8_t>();
    for (size_t done = 0; done < size_;) {
      const ssize_t n =
          ::pread(fd, buffer + done, std::min<size_t>(size_ - done, 1 << 30), off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
      if (n == 0) {
        struct stat now {};
        const uint64_t left = ::fstat(fd, &now) == 0 ? uint64_t(now.st_size) : done;
        fail(path, "the file shrank from " + std::to_string(size_) + " to " + std::to_string(left) +
                       " bytes while it was read (is it being written?); read it again once "
                       "it is complete");
      }
      done += size_t(n);
    }
    // Written to while read (grown, or rewritten in place to the same size): the bytes may mix
    // two versions.
    struct stat after {};
    uint8_t extra = 0;
    if (::fstat(fd, &after) != 0 || after.st_size != before.st_size ||
        after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != before.st_mtim.tv_nsec ||
        ::pread(fd, &extra, 1, off_t(size_)) > 0) {
      fail(path,
           "the file changed while it was read (is it being written?); read it again once "
           "it is complete");
    }
  }

  torch::Tensor bytes_;
  size_t size_ = 0;
};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "a, b, c" of a dict's keys, cut after 20.
std::string key_list(const PickleValue& dict) {
  std::string out;
  const size_t count = dict.items.size() / 2;
  for (size_t i = 0; i < count; ++i) {
    if (i == 20) return out + ", ... (" + std::to_string(count) + " keys)";
    const PickleValue& key = *dict.items[2 * i];
    out += (i ? ", " : "") + (key.kind == Kind::kString ? "'" + printable(key.text, 60) + "'"
                                                        : "<" + describe(key) + ">");
  }
  return out.empty() ? "(none)" : out;
}

// A dict as Python sees it: each string key once, in its first position, with its last value
// (non-string keys are left out). Each key object is hashed once, however often a hostile file
// repeats it through the memo.
class DictView {
 public:
  explicit DictView(const PickleValue& dict) {
    std::unordered_map<const PickleValue*, size_t> position_of_key;
    for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
      const PickleValue* key = dict.items[i];
      if (key->kind != Kind::kString) continue;
      auto known = position_of_key.find(key);
      if (known == position_of_key.end()) {
        const auto [it, inserted] = index_.emplace(key->text, entries_.size());
        if (inserted) entries_.emplace_back(&key->text, nullptr);
        known = position_of_key.emplace(key, it->second).first;
      }
      entries_[known->second].second = dict.items[i + 1];
    }
  }
  const std::vector<std::pair<const std::string*, const PickleValue*>>& entries() const {
    return entries_;
  }
  // The value under `key`, or nullptr.
  const PickleValue* get(const std::string& key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? nullptr : entries_[it->second].second;
  }

 private:
  std::vector<std::pair<const std::string*, const PickleValue*>> entries_;
  std::unordered_map<std::string_view, size_t> index_;  // views of the arena's strings
};

// A mapping of names to tensors: a dict with string keys and tensor values only.
bool is_state_dict(const PickleValue& value) {
  if (value.kind != Kind::kDict) return false;
  for (size_t i = 0; i + 1 < value.items.size(); i += 2) {
    if (value.items[i]->kind != Kind::kString || value.items[i + 1]->kind != Kind::kTensor) {
      return false;
    }
  }
  return true;
}

// A copy of `numel` elements of `dtype` at `bytes`, as a 1-D CPU tensor.
torch::Tensor copy_out(const uint8_t* bytes, int64_t numel, c10::ScalarType dtype) {
  torch::Tensor tensor = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
  const size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  if (nbytes == 0) return tensor;
  std::memcpy(tensor.data_ptr(), bytes, nbytes);
  if (dtype == c10::ScalarType::Bool) {
    // A bool must be 0 or 1; any other byte (a damaged file) would be undefined behaviour.
    auto* p = static_cast<uint8_t*>(tensor.data_ptr());
    for (size_t i = 0; i < nbytes; ++i) p[i] = p[i] != 0;
  }
  return tensor;
}

// `numel` elements of `dtype` at `offset` in the file, as a 1-D CPU tensor: a view of the file's
// bytes when `view` is set and the offset suits the dtype (no second copy of the data; the view
// keeps the whole file's bytes alive), a copy otherwise.
torch::Tensor tensor_at(const FileBytes& file, uint64_t offset, int64_t numel,
                        c10::ScalarType dtype, bool view) {
  const uint64_t element = c10::elementSize(dtype);
  if (!view || numel == 0 || offset % element != 0) {
    return copy_out(file.data() + offset, numel, dtype);
  }
  torch::Tensor bytes = file.bytes().narrow(0, int64_t(offset), int64_t(uint64_t(numel) * element));
  if (dtype == c10::ScalarType::Bool) {
    // A bool must be 0 or 1 (see copy_out); the bytes are the reader's own.
    uint8_t* p = bytes.data_ptr<uint8_t>();
    for (int64_t i = 0; i < numel; ++i) p[i] = p[i] != 0;
  }
  return bytes.view(dtype);
}

// The torch.save archive: its zip index and the unpickled data.pkl.
struct TorchArchive {
  std::unique_ptr<ZipArchive> zip;
  std::string prefix;  // "archive/": the folder holding data.pkl
  PickleArena arena;
  PickleValue* root = nullptr;
};

// What the file is, or a refusal saying how to re-export it: a state dict, or with `tensor` a
// single tensor (read_tensor).
void open_archive(const FileBytes& file, TorchArchive& archive, bool tensor = false) {
  const uint8_t* data = file.data();
  const size_t size = file.size();
  const std::string resave =
      tensor ? "re-save with torch.save(tensor, path)" : std::string(kResave);
  if (size == 0) {
    throw FormatError("the file is empty (0 bytes), not a torch.save archive; " + resave);
  }
  static const uint8_t kLegacyMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                         0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  if (size >= sizeof kLegacyMagic && std::memcmp(data, kLegacyMagic, sizeof kLegacyMagic) == 0) {
    throw FormatError(
        "legacy torch.save format (_use_new_zipfile_serialization=False or torch < 1.6), which "
        "is not supported; load it in Python and " +
        resave + " using the default format");
  }
  if (size >= 2 && data[0] == 0x80 && data[1] <= 5) {
    throw FormatError("a plain pickle file, not a torch.save archive; " + resave);
  }
  if (size < 4 || data[0] != 'P' || data[1] != 'K') {
    throw FormatError("not a torch.save archive (zip) or a .safetensors file; " +
                      (tensor ? std::string("save the tensor with torch.save(tensor, path)")
                              : "save the weights with torch.save(model.state_dict(), path)"));
  }
  archive.zip = std::make_unique<ZipArchive>(data, size, resave);
  const ZipArchive& zip = *archive.zip;

  // torch.save names its one top-level folder after the file; find data.pkl directly in it.
  const ZipArchive::Entry* pickle = nullptr;
  for (const ZipArchive::Entry& entry : zip.entries()) {
    const std::string& name = entry.name;
    const size_t slash = name.find('/');
    if (slash != std::string::npos &&
        (ends_with(name, "/constants.pkl") || name.compare(slash, 6, "/code/") == 0)) {
      throw FormatError(
          tensor ? "a TorchScript archive (torch.jit.save), not a tensor; save the tensor with "
                   "torch.save(tensor, path)"
                 : "a TorchScript archive (torch.jit.save), not a state dict; in Python, save its "
                   "weights with torch.save(torch.jit.load(path).state_dict(), path)");
    }
    if (!pickle && slash != std::string::npos && name.compare(slash, 10, "/data.pkl") == 0 &&
        name.size() == slash + 9) {
      pickle = &entry;
    }
  }
  if (!pickle) {
    throw FormatError("a zip archive without data.pkl, not a torch.save archive; " + resave);
  }
  archive.prefix = pickle->name.substr(0, pickle->name.size() - 8);

  if (const ZipArchive::Entry* order = zip.find(archive.prefix + "byteorder")) {
    const std::string byteorder(reinterpret_cast<const char*>(zip.read(*order)), order->size);
    if (byteorder != "little") {
      throw FormatError("saved with byte order '" + printable(byteorder) +
                        "'; only little-endian archives are supported (re-save on a "
                        "little-endian machine)");
    }
  }

  const std::string record_prefix = archive.prefix + "data/";
  const RecordLookup lookup = [&](const std::string& key, uint64_t* record_size) {
    const ZipArchive::Entry* entry = zip.find(record_prefix + key);
    if (entry) *record_size = entry->size;
    return entry != nullptr;
  };
  archive.root = unpickle(zip.read(*pickle), pickle->size, lookup, archive.arena);
}

// The tensors of one archive, once per storage record: views of the file's bytes (`view`) or
// copies, and never more bytes in all than the file holds (records of a damaged file could
// overlap).
class Materializer {
 public:
  Materializer(const TorchArchive& archive, const FileBytes& file, bool view)
      : archive_(archive), file_(file), view_(view), budget_(file.size()) {}

  torch::Tensor tensor(const PickleValue& value) {
    if (value.kind != Kind::kTensor)
      throw FormatError("expected a tensor, found " + describe(value));
    const PickleValue& storage = *value.items[0];
    auto it = storages_.find(storage.text);
    if (it == storages_.end()) {
      const ZipArchive::Entry* entry = archive_.zip->find(archive_.prefix + "data/" + storage.text);
      const uint64_t nbytes =
          static_cast<uint64_t>(storage.integer) * c10::elementSize(storage.dtype);
      if (!entry || nbytes > entry->size) throw FormatError("storage record vanished");
      if (nbytes > budget_) throw FormatError("storage records overlap");
      budget_ -= nbytes;
      const uint64_t offset = uint64_t(archive_.zip->read(*entry) - file_.data());
      it = storages_
               .emplace(storage.text,
                        tensor_at(file_, offset, storage.integer, storage.dtype, view_))
               .first;
    }
    const torch::Tensor& flat = it->second;
    // One record, one dtype and size (what torch.save writes; torch.load caches it the same).
    if (flat.scalar_type() != storage.dtype || flat.numel() < storage.integer) {
      throw FormatError("storage data/" + printable(storage.text) +
                        " is used with different types or sizes");
    }
    const std::vector<int64_t> sizes(value.dims.begin(), value.dims.begin() + value.tensor_dim());
    const std::vector<int64_t> strides(value.dims.begin() + value.tensor_dim(), value.dims.end());
    return flat.as_strided(sizes, strides, flat.storage_offset() + value.integer);
  }

 private:
  const TorchArchive& archive_;
  const FileBytes& file_;
  bool view_;
  uint64_t budget_;
  std::unordered_map<std::string, torch::Tensor> storages_;
};

// The state dict inside the unpickled object: the object itself, or a checkpoint's entry.
const PickleValue& select_state_dict(const PickleValue& root, const std::string& weights_key,
                                     std::vector<std::string>& notices) {
  if (root.kind == Kind::kObject) {
    throw FormatError("the file holds a pickled object of class " + printable(root.text) +
                      " (torch.save(model)), not a state dict; " + kResave);
  }
  if (root.kind == Kind::kTensor) {
    throw FormatError(std::string("the file holds a single tensor (torch.save(tensor, path)), not "
                                  "a state dict; ") +
                      kResave);
  }
  if (root.kind != Kind::kDict) {
    throw FormatError("the file holds " + describe(root) + ", not a mapping of names to tensors; " +
                      kResave);
  }
  const DictView view(root);
  if (!weights_key.empty()) {
    const PickleValue* value = view.get(weights_key);
    if (!value) {
      throw FormatError("no key '" + printable(weights_key) + "' at the top level; the file has " +
                        key_list(root));
    }
    if (!is_state_dict(*value)) {
      throw FormatError("the value under key '" + printable(weights_key) + "' is " +
                        describe(*value) + ", not a mapping of names to tensors");
    }
    notices.push_back("took the state dict under key '" + printable(weights_key) + "'");
    return *value;
  }
  if (is_state_dict(root)) return root;

  // A checkpoint: the state dict under a well-known key, or under the only key holding one.
  // (A dict repeated through the memo is examined once.)
  std::vector<std::string> well_known, any;
  std::unordered_map<const PickleValue*, bool> holds_state_dict;
  for (const auto& [key, value] : view.entries()) {
    const auto [it, inserted] = holds_state_dict.emplace(value, false);
    if (inserted) it->second = is_state_dict(*value);
    if (!it->second) continue;
    any.push_back(*key);
    if (any.size() > 20) break;  // plenty to call it ambiguous
    for (const char* known : kWellKnownKeys) {
      if (*key == known) well_known.push_back(*key);
    }
  }
  const std::vector<std::string>& candidates = well_known.empty() ? any : well_known;
  if (candidates.size() == 1) {
    notices.push_back("took the state dict under key '" + printable(candidates[0]) +
                      "' of the checkpoint (keys " + key_list(root) + ")");
    return *view.get(candidates[0]);
  }
  if (candidates.size() > 1) {
    std::string names;
    for (const std::string& name : candidates) {
      names += (names.empty() ? "'" : ", '") + printable(name) + "'";
    }
    throw FormatError("a checkpoint with several state dicts (" + names +
                      "); choose one with --weights-key");
  }
  // A whole module under a well-known key: torch.save({'model': model, ...}).
  for (const char* known : kWellKnownKeys) {
    const PickleValue* value = view.get(known);
    if (value && value->kind == Kind::kObject) {
      throw FormatError("the checkpoint's '" + std::string(known) +
                        "' holds a pickled object of class " + printable(value->text) +
                        " (a whole module), not a state dict; re-save with torch.save({'" + known +
                        "': model.state_dict(), ...}, path)");
    }
  }
  // No dict of tensors anywhere. Mostly tensors: a state dict with a stray entry; say which.
  size_t bad = root.items.size();
  bool has_tensor = false;
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const bool good =
        root.items[i]->kind == Kind::kString && root.items[i + 1]->kind == Kind::kTensor;
    has_tensor = has_tensor || root.items[i + 1]->kind == Kind::kTensor;
    if (!good && bad == root.items.size()) bad = i;
  }
  if (has_tensor && bad < root.items.size()) {
    const PickleValue& key = *root.items[bad];
    if (key.kind != Kind::kString) {
      throw FormatError("a key is " + describe(key) + ", not a string; " + kResave);
    }
    throw FormatError("entry '" + printable(key.text) + "' is " + describe(*root.items[bad + 1]) +
                      ", not a tensor; " + kResave);
  }
  throw FormatError("no state dict (a mapping of names to tensors) among the top-level keys " +
                    key_list(root) + "; if one of them holds it, pass --weights-key");
}

// The bytes of the storages the tensors of `values` use, each storage once.
uint64_t storage_bytes(const std::vector<const PickleValue*>& values) {
  std::unordered_map<std::string_view, uint64_t> storages;
  for (const PickleValue* value : values) {
    if (value->kind != Kind::kTensor) continue;
    const PickleValue& storage = *value->items[0];
    storages[storage.text] = uint64_t(storage.integer) * c10::elementSize(storage.dtype);
  }
  uint64_t total = 0;
  for (const auto& item : storages) total += item.second;
  return total;
}

// Whether tensors taking `bytes` of a file should view its bytes rather than copy them: when
// they are most of it (a state dict; not the weights of a checkpoint mostly holding an
// optimizer's state, whose bytes would all stay in memory with them).
bool view_file(uint64_t bytes, const FileBytes& file) { return 2 * bytes >= file.size(); }

// The tensors of a state dict (checked by is_state_dict), as Python's dict holds them.
void collect(const PickleValue& dict, Materializer& materializer, NamedTensors& out) {
  const DictView view(dict);
  for (const auto& [name, value] : view.entries()) {
    out.tensors.emplace_back(*name, materializer.tensor(*value));
  }
}

// The keys of `out`, renamed to `keys` (the same order).
void rename_keys(NamedTensors& out, const std::vector<std::string>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) out.tensors[i].first = keys[i];
}

std::vector<std::string> keys_of(const NamedTensors& out) {
  std::vector<std::string> keys;
  for (const auto& item : out.tensors) keys.push_back(item.first);
  return keys;
}

// --strip-prefix: `prefix` (a final '.' added if missing) off every key that starts with it.
void strip_given_prefix(NamedTensors& out, const std::string& given) {
  const std::string prefix = as_key_prefix(given);
  std::vector<std::string> keys = keys_of(out);
  const size_t stripped = strip_key_prefix(keys, prefix);
  if (stripped == 0) {
    std::string some;
    for (size_t i = 0; i < keys.size() && i < 10; ++i)
      some += (i ? ", " : "") + printable(keys[i], 60);
    if (keys.size() > 10) some += ", ... (" + std::to_string(keys.size()) + " keys)";
    throw FormatError("--strip-prefix '" + printable(prefix) +
                      "': no key starts with it; the keys: " + (some.empty() ? "(none)" : some));
  }
  rename_keys(out, keys);
  out.notices.push_back("stripped the prefix '" + printable(prefix) + "' (--strip-prefix) from " +
                        (stripped == keys.size() ? "every key"
                                                 : std::to_string(stripped) + " of " +
                                                       std::to_string(keys.size()) + " keys"));
}

// --- the metadata a file carries for fusedlinear (NamedTensors::metadata) ---

// Caps per value (and key), and in all: through the memo a hostile pickle can give one long
// string as the value of many keys, which would cost its length each time.
constexpr size_t kMaxMetadataText = 64 * 1024;
constexpr size_t kMaxMetadataTotal = 1 << 20;

// One entry, checked; `where` names it in messages.
void add_metadata(NamedTensors& out, size_t& total, const std::string& key,
                  const std::string& value, const std::string& where) {
  if (key.empty()) throw FormatError(where + " has an empty name");
  if (key.size() > kMaxMetadataText || value.size() > kMaxMetadataText) {
    throw FormatError(where + " is " + size_text(std::max(key.size(), value.size())) +
                      " long; fusedlinear's metadata holds at most 64 KiB per name and value");
  }
  total += key.size() + value.size();
  if (total > kMaxMetadataTotal) {
    throw FormatError(where + ": fusedlinear's metadata exceeds 1 MiB in all");
  }
  out.metadata[key] = value;
}

// The chosen state dict's _metadata["fusedlinear"]: an OrderedDict's attributes come from
// BUILD, in which state_dict() keeps _metadata (per-module versions, keyed by module prefix;
// only the "fusedlinear" entry means something here). Strings as they are, ints (a version) as
// decimal text; any other value is an error.
void read_pickle_metadata(const PickleValue& dict, NamedTensors& out) {
  if (!dict.state) return;
  const PickleValue* metadata = nullptr;
  for (const PickleValue* state : dict.state->items) {  // later BUILDs win, as in Python
    if (state->kind != Kind::kDict) continue;
    if (const PickleValue* value = DictView(*state).get("_metadata")) metadata = value;
  }
  if (!metadata || metadata->kind != Kind::kDict) return;
  const PickleValue* ours = DictView(*metadata).get("fusedlinear");
  if (!ours) return;
  if (ours->kind != Kind::kDict) {
    throw FormatError("_metadata['fusedlinear'] is " + describe(*ours) +
                      ", expected a dict of strings");
  }
  size_t total = 0;
  const DictView entries(*ours);
  for (const auto& [key, value] : entries.entries()) {
    const std::string where = "_metadata['fusedlinear']['" + printable(*key) + "']";
    if (value->kind == Kind::kString) {
      add_metadata(out, total, *key, value->text, where);
    } else if (value->kind == Kind::kInt) {
      add_metadata(out, total, *key, std::to_string(value->integer), where);
    } else {
      throw FormatError(where + " is " + describe(*value) + ", expected a string");
    }
  }
}

// A .safetensors header's __metadata__ entries "fusedlinear.<key>".
void read_safetensors_metadata(const std::map<std::string, std::string>& metadata,
                               NamedTensors& out) {
  static const std::string kPrefix = "fusedlinear.";
  size_t total = 0;
  for (const auto& [name, value] : metadata) {
    if (!starts_with(name, kPrefix)) continue;
    add_metadata(out, total, name.substr(kPrefix.size()), value,
                 "safetensors __metadata__ entry '" + printable(name) + "'");
  }
}

bool is_safetensors(const std::string& path, const FileBytes& file) {
  if (ends_with(path, ".safetensors")) return true;
  return !(file.size() >= 2 && file.data()[0] == 'P' && file.data()[1] == 'K') &&
         looks_like_safetensors(file.data(), file.size());
}

NamedTensors read_safetensors(const FileBytes& file) {
  NamedTensors out;
  std::map<std::string, std::string> metadata;
  for (const SafetensorsEntry& entry : parse_safetensors(file.data(), file.size(), &metadata)) {
    int64_t numel = 1;
    for (int64_t dim : entry.shape) numel *= dim;  // checked: numel * element size fits the file
    // The tensors cover the data section (parse_safetensors checks): they are the file.
    torch::Tensor tensor = tensor_at(file, entry.offset, numel, entry.dtype, /*view=*/true);
    out.tensors.emplace_back(entry.name, tensor.reshape(entry.shape));
  }
  read_safetensors_metadata(metadata, out);
  return out;
}

// Runs read(): a malformed file's FormatError becomes the one-line error naming `path`, and a
// failed allocation the out-of-memory one with the file's size.
template <class Read>
auto reading(const std::string& path, const FileBytes& file, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const FormatError& e) {
    fail(path, e.what());
  } catch (const std::bad_alloc&) {
    fail_out_of_memory(path, file.size());
  } catch (const c10::Error& e) {
    if (is_allocation_failure(e)) fail_out_of_memory(path, file.size());
    throw;
  }
}

}  // namespace

NamedTensors read_state_dict(const std::string& path, const std::string& weights_key,
                             const std::string& strip_prefix) {
  const FileBytes file(path);
  return reading(path, file, [&]() -> NamedTensors {
    NamedTensors out;
    if (is_safetensors(path, file)) {
      out = read_safetensors(file);
      if (!weights_key.empty()) {
        throw FormatError("--weights-key '" + printable(weights_key) +
                          "' given, but a .safetensors file holds one flat state dict");
      }
    } else {
      TorchArchive archive;
      open_archive(file, archive);
      const PickleValue& dict = select_state_dict(*archive.root, weights_key, out.notices);
      read_pickle_metadata(dict, out);
      std::vector<const PickleValue*> values;
      const DictView view(dict);
      for (const auto& entry : view.entries()) values.push_back(entry.second);
      Materializer materializer(archive, file, view_file(storage_bytes(values), file));
      collect(dict, materializer, out);
    }
    if (!strip_prefix.empty()) strip_given_prefix(out, strip_prefix);
    std::vector<std::string> keys = keys_of(out);
    const std::vector<std::string> notices = strip_wrapper_prefixes(keys);
    rename_keys(out, keys);
    out.notices.insert(out.notices.end(), notices.begin(), notices.end());
    return out;
  });
}

void check_metadata_version(const NamedTensors& file, const std::string& source) {
  if (file.metadata.empty()) return;
  const auto version = file.metadata.find("version");
  if (version != file.metadata.end() && version->second == kMetadataVersion) return;
  std::string fields;
  for (const auto& item : file.metadata) {
    fields += (fields.empty() ? "" : ", ") + printable(item.first, 40);
  }
  throw LoadError(source + ": its fusedlinear metadata (" + fields + ") " +
                  (version == file.metadata.end()
                       ? std::string("carries no version")
                       : "says version '" + printable(version->second, 40) + "'") +
                  "; this reads version " + kMetadataVersion +
                  " only (as weights/fx_chain.py save_with_chain writes it, docs/CHAINS.md)");
}

torch::Tensor read_tensor(const std::string& path) {
  const FileBytes file(path);
  return reading(path, file, [&]() -> torch::Tensor {
    if (is_safetensors(path, file)) {
      NamedTensors tensors = read_safetensors(file);
      if (tensors.tensors.size() != 1) {
        throw FormatError("a .safetensors file with " + std::to_string(tensors.tensors.size()) +
                          " tensors, not a single tensor");
      }
      return tensors.tensors[0].second;
    }
    TorchArchive archive;
    open_archive(file, archive, /*tensor=*/true);
    const PickleValue& root = *archive.root;
    if (root.kind == Kind::kObject) {
      throw FormatError("the file holds a pickled object of class " + printable(root.text) +
                        ", not a tensor; save it with torch.save(tensor, path)");
    }
    if (root.kind != Kind::kTensor) {
      throw FormatError("the file holds " + describe(root) +
                        ", not a single tensor; save it with torch.save(tensor, path)");
    }
    Materializer materializer(archive, file, view_file(storage_bytes({&root}), file));
    return materializer.tensor(root);
  });
}

void write_tensor(const torch::Tensor& tensor, const std::string& path, bool overwrite) {
  if (!tensor.defined()) throw OutputError(path + ": cannot write an undefined tensor");
  OutputFile out(path, overwrite);  // refusals first, before the tensor is serialised
  // A contiguous CPU copy whose storage holds exactly its elements (a view would drag along
  // the whole storage it views).
  torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  if (t.storage_offset() != 0 || t.storage().nbytes() != t.nbytes()) t = t.clone();
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(t));
  out.write(bytes.data(), bytes.size());
  out.commit();
}

}  // namespace fusedlinear
