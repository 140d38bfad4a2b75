// The state-dict and tensor file reader (modules/torch_file.h): every fixture form written by
// weights/make_loader_fixtures.py (committed per torch version, and fresh from Python when it
// has torch), write_tensor round trips, and hand-made hostile files that must be refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "modules/loader/torch_file.h"
#include "modules/output/output_file.h"
#include "tests/test_support.h"

// Under AddressSanitizer, any single allocation over 1 GiB fails the test: the reader must
// refuse absurd sizes before allocating.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=1024"; }

namespace fusedlinear {
namespace {

using namespace std::string_literals;
using nlohmann::json;
using testing_support::file_exists;
using testing_support::file_size;
using testing_support::list_dir;
using testing_support::message_of;
using testing_support::read_file;
using testing_support::TempDir;

const std::string kFixtureRoot = std::string(FUSEDLINEAR_SOURCE_DIR) + "/weights/fixtures/loader";

const std::string kScript =
    std::string(FUSEDLINEAR_SOURCE_DIR) + "/weights/make_loader_fixtures.py";

// --- small helpers, independent of the reader --------------------------------------------------

void write_file(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());  // a new file: truncating one makes ext4 flush it
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

std::string dtype_name(c10::ScalarType type) {
  static const std::map<c10::ScalarType, std::string> kNames = {
      {c10::ScalarType::Float, "float32"},     {c10::ScalarType::Half, "float16"},
      {c10::ScalarType::BFloat16, "bfloat16"}, {c10::ScalarType::Double, "float64"},
      {c10::ScalarType::Long, "int64"},        {c10::ScalarType::Int, "int32"},
      {c10::ScalarType::Short, "int16"},       {c10::ScalarType::Char, "int8"},
      {c10::ScalarType::Byte, "uint8"},        {c10::ScalarType::Bool, "bool"}};
  const auto it = kNames.find(type);
  return it == kNames.end() ? "other" : it->second;
}

std::string hex_of(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.contiguous();
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  std::string out;
  for (size_t i = 0; i < t.nbytes(); ++i) {
    out += "0123456789abcdef"[p[i] >> 4];
    out += "0123456789abcdef"[p[i] & 15];
  }
  return out;
}

// Exactly the tensor Python saved: dtype, shape and every byte.
void expect_tensor(const torch::Tensor& t, const json& expected) {
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(dtype_name(t.scalar_type()), expected["dtype"].get<std::string>());
  EXPECT_EQ(t.sizes().vec(), expected["shape"].get<std::vector<int64_t>>());
  if (t.sizes().vec() == expected["shape"].get<std::vector<int64_t>>()) {
    EXPECT_EQ(hex_of(t), expected["hex"].get<std::string>());
  }
}

// A LoadError's message: one line, starting with the path.
void expect_one_line(const std::string& message, const std::string& path) {
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

std::string load_error(const std::function<void()>& load) {
  return message_of<LoadError>(load, "(loaded without error)");
}

// write_tensor's refusals and failures (OutputError, modules/output/output_file.h).
std::string write_error(const std::function<void()>& write) {
  return message_of<OutputError>(write, "(written without error)");
}

// Every case of one manifest.json; returns how many were checked.
int check_manifest(const std::string& dir) {
  const json manifest = json::parse(read_file(dir + "/manifest.json"));
  const json& sets = manifest["tensor_sets"];
  int checked = 0;
  for (const json& c : manifest["cases"]) {
    const std::string path = dir + "/" + c["file"].get<std::string>();
    const std::string key = c.value("weights_key", "");
    const bool tensor = c["read"] == "tensor";
    SCOPED_TRACE(path + (key.empty() ? "" : " --weights-key " + key) + "  <- " +
                 c["python"].get<std::string>());
    if (c.contains("error")) {
      const std::string message = load_error([&] {
        if (tensor) {
          read_tensor(path);
        } else {
          read_state_dict(path, key);
        }
      });
      EXPECT_NE(message.find(c["error"].get<std::string>()), std::string::npos) << message;
      expect_one_line(message, path);
    } else if (tensor) {
      expect_tensor(read_tensor(path), sets[c["expect"].get<std::string>()][0]);
    } else {
      const json& expected = sets[c["expect"].get<std::string>()];
      const NamedTensors got = read_state_dict(path, key);
      EXPECT_EQ(got.tensors.size(), expected.size());
      for (size_t i = 0; i < std::min(got.tensors.size(), expected.size()); ++i) {
        EXPECT_EQ(got.tensors[i].first, expected[i]["name"].get<std::string>());
        expect_tensor(got.tensors[i].second, expected[i]);
      }
      const json& notices = c["notices"];
      EXPECT_EQ(got.notices.size(), notices.size());
      for (size_t i = 0; i < std::min(got.notices.size(), notices.size()); ++i) {
        EXPECT_NE(got.notices[i].find(notices[i].get<std::string>()), std::string::npos)
            << got.notices[i];
      }
      // What the file carries for fusedlinear; none where the case names none.
      EXPECT_EQ(json(got.metadata), c.value("metadata", json::object()));
    }
    ++checked;
  }
  return checked;
}

// Runs `python_args` with the first python3 that has torch (Debian's, then the one on PATH),
// output to `log`. Returns false, with no python run, if none has torch.
bool run_python_with_torch(const std::string& python_args, const std::string& log, int* status) {
  for (const std::string python : {"/usr/bin/python3", "python3"}) {
    *status = std::system((python + " " + python_args + " > " + log + " 2>&1").c_str());
    const bool missing = WIFEXITED(*status) && WEXITSTATUS(*status) == 127;  // no such python
    if (!missing && read_file(log).find("No module named 'torch'") == std::string::npos) {
      return true;
    }
  }
  return false;
}

// --- the fixtures -----------------------------------------------------------------------------

TEST(TorchFileFixtures, EveryCommittedTorchVersionLoadsAsPythonSaved) {
  std::vector<std::string> dirs;
  for (const std::string& name : list_dir(kFixtureRoot)) {
    const std::string dir = kFixtureRoot + "/" + name;
    if (file_exists(dir + "/manifest.json")) dirs.push_back(dir);
  }
  std::sort(dirs.begin(), dirs.end());
  ASSERT_FALSE(dirs.empty()) << "no fixtures under " << kFixtureRoot;
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    EXPECT_GE(check_manifest(dir), 30);
  }
}

TEST(TorchFileFixtures, FreshFromThisMachinesPythonLoads) {
  TempDir dir;
  int status = 0;
  if (!run_python_with_torch(kScript + " --out " + dir.file("fixtures"), dir.file("log.txt"),
                             &status)) {
    GTEST_SKIP() << "no python3 with torch here: fixtures not regenerated";
  }
  ASSERT_EQ(status, 0) << read_file(dir.file("log.txt"));
  std::printf("%s", read_file(dir.file("log.txt")).c_str());
  EXPECT_GE(check_manifest(dir.file("fixtures")), 30);
}

// --- write_tensor -----------------------------------------------------------------------------

std::vector<torch::Tensor> tensors_to_write() {
  torch::manual_seed(1);
  const torch::Tensor base = torch::randn({4, 6});
  return {base,
          base.t(),                            // not contiguous
          base.slice(0, 1, 3),                 // an offset into a larger storage
          torch::randn({3}).to(torch::kHalf),  //
          torch::randn({2, 2}).to(torch::kBFloat16),
          torch::arange(5, torch::kLong),
          torch::tensor({true, false, true}),
          torch::tensor(3.5, torch::kDouble),  // 0-dim
          torch::empty({0, 3})};
}

TEST(TorchFile, WriteTensorReadsBackExactly) {
  TempDir dir;
  const auto tensors = tensors_to_write();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = dir.file("t" + std::to_string(i) + ".pt");
    write_tensor(tensors[i], path);
    const torch::Tensor back = read_tensor(path);
    EXPECT_EQ(back.scalar_type(), tensors[i].scalar_type()) << i;
    EXPECT_EQ(back.sizes(), tensors[i].sizes()) << i;
    EXPECT_EQ(hex_of(back), hex_of(tensors[i])) << i;
    // Only what the tensor holds is written, not the storage a view came from. (The
    // container's own overhead is ~1.2 KB with libtorch 2.11, more for some versions.)
    EXPECT_LT(file_size(path), 4096u + tensors[i].nbytes()) << i;
  }
  // Nothing else is left in the folder (the temporary files are renamed or removed).
  EXPECT_EQ(list_dir(dir.path()).size(), tensors.size());

