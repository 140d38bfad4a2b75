// Damaged files: a small valid state dict (and a tensor, and a safetensors file) cut at every
// byte and with thousands of seeded random byte changes. Each must load or throw LoadError:
// no crash, no other exception, no hang, no allocation beyond what the file holds. Flips
// confined to the pickle get their CRC-32 fixed, so they reach the pickle reader itself.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "modules/loader/torch_file.h"
#include "tests/test_support.h"

// Under AddressSanitizer, any single allocation over 1 GiB fails the test.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=1024"; }

namespace fusedlinear {
namespace {

using testing_support::file_exists;
using testing_support::list_dir;
using testing_support::read_file;

const std::string kFixtures = std::string(FUSEDLINEAR_SOURCE_DIR) + "/weights/fixtures/loader/";

// The committed fixture folders, one per torch version (torch1.13, torch2.11, ...), sorted.
std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs;
  for (const std::string& name : list_dir(kFixtures)) {
    const std::string dir = kFixtures + name;  // kFixtures ends with '/'
    if (file_exists(dir + "/manifest.json")) dirs.push_back(dir);
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// A fixture file of the first torch version folder.
std::string fixture(const std::string& name) {
  const std::vector<std::string> dirs = fixture_dirs();
  return dirs.empty() ? "" : read_file(dirs.front() + "/" + name);
}

uint32_t le32(const std::string& s, size_t pos) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[pos + i]);
  return v;
}
uint16_t le16(const std::string& s, size_t pos) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[pos]) | static_cast<uint8_t>(s[pos + 1])
                                                                  << 8);
}

uint32_t crc(const char* data, size_t size) {
  uint32_t c = 0xFFFFFFFF;
  for (size_t i = 0; i < size; ++i) {
    c ^= static_cast<uint8_t>(data[i]);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

// Where data.pkl's bytes and its CRC field (in the central directory) are, found by walking
// the central directory headers of a valid archive.
struct PickleRegion {
  size_t begin = 0, size = 0, crc_field = 0;
};
PickleRegion find_pickle(const std::string& zip) {
  for (size_t pos = zip.find("PK\x01\x02"); pos != std::string::npos;
       pos = zip.find("PK\x01\x02", pos + 4)) {
    const size_t name_len = le16(zip, pos + 28);
    const std::string name = zip.substr(pos + 46, name_len);
    if (name.size() < 9 || name.compare(name.size() - 9, 9, "/data.pkl") != 0) continue;
    const size_t local = le32(zip, pos + 42);
    PickleRegion region;
    region.begin = local + 30 + le16(zip, local + 26) + le16(zip, local + 28);
    region.size = le32(zip, pos + 24);
    region.crc_field = pos + 16;
    return region;
  }
  return {};
}

class TorchFileRobustness : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_.path();
    path_ = dir_ + "/damaged.pt";
  }

  // Loads `bytes` as a file: it must load, or fail with a one-line LoadError naming the file.
  // Returns whether it loaded.
  bool load_or_refuse(const std::string& bytes, bool tensor = false,
                      const std::string& name = "damaged.pt") {
    const std::string path = dir_ + "/" + name;
    // A new file each time: truncating one with unwritten data makes ext4 flush it (~4 ms).
    std::remove(path.c_str());
    std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
    try {
      std::vector<torch::Tensor> tensors;
      if (tensor) {
        tensors.push_back(read_tensor(path));
      } else {
        for (auto& item : read_state_dict(path).tensors) tensors.push_back(item.second);
      }
      for (const torch::Tensor& t : tensors) {
        // Whatever loaded came from the file: no storage larger than it.
        EXPECT_LE(t.storage().nbytes(), bytes.size());
      }
      return true;
    } catch (const LoadError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      return false;
    }
  }

  testing_support::TempDir temp_;  // removed with everything in it when the test ends
  std::string dir_, path_;
};