  // Views of a 4 MiB storage: far less than the storage is written, and they read back exactly.
  const torch::Tensor big = torch::randn({1024, 1024});
  const std::vector<torch::Tensor> views = {big.slice(0, 5, 7),       // contiguous, offset
                                            big.t().slice(0, 7, 8)};  // one column
  for (size_t i = 0; i < views.size(); ++i) {
    const std::string path = dir.file("view" + std::to_string(i) + ".pt");
    write_tensor(views[i], path);
    const torch::Tensor back = read_tensor(path);
    EXPECT_EQ(back.sizes(), views[i].sizes()) << i;
    EXPECT_EQ(hex_of(back), hex_of(views[i])) << i;
    EXPECT_LT(file_size(path), 4096u + views[i].nbytes()) << i;
    EXPECT_LT(file_size(path), big.storage().nbytes() / 64) << i;
  }
}

TEST(TorchFile, UnreadablePathsSayWhy) {
  TempDir dir;
  for (const auto& [where, error] :
       {std::pair<std::string, std::string>{dir.file("missing.pt"), "cannot open: No such file"},
        {dir.path(), "cannot open: Is a directory"},
        {"/dev/zero", "cannot open: not a regular file"}}) {
    const std::string& path = where;  // C++17 lambdas cannot capture a structured binding
    const std::string message = load_error([&] { read_state_dict(path); });
    EXPECT_NE(message.find(error), std::string::npos) << message;
    expect_one_line(message, path);
    EXPECT_NE(load_error([&] { read_tensor(path); }).find(error), std::string::npos);
  }
}

// The advice fits what was read: a state dict, or a single tensor (the CLI's --input).
TEST(TorchFile, RefusalsAdviseForWhatWasRead) {
  TempDir dir;
  write_file(dir.file("empty.pt"), "");
  write_file(dir.file("text.pt"), "not a tensor\n");
  write_file(dir.file("pickle.pkl"), "\x80\x04K\x01.");
  const auto message = [&](const std::string& name, bool tensor) {
    return load_error([&] {
      if (tensor) {
        read_tensor(dir.file(name));
      } else {
        read_state_dict(dir.file(name));
      }
    });
  };
  EXPECT_EQ(message("empty.pt", false),
            dir.file("empty.pt") +
                ": the file is empty (0 bytes), not a torch.save archive; re-save with "
                "torch.save(model.state_dict(), path)");
  EXPECT_EQ(message("empty.pt", true),
            dir.file("empty.pt") +
                ": the file is empty (0 bytes), not a torch.save archive; re-save with "
                "torch.save(tensor, path)");
  EXPECT_NE(message("text.pt", true).find("save the tensor with torch.save(tensor, path)"),
            std::string::npos);
  EXPECT_NE(message("text.pt", false).find("save the weights with torch.save(model.state_dict()"),
            std::string::npos);
  EXPECT_NE(message("pickle.pkl", true)
                .find("plain pickle file, not a torch.save archive; "
                      "re-save with torch.save(tensor, path)"),
            std::string::npos);
}

TEST(TorchFile, WriteTensorKeepsAnExistingFileUnlessTold) {
  TempDir dir;
  const std::string path = dir.file("t.pt");
  write_tensor(torch::ones({2}), path);
  const std::string message = write_error([&] { write_tensor(torch::zeros({3}), path); });
  EXPECT_NE(message.find("already exists"), std::string::npos) << message;
  expect_one_line(message, path);
  EXPECT_TRUE(read_tensor(path).equal(torch::ones({2})));
  write_tensor(torch::zeros({3}), path, /*overwrite=*/true);
  EXPECT_TRUE(read_tensor(path).equal(torch::zeros({3})));
  EXPECT_EQ(list_dir(dir.path()).size(), 1u);

  EXPECT_NE(write_error([&] { write_tensor(torch::Tensor(), dir.file("u.pt")); }).find("undefined"),
            std::string::npos);
  const std::string missing = dir.file("no/such/folder/t.pt");
  const std::string error = write_error([&] { write_tensor(torch::ones({2}), missing); });
  EXPECT_NE(error.find("cannot write"), std::string::npos) << error;
  expect_one_line(error, missing);
}

TEST(TorchFile, WriteTensorIsReadByPythonTorchLoad) {
  TempDir dir;
  const auto tensors = tensors_to_write();
  std::string paths;
  for (size_t i = 0; i < tensors.size(); ++i) {
    write_tensor(tensors[i], dir.file(std::to_string(i) + ".pt"));
    paths += " " + dir.file(std::to_string(i) + ".pt");
  }
  write_file(
      dir.file("check.py"),
      "import struct, sys, torch\n"
      "views = {torch.float32: (torch.int32, 'i'), torch.float64: (torch.int64, 'q'),\n"
      "         torch.float16: (torch.int16, 'h'), torch.bfloat16: (torch.int16, 'h'),\n"
      "         torch.int64: (torch.int64, 'q'), torch.bool: (torch.uint8, 'B')}\n"
      "for path in sys.argv[1:]:\n"
      "    t = torch.load(path)\n"
      "    view, code = views[t.dtype]\n"
      "    b = t.contiguous().to(view) if t.dtype == torch.bool else t.contiguous().view(view)\n"
      "    v = b.flatten().tolist()\n"
      "    print(str(t.dtype), list(t.shape), struct.pack('<%d%s' % (len(v), code), *v).hex())\n");
  int status = 0;
  if (!run_python_with_torch(dir.file("check.py") + paths, dir.file("out.txt"), &status)) {
    GTEST_SKIP() << "no python3 with torch here: torch.load not checked";
  }
  ASSERT_EQ(status, 0) << read_file(dir.file("out.txt"));
  std::istringstream lines(read_file(dir.file("out.txt")));
  for (const torch::Tensor& tensor : tensors) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    const std::string dtype = "torch." + dtype_name(tensor.scalar_type());
    EXPECT_EQ(line.rfind(dtype + " ", 0), 0u) << line;
    EXPECT_EQ(line.substr(line.rfind(' ') + 1), hex_of(tensor)) << line;
  }
}

// --- hand-made files: what a hostile or damaged file cannot do ------------------------------

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

uint32_t crc(const std::string& data) {
  uint32_t c = 0xFFFFFFFF;
  for (unsigned char byte : data) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

// A zip of stored entries, as torch.save lays it out; with `zip64`, the end records say that
// the real counts and offsets are in the zip64 record.
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                     bool zip64 = false) {
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const std::string header_fields = le(0, 2) + le(0, 2) + le(0, 4) + le(crc(data), 4) +
                                      le(data.size(), 4) + le(data.size(), 4) + le(name.size(), 2) +
                                      le(0, 2);
    central += le(0x02014b50, 4) + le(20, 2) + le(20, 2) + header_fields + le(0, 2) + le(0, 2) +
               le(0, 2) + le(0, 4) + le(out.size(), 4) + name;
    out += le(0x04034b50, 4) + le(20, 2) + header_fields + name + data;
  }
  const uint64_t cd_offset = out.size();
  out += central;
  if (zip64) {
    const uint64_t z64 = out.size();
    out += le(0x06064b50, 4) + le(44, 8) + le(45, 2) + le(45, 2) + le(0, 4) + le(0, 4) +
           le(entries.size(), 8) + le(entries.size(), 8) + le(central.size(), 8) + le(cd_offset, 8);
    out += le(0x07064b50, 4) + le(0, 4) + le(z64, 8) + le(1, 4);
    out += le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(0xFFFF, 2) + le(0xFFFF, 2) +
           le(0xFFFFFFFF, 4) + le(0xFFFFFFFF, 4) + le(0, 2);
  } else {
    out += le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(entries.size(), 2) + le(entries.size(), 2) +
           le(central.size(), 4) + le(cd_offset, 4) + le(0, 2);
  }
  return out;
}