TEST_F(TorchFileRobustness, TruncatedAtEveryByteOffset) {
  const auto start = std::chrono::steady_clock::now();
  ASSERT_FALSE(fixture_dirs().empty());
  for (const std::string& dir : fixture_dirs()) {
    for (const auto& [name, tensor] : {std::pair<std::string, bool>{"state_dict.pt", false},
                                       {"tensor.pt", true},
                                       {"state_dict.safetensors", false}}) {
      const std::string good = read_file(dir + "/" + name);
      ASSERT_FALSE(good.empty()) << dir << "/" << name;
      const std::string file_name =
          name.find(".safetensors") != std::string::npos ? "damaged.safetensors" : "damaged.pt";
      ASSERT_TRUE(load_or_refuse(good, tensor, file_name)) << dir << "/" << name;
      int loaded = 0;
      for (size_t cut = 0; cut < good.size(); ++cut) {
        SCOPED_TRACE(dir + "/" + name + " cut at " + std::to_string(cut));
        loaded += load_or_refuse(good.substr(0, cut), tensor, file_name);
      }
      // A zip without its end records cannot load; a cut safetensors file cannot either.
      EXPECT_EQ(loaded, 0) << dir << "/" << name;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("truncations: %.2f s\n", seconds);
}

// `good` with 1 to max_flips random bytes among its first `range` changed (each XORed with a
// non-zero value), drawn from rng.
std::string with_random_flips(const std::string& good, std::mt19937& rng, int max_flips,
                              size_t range) {
  std::string bad = good;
  const int flips = 1 + static_cast<int>(rng() % unsigned(max_flips));
  for (int i = 0; i < flips; ++i) bad[rng() % range] ^= static_cast<char>(1 + rng() % 255);
  return bad;
}

TEST_F(TorchFileRobustness, SeededRandomByteFlipsAnywhere) {
  const std::string good = fixture("state_dict.pt");
  ASSERT_FALSE(good.empty());
  std::mt19937 rng(20261129);
  int loaded = 0;
  const int trials = 4000;
  for (int trial = 0; trial < trials; ++trial) {
    const std::string bad = with_random_flips(good, rng, 4, good.size());
    SCOPED_TRACE("trial " + std::to_string(trial));
    loaded += load_or_refuse(bad);
  }
  std::printf("random flips anywhere: %d of %d loaded\n", loaded, trials);
}

TEST_F(TorchFileRobustness, SeededRandomByteFlipsInThePickleReachTheReader) {
  const std::vector<std::string> dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  for (size_t d = 0; d < dirs.size(); ++d) {
    const std::string& dir = dirs[d];
    for (const auto& [name, tensor] : {std::pair<std::string, bool>{"state_dict.pt", false},
                                       {"checkpoint_model.pt", false},
                                       {"shared_storage.pt", false},
                                       {"tensor.pt", true}}) {
      const std::string good = read_file(dir + "/" + name);
      ASSERT_FALSE(good.empty()) << dir << "/" << name;
      const PickleRegion pickle = find_pickle(good);
      ASSERT_GT(pickle.size, 0u) << dir << "/" << name;
      std::mt19937 rng(7 + d);  // versions often share data.pkl bytes: vary the flips
      int loaded = 0;
      const int trials = 1500;
      for (int trial = 0; trial < trials; ++trial) {
        std::string bad = good;
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < flips; ++i) {
          // Mostly single-bit changes (near misses of valid opcodes and lengths), some bytes.
          const size_t at = pickle.begin + rng() % pickle.size;
          bad[at] ^= static_cast<char>(rng() % 2 ? 1u << (rng() % 8) : 1 + rng() % 255);
        }
        const uint32_t fixed = crc(bad.data() + pickle.begin, pickle.size);
        for (int i = 0; i < 4; ++i) bad[pickle.crc_field + i] = static_cast<char>(fixed >> (8 * i));
        SCOPED_TRACE(dir + "/" + name + " trial " + std::to_string(trial));
        loaded += load_or_refuse(bad, tensor);
      }
      std::printf("%s/%s: pickle flips: %d of %d loaded\n", dir.c_str(), name.c_str(), loaded,
                  trials);
      EXPECT_LT(loaded, trials) << "the flips never reached the pickle reader";
    }
  }
}

TEST_F(TorchFileRobustness, SeededRandomByteFlipsInSafetensorsHeaders) {
  const std::string good = fixture("state_dict.safetensors");
  ASSERT_FALSE(good.empty());
  const size_t header_end = 8 + le32(good, 0);
  std::mt19937 rng(11);
  int loaded = 0;
  const int trials = 2000;
  for (int trial = 0; trial < trials; ++trial) {
    const std::string bad = with_random_flips(good, rng, 3, header_end);
    SCOPED_TRACE("trial " + std::to_string(trial));
    loaded += load_or_refuse(bad, false, "damaged.safetensors");
  }
  std::printf("safetensors header flips: %d of %d loaded\n", loaded, trials);
}

}  // namespace
}  // namespace fusedlinear