// Pickle pieces (protocol 2).
std::string uni(const std::string& s) { return "X" + le(s.size(), 4) + s; }
std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string int4(int64_t v) { return "J" + le(static_cast<uint32_t>(v), 4); }
std::string ints(const std::vector<int64_t>& values) {
  std::string out = "(";
  for (int64_t v : values) {
    out += (v >= INT32_MIN && v <= INT32_MAX) ? int4(v) : "\x8a\x08" + le(v, 8);
  }
  return out + "t";
}
// _rebuild_tensor_v2(storage data/<key> of `numel` floats, offset, sizes, strides, False, {}).
std::string tensor_pickle(const std::string& key, int64_t numel, int64_t offset,
                          const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                          const std::string& storage = "FloatStorage") {
  std::string numel_op = numel <= INT32_MAX ? int4(numel) : "\x8a\x08" + le(numel, 8);
  return global("torch._utils", "_rebuild_tensor_v2") + "((" + uni("storage") +
         global("torch", storage) + uni(key) + uni("cpu") + numel_op + "tQ" + int4(offset) +
         ints(sizes) + ints(strides) + "\x89}tR";
}
std::string dict_pickle(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = "\x80\x02}(";
  for (const auto& [key, value] : items) out += uni(key) + value;
  return out + "u.";
}
// A torch.save-like archive of `pickle` with records data/0 (24 bytes: floats 0..5) and more.
std::string archive(const std::string& pickle, bool zip64 = false) {
  std::string floats;
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    floats.append(reinterpret_cast<const char*>(&f), 4);
  }
  return make_zip({{"archive/data.pkl", pickle},
                   {"archive/data/0", floats},
                   {"archive/data/1", std::string(8, '\x05')},
                   {"archive/version", "3\n"}},
                  zip64);
}

class TorchFileSafety : public ::testing::Test {
 protected:
  // Writes `bytes` to a file and returns read_state_dict's error ("(loaded ...)" if none).
  std::string error_of(const std::string& bytes, const std::string& name = "f.pt") {
    const std::string path = dir_.file(name);
    write_file(path, bytes);
    std::string message = load_error([&] { read_state_dict(path); });
    if (message.rfind("(loaded", 0) != 0) expect_one_line(message, path);
    return message;
  }
  NamedTensors load(const std::string& bytes) {
    write_file(dir_.file("ok.pt"), bytes);
    return read_state_dict(dir_.file("ok.pt"));
  }
  TempDir dir_;
};

TEST_F(TorchFileSafety, HandMadeArchiveLoadsIncludingZip64Records) {
  for (bool zip64 : {false, true}) {
    const NamedTensors got =
        load(archive(dict_pickle({{"w", tensor_pickle("0", 6, 1, {2, 2}, {1, 2})},
                                  {"b", tensor_pickle("1", 8, 0, {8}, {1}, "BoolStorage")}}),
                     zip64));
    ASSERT_EQ(got.tensors.size(), 2u);
    EXPECT_TRUE(got.tensors[0].second.equal(torch::tensor({{1.f, 3.f}, {2.f, 4.f}})));
    // Bytes other than 0 and 1 in a bool record become true, never an invalid bool.
    EXPECT_TRUE(got.tensors[1].second.all().item<bool>());
  }
}

TEST_F(TorchFileSafety, ViewsReachingOutsideTheirStorageAreRefused) {
  // 6 floats: offset 1 with sizes (2, 3) and strides (3, 1) reaches element 6.
  EXPECT_NE(error_of(archive(dict_pickle({{"w", tensor_pickle("0", 6, 1, {2, 3}, {3, 1})}})))
                .find("exceeds its storage"),
            std::string::npos);
  EXPECT_NE(error_of(archive(dict_pickle({{"w", tensor_pickle("0", 6, 7, {0}, {1})}})))
                .find("exceeds its storage"),
            std::string::npos);
  EXPECT_NE(
      error_of(archive(dict_pickle({{"w", tensor_pickle("0", 6, 0, {2}, {-1})}}))).find("negative"),
      std::string::npos);
  EXPECT_NE(error_of(archive(dict_pickle({{"w", tensor_pickle("0", 6, 0, {2, 3}, {3})}})))
                .find("one length"),
            std::string::npos);
  // Strides whose products overflow int64.
  EXPECT_NE(
      error_of(archive(dict_pickle({{"w", tensor_pickle("0", 6, 0, {3, 3}, {INT64_MAX / 2, 1})}})))
          .find("overflows"),
      std::string::npos);
}

TEST_F(TorchFileSafety, AbsurdSizesAreRefusedBeforeAllocating) {
  // A storage claiming 2^61 floats has a 24-byte record: refused from the numbers alone.
  EXPECT_NE(
      error_of(archive(dict_pickle({{"w", tensor_pickle("0", int64_t{1} << 61, 0, {1}, {1})}})))
          .find("claims"),
      std::string::npos);
  EXPECT_NE(error_of(archive(dict_pickle({{"w", tensor_pickle("0", 7, 0, {7}, {1})}})))
                .find("claims 7 elements but its record holds 24 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(archive(dict_pickle({{"w", tensor_pickle("9", 1, 0, {1}, {1})}})))
                .find("data/9 is missing"),
            std::string::npos);
  // Lengths of strings and integers beyond the file.
  EXPECT_NE(error_of(archive("\x80\x02X\xf0\xff\xff\xff")).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02\x8d" + le(uint64_t{1} << 62, 8))).find("truncated"),
            std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02\x8b\xff\xff\xff\x7f")).find("truncated"), std::string::npos);
  // A safetensors tensor claiming more bytes than the file holds.
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[1000000000,1000],"data_offsets":[0,4]}})";
  EXPECT_NE(error_of(le(header.size(), 8) + header + "abcd", "f.safetensors").find("need"),
            std::string::npos);
}

TEST_F(TorchFileSafety, NothingFromTheFileIsEverCalled) {
  const std::string marker = dir_.file("was_run");
  const std::string pickle =
      "\x80\x02" + global("posix", "system") + "(" + uni("touch " + marker) + "tR.";
  EXPECT_NE(error_of(archive(pickle)).find("pickled object of class posix.system"),
            std::string::npos);
  const std::string builtin = "\x80\x02" + global("builtins", "eval") + "(" + uni("1") + "tR.";
  EXPECT_NE(error_of(archive(builtin)).find("pickled object of class builtins.eval"),
            std::string::npos);
  EXPECT_FALSE(file_exists(marker));
  // An unknown object beside the weights is inert: the state dict still loads.
  const NamedTensors got =
      load(archive("\x80\x02}(" + uni("args") + pickle.substr(2, pickle.size() - 3) + uni("model") +
                   "}(" + uni("w") + tensor_pickle("0", 6, 0, {6}, {1}) + "uu."));
  ASSERT_EQ(got.tensors.size(), 1u);
  EXPECT_EQ(got.tensors[0].first, "w");
  EXPECT_FALSE(file_exists(marker));
  // A storage type that is not one: refused.
  EXPECT_NE(error_of(archive(dict_pickle({{"w", tensor_pickle("0", 6, 0, {6}, {1}, "Tensor")}})))
                .find("unsupported storage type torch.Tensor"),
            std::string::npos);
}

TEST_F(TorchFileSafety, DeepNestingAndCyclesNeitherRecurseNorLoop) {
  // A list nested 300000 deep, then a list that contains itself.
  const int depth = 300000;
  const std::string deep = "\x80\x02" + std::string(depth, ']') + std::string(depth - 1, 'a') + ".";
  EXPECT_NE(error_of(archive(deep)).find("holds a list"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02]q\x00h\x00\x61."s)).find("holds a list"), std::string::npos);
  const std::string dict_cycle = "\x80\x02}q\x00"s + uni("self") + "h\x00s."s;
  EXPECT_NE(error_of(archive(dict_cycle)).find("no state dict"), std::string::npos);
  const std::string json_deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string header = R"({"w":)" + json_deep + "}";
  EXPECT_NE(error_of(le(header.size(), 8) + header, "f.safetensors").find("nested too deeply"),
            std::string::npos);
}

TEST_F(TorchFileSafety, BrokenPickleStreamsFailCleanly) {
  EXPECT_NE(error_of(archive("\x80\x02t.")).find("no MARK"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02\x61.")).find("stack underflow"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02.")).find("stack underflow"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02(}")).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02j\xff\xff\xff\xff.")).find("memo entry"), std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x02\x82\x01.")).find("unsupported pickle opcode 0x82"),
            std::string::npos);
  EXPECT_NE(error_of(archive("\x80\x09.")).find("protocol 9"), std::string::npos);
  // A MARK fences the stack: items below it cannot be popped by what follows it.
  EXPECT_NE(error_of(archive("\x80\x02](\x61.")).find("stack underflow"), std::string::npos);
}

TEST_F(TorchFileSafety, DamagedContainersFailCleanly) {
  const std::string good = archive(dict_pickle({{"w", tensor_pickle("0", 6, 0, {6}, {1})}}));
  // A changed byte in tensor data: the CRC-32 says so.
  std::string bad = good;
  bad[good.find("archive/data/0") + 14 + 4] ^= 1;
  EXPECT_NE(error_of(bad).find("CRC-32 mismatch"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 1)).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(make_zip({{"a.txt", "hello"}})).find("without data.pkl"), std::string::npos);
  // Encrypted entries (flag bit 0 in the central directory) are refused.
  std::string encrypted = good;
  const size_t central = encrypted.find("PK\x01\x02");
  encrypted[central + 8] = 1;
  EXPECT_NE(error_of(encrypted).find("encrypted"), std::string::npos);
  // One record used as two dtypes.
  const std::string two_types =
      dict_pickle({{"a", tensor_pickle("0", 6, 0, {6}, {1})},
                   {"b", tensor_pickle("0", 6, 0, {6}, {1}, "IntStorage")}});
  EXPECT_NE(error_of(archive(two_types)).find("different types"), std::string::npos);
}

TEST_F(TorchFileSafety, RepeatedKeysKeepFirstPlaceAndLastValue) {
  const NamedTensors got = load(archive(dict_pickle({{"a", tensor_pickle("0", 6, 0, {1}, {1})},
                                                     {"b", tensor_pickle("0", 6, 1, {1}, {1})},
                                                     {"a", tensor_pickle("0", 6, 2, {1}, {1})}})));
  ASSERT_EQ(got.tensors.size(), 2u);
  EXPECT_EQ(got.tensors[0].first, "a");
  EXPECT_EQ(got.tensors[0].second.item<float>(), 2.f);
  EXPECT_EQ(got.tensors[1].first, "b");
  // The same key object (through the memo) with a non-dict, then a state dict: the last wins.
  const std::string twice = "\x80\x02}("s + uni("model") + "q\x07" + int4(5) + "h\x07}(" +
                            uni("w") + tensor_pickle("0", 6, 0, {6}, {1}) + "uu.";
  const NamedTensors last = load(archive(twice));
  ASSERT_EQ(last.tensors.size(), 1u);
  EXPECT_EQ(last.tensors[0].first, "w");
  const std::string first = "\x80\x02}("s + uni("model") + "q\x07}(" + uni("w") +
                            tensor_pickle("0", 6, 0, {6}, {1}) + "uh\x07" + int4(5) + "u.";
  EXPECT_NE(error_of(archive(first)).find("no state dict"), std::string::npos);
}

TEST_F(TorchFileSafety, MalformedSafetensorsAreRefused) {
  const auto file = [](const std::string& header, const std::string& data) {
    return le(header.size(), 8) + header + data;
  };
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(error_of(file(ok, std::string(8, '\0')), "f.safetensors"), "(loaded without error)");
  EXPECT_EQ(error_of(file("{}", ""), "f.safetensors"), "(loaded without error)");
  EXPECT_NE(error_of(file(ok, std::string(7, '\0')), "f.safetensors").find("outside the data"),
            std::string::npos);
  EXPECT_NE(error_of(le(1000, 8) + "{}", "f.safetensors").find("exceeds the file"),
            std::string::npos);
  EXPECT_NE(error_of(file("{\"w\":", ""), "f.safetensors").find("not a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", "ab"),
                     "f.safetensors")
                .find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                          std::string(8, '\0')),
                     "f.safetensors")
                .find("bad shape"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                          std::string(8, '\0')),
                     "f.safetensors")
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(error_of("abc", "f.safetensors").find("truncated"), std::string::npos);
}

// --- files as the format says, and the text they carry for fusedlinear ---------------------

std::string safetensors_file(const std::string& header, const std::string& data) {
  return le(header.size(), 8) + header + data;
}

// "name":{"dtype":"F32","shape":[...],"data_offsets":[begin,end]} for a safetensors header.
std::string st_tensor(const std::string& name, const std::string& shape, uint64_t begin,
                      uint64_t end) {
  return "\"" + name + R"(":{"dtype":"F32","shape":[)" + shape + R"(],"data_offsets":[)" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST_F(TorchFileSafety, SafetensorsTensorsCoverTheDataSectionExactly) {
  const auto error = [&](const std::string& header, size_t data) {
    return error_of(safetensors_file(header, std::string(data, '\0')), "f.safetensors");
  };
  // A bias inside the weight's bytes: the sizes match the shapes, the bytes are shared.
  EXPECT_NE(error("{" + st_tensor("linear.weight", "48,64", 0, 12288) + "," +
                      st_tensor("linear.bias", "48", 12000, 12192) + "}",
                  12288)
                .find("tensors 'linear.weight' (data_offsets [0, 12288]) and 'linear.bias' "
                      "(data_offsets [12000, 12192]) overlap"),
            std::string::npos);
  EXPECT_NE(error("{" + st_tensor("a", "2", 0, 8) + "," + st_tensor("b", "2", 16, 24) + "}", 24)
                .find("a gap of 8 bytes between 'a' (data_offsets [0, 8]) and 'b' "
                      "(data_offsets [16, 24])"),
            std::string::npos);
  EXPECT_NE(error("{" + st_tensor("a", "2", 8, 16) + "}", 16)
                .find("a gap of 8 bytes before the first tensor, 'a'"),
            std::string::npos);
  EXPECT_NE(error("{" + st_tensor("a", "2", 0, 8) + "}", 12)
                .find("4 bytes after the last tensor, 'a' (data_offsets [0, 8]), which belong to "
                      "no tensor"),
            std::string::npos);
  EXPECT_NE(error("{}", 4).find("4 bytes but the header describes no tensor"), std::string::npos);
  EXPECT_NE(error("{" + st_tensor("a", "2", 8, 0) + "}", 8)
                .find("tensor a has data_offsets [8, 0] out of order"),
            std::string::npos);
  // Listed out of offset order, and empty tensors anywhere: as the format allows.
  const std::string fine = "{" + st_tensor("b", "2", 8, 16) + "," + st_tensor("a", "2", 0, 8) +
                           "," + st_tensor("empty", "0", 8, 8) + "}";
  EXPECT_EQ(error(fine, 16), "(loaded without error)");
}

TEST_F(TorchFileSafety, SafetensorsKeysComeOnce) {
  const std::string one = st_tensor("a", "2", 0, 8);
  EXPECT_NE(
      error_of(safetensors_file("{" + one + "," + one + "}", std::string(8, '\0')), "f.safetensors")
          .find("gives the key 'a' twice (tensor names must be unique)"),
      std::string::npos);
  const std::string twice =
      R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NE(error_of(safetensors_file(twice, std::string(8, '\0')), "f.safetensors")
                .find("gives the key 'dtype' twice in 'a'"),
            std::string::npos);
  const std::string metadata = R"({"__metadata__":{"x":"1","x":"2"}})";
  EXPECT_NE(error_of(safetensors_file(metadata, ""), "f.safetensors")
                .find("the key 'x' twice in '__metadata__'"),
            std::string::npos);
}

TEST_F(TorchFileSafety, SafetensorsMetadataForFusedlinear) {
  const std::string tensor = st_tensor("w", "2", 0, 8);
  const auto read = [&](const std::string& metadata) {
    write_file(dir_.file("m.safetensors"),
               safetensors_file("{" + tensor + R"(,"__metadata__":)" + metadata + "}",
                                std::string(8, '\0')));
    return read_state_dict(dir_.file("m.safetensors"));
  };
  const NamedTensors got =
      read(R"({"format":"pt","fusedlinear.chain":"gelu(tanh),silu","fusedlinear.linear":"fc"})");
  EXPECT_EQ(got.metadata,
            (std::map<std::string, std::string>{{"chain", "gelu(tanh),silu"}, {"linear", "fc"}}));
  EXPECT_TRUE(read(R"({"format":"pt"})").metadata.empty());
  const auto error = [&](const std::string& metadata) {
    return load_error([&] { read(metadata); });
  };
  EXPECT_NE(error(R"({"fusedlinear.chain":3})")
                .find("__metadata__ entry 'fusedlinear.chain' is a JSON number, not a string"),
            std::string::npos);
  EXPECT_NE(error("[1]").find("__metadata__ is not a JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"fusedlinear.":"x"})").find("has an empty name"), std::string::npos);
  EXPECT_NE(error(R"({"fusedlinear.chain":")" + std::string(70000, 'x') + "\"}")
                .find("at most 64 KiB per name and value"),
            std::string::npos);
}

// An OrderedDict of `items`, then BUILD with `state`: torch.save's form of a state dict, whose
// attributes (_metadata) are its state.
std::string ordered_dict_pickle(const std::vector<std::pair<std::string, std::string>>& items,
                                const std::string& state) {
  std::string out = "\x80\x02" + global("collections", "OrderedDict") + ")R(";
  for (const auto& [key, value] : items) out += uni(key) + value;
  return out + "u" + state + "b.";
}
// {"_metadata": {"": {"version": 1}, "fusedlinear": {<entries>}}}, entries pickled key, value.
std::string metadata_state(const std::string& entries) {
  return "}(" + uni("_metadata") + "}(" + uni("") + "}(" + uni("version") + "K\x01" + "u" +
         uni("fusedlinear") + "}(" + entries + "uuu";
}

TEST_F(TorchFileSafety, StateDictMetadataForFusedlinear) {
  const std::string w = tensor_pickle("0", 6, 0, {6}, {1});
  const NamedTensors got = load(archive(ordered_dict_pickle(
      {{"w", w}},
      metadata_state(uni("chain") + uni("gelu(tanh),silu") + uni("version") + int4(3)))));
  ASSERT_EQ(got.tensors.size(), 1u);
  EXPECT_EQ(got.metadata,
            (std::map<std::string, std::string>{{"chain", "gelu(tanh),silu"}, {"version", "3"}}));
  // _metadata without "fusedlinear", or a plain dict: nothing.
  const std::string other = "}(" + uni("_metadata") + "}(" + uni("") + "}uu";
  EXPECT_TRUE(load(archive(ordered_dict_pickle({{"w", w}}, other))).metadata.empty());
  EXPECT_TRUE(load(archive(dict_pickle({{"w", w}}))).metadata.empty());
  // In a checkpoint, the chosen state dict's own.
  const std::string checkpoint =
      "\x80\x02}(" + uni("epoch") + int4(1) + uni("state_dict") +
      ordered_dict_pickle({{"w", w}}, metadata_state(uni("linear") + uni("fc"))).substr(2);
  const std::string closed = checkpoint.substr(0, checkpoint.size() - 1) + "u.";
  EXPECT_EQ(load(archive(closed)).metadata, (std::map<std::string, std::string>{{"linear", "fc"}}));
}

// The reader keeps what the metadata says; the version check refuses any but the exact one.
TEST(TorchFile, MetadataOfAnotherVersionIsRefused) {
  NamedTensors file;
  check_metadata_version(file, "plain.pt");  // no metadata: a plain state dict
  file.metadata = {{"version", "1"}, {"chain", "relu"}, {"linear", "fc"}};
  check_metadata_version(file, "w.pt");
  for (const std::string version : {"2", "0", "-1", "01", " 1", "1.0", ""}) {
    file.metadata["version"] = version;
    const std::string message =
        testing_support::message_of<LoadError>([&] { check_metadata_version(file, "w.pt"); });
    EXPECT_EQ(message, "w.pt: its fusedlinear metadata (chain, linear, version) says version '" +
                           version +
                           "'; this reads version 1 only (as weights/fx_chain.py save_with_chain "
                           "writes it, docs/CHAINS.md)");
  }
  file.metadata.erase("version");
  EXPECT_NE(testing_support::message_of<LoadError>([&] {
              check_metadata_version(file, "w.pt");
            }).find("w.pt: its fusedlinear metadata (chain, linear) carries no version"),
            std::string::npos);
}

TEST_F(TorchFileSafety, MalformedStateDictMetadataIsRefused) {
  const std::string w = tensor_pickle("0", 6, 0, {6}, {1});
  const auto error = [&](const std::string& entries) {
    return error_of(archive(ordered_dict_pickle({{"w", w}}, metadata_state(entries))));
  };
  EXPECT_NE(error(uni("chain") + "]")
                .find("_metadata['fusedlinear']['chain'] is a list, "
                      "expected a string"),
            std::string::npos);
  EXPECT_NE(error(uni("chain") + "G" + std::string(8, '\0')).find("is a float, expected a string"),
            std::string::npos);
  EXPECT_NE(error(uni("chain") + uni(std::string(70000, 'x'))).find("64 KiB"), std::string::npos);
  // One long value under many names through the memo: capped in all.
  std::string many = uni("k0") + uni(std::string(60000, 'x')) + "q\x01";
  for (int i = 1; i < 20; ++i) many += uni("k" + std::to_string(i)) + "h\x01";
  EXPECT_NE(error(many).find("exceeds 1 MiB in all"), std::string::npos);
  const std::string not_dict =
      "}(" + uni("_metadata") + "}(" + uni("fusedlinear") + uni("gelu") + "uu";
  EXPECT_NE(error_of(archive(ordered_dict_pickle({{"w", w}}, not_dict)))
                .find("_metadata['fusedlinear'] is a string, expected a dict of strings"),
            std::string::npos);
}

// --- inputs that are not regular files, and the advice for a tensor ---------------------------

TEST(TorchFile, NonRegularInputsAreRefusedBeforeOpening) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opened for reading, a FIFO without a writer would block: the refusal must come at once.
  auto refused = std::async(std::launch::async, [&] {
    return load_error([&] { read_state_dict(fifo); }) + "|" +
           load_error([&] { read_tensor(fifo); });
  });
  if (refused.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets the reader go on
    if (fd >= 0) ::close(fd);
    FAIL() << "reading a FIFO blocked";
  }
  const std::string both = refused.get();
  EXPECT_EQ(both, fifo + ": cannot open: not a regular file (a FIFO)|" + fifo +
                      ": cannot open: not a regular file (a FIFO)");
  const std::string socket_path = dir.file("socket");
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(load_error([&] { read_state_dict(socket_path); }),
            socket_path + ": cannot open: not a regular file (a socket)");
  ::close(sock);
  EXPECT_EQ(load_error([&] { read_tensor("/dev/null"); }),
            "/dev/null: cannot open: not a regular file (a character device)");
  // A symbolic link to a regular file is read as the file.
  write_tensor(torch::ones({2}), dir.file("t.pt"));
  ASSERT_EQ(::symlink(dir.file("t.pt").c_str(), dir.file("link.pt").c_str()), 0);
  EXPECT_TRUE(read_tensor(dir.file("link.pt")).equal(torch::ones({2})));
}

TEST(TorchFile, RefusalsOfATensorAdviseSavingATensor) {
  TempDir dir;
  std::vector<std::string> paths;
  for (const std::string& name : list_dir(kFixtureRoot)) {
    for (const char* file : {"/compressed.pt", "/torchscript.pt"}) {
      if (file_exists(kFixtureRoot + "/" + name + file))
        paths.push_back(kFixtureRoot + "/" + name + file);
    }
  }
  write_file(dir.file("no_pickle.pt"), make_zip({{"archive/a.txt", "hello"}}));
  paths.push_back(dir.file("no_pickle.pt"));
  ASSERT_GE(paths.size(), 3u);
  for (const std::string& path : paths) {
    const std::string message = load_error([&] { read_tensor(path); });
    EXPECT_NE(message.find("torch.save(tensor, path)"), std::string::npos) << message;
    EXPECT_EQ(message.find("state_dict()"), std::string::npos) << message;
    EXPECT_NE(load_error([&] { read_state_dict(path); }).find("state_dict()"), std::string::npos);
  }
}

// Out of memory while a file is read: a LoadError like any other, in a child process under an
// address-space limit. The tensor is a view of the file's bytes, not a second copy: 100 MiB
// more than the process holds is enough for a 64 MiB file.
TEST(TorchFile, OutOfMemoryWhileReadingIsALoadError) {
  if (testing_support::kAddressSanitizer) {
    GTEST_SKIP() << "AddressSanitizer's allocator ends the process where malloc would fail";
  }
  TempDir dir;
  const std::string big = dir.file("big.pt");
  write_tensor(torch::zeros({4096, 4096}), big);  // 64 MiB
  for (const uint64_t margin : {uint64_t{16} << 20, uint64_t{100} << 20}) {
    const std::string result = dir.file("result.txt");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      uint64_t pages = 0;
      std::ifstream("/proc/self/statm") >> pages;
      const rlimit limit{pages * uint64_t(::sysconf(_SC_PAGESIZE)) + margin, RLIM_INFINITY};
      std::string message = "(no limit)";
      if (::setrlimit(RLIMIT_AS, &limit) == 0) {
        try {
          read_tensor(big);
          message = "(loaded)";
        } catch (const LoadError& e) {
          message = e.what();
        } catch (...) {
          message = "(another exception)";
        }
      }
      std::ofstream(result) << message;
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the reader died of signal " << WTERMSIG(status);
    const std::string message = read_file(result);
    if (margin < (uint64_t{64} << 20)) {
      EXPECT_EQ(message.rfind(big + ": out of memory reading the file (64.00 MiB, ", 0), 0u)
          << "margin " << (margin >> 20) << " MiB: " << message;
    } else {
      EXPECT_EQ(message, "(loaded)") << "margin " << (margin >> 20) << " MiB";
    }
  }
}

}  // namespace
}  // namespace fusedlinear
