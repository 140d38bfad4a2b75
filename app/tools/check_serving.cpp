// fusedlinear_check_serving REPOSITORY MODEL: loads the two models of a serving repository that
// examples/serving/build_repository.py wrote, with the loaders of Triton's PyTorch backend, in
// this program, which links the ops (a server preloads libfusedlinear_ops.so instead):
// MODEL_aoti/1/model.pt2 with AOTIModelPackageLoader (platform torch_aoti) and
// MODEL_torchscript/1/model.pt with torch::jit::load (pytorch_libtorch, the legacy path), each on
// the device its config.pbtxt names and under InferenceMode, as the backend runs them. Runs each
// on MODEL_input.pt, after checking that its config takes that input and gives PyTorch's output
// shape, and compares with PyTorch's eager output, MODEL_want.pt. One line per model; exit code 0
// when both are within 1e-6 of PyTorch, 1 when one is not, 2 for bad input.
#include <c10/core/InferenceMode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/tools/check_support.h"
#include "modules/loader/torch_file.h"

namespace {

using namespace fusedlinear;

// Against PyTorch's eager forward the models differ only in rounding: the GEMM without the bias
// (the op adds it) and the op's float activations, a few float32 ulps of outputs near 1, well
// inside the tolerance (docs/RESULTS.md: serving).
constexpr double kTolerance = 1e-6;
// The TorchScript executor specializes its graph over the first runs: each model runs this often.
constexpr int kRuns = 3;

struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void require_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw CheckError(path + ": no such file (examples/serving/build_repository.py writes it)");
  }
}

// What the server reads of a config.pbtxt, for one input and one output.
struct ModelConfig {
  std::string path;
  std::string platform;
  std::string kind;
  int64_t max_batch_size = 0;
  std::vector<std::vector<int64_t>> dims;  // the input's, then the output's
};

std::vector<std::string> matches(const std::string& text, const std::string& pattern) {
  std::vector<std::string> found;
  const std::regex field(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), field), end; it != end; ++it) {
    found.push_back((*it)[1]);
  }
  return found;
}

int64_t to_integer(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  int64_t value = 0;
  if (!(in >> value) || !(in >> std::ws).eof()) throw CheckError(what + ": '" + text + "'");
  return value;
}

ModelConfig read_config(const std::string& path) {
  require_file(path);
  std::ifstream file(path);
  std::ostringstream contents;
  contents << file.rdbuf();
  if (!file) throw CheckError(path + ": cannot read it");
  const std::string text = std::regex_replace(contents.str(), std::regex("#[^\n]*"), "");
  const auto one = [&](const char* field, const std::string& pattern) {
    const std::vector<std::string> found = matches(text, pattern);
    if (found.size() != 1) {
      throw CheckError(path + ": " + std::to_string(found.size()) + " '" + field +
                       "' fields where one was expected");
    }
    return found[0];
  };
  ModelConfig config;
  config.path = path;
  config.platform = one("platform", R"(\bplatform\s*:\s*"([^"]*)\")");
  config.kind = one("kind", R"(\bkind\s*:\s*(\w+))");
  config.max_batch_size = to_integer(one("max_batch_size", R"(\bmax_batch_size\s*:\s*(\S+))"),
                                     path + ": max_batch_size is not an integer");
  for (const std::string& list : matches(text, R"(\bdims\s*:\s*\[([^\]]*)\])")) {
    std::vector<int64_t> dims;
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      dims.push_back(to_integer(item, path + ": dims [" + list + "] are not integers"));
    }
    config.dims.push_back(dims);
  }
  const std::vector<std::string> types = matches(text, R"(\bdata_type\s*:\s*(\w+))");
  if (config.dims.size() != 2 || types.size() != 2) {
    throw CheckError(path + ": " + std::to_string(config.dims.size()) + " dims and " +
                     std::to_string(types.size()) +
                     " data types, where the model has one input and one output");
  }
  for (const std::string& type : types) {
    if (type != "TYPE_FP32") throw CheckError(path + ": data_type " + type + ", not TYPE_FP32");
  }
  return config;
}

// The shape of the input (0) or output (1) in a request, [-1] + dims where the server batches,
// against the sample's.
void check_shape(const ModelConfig& config, size_t which, c10::IntArrayRef shape) {
  std::vector<int64_t> full = config.dims[which];
  if (config.max_batch_size > 0) full.insert(full.begin(), -1);
  bool takes = full.size() == shape.size() &&
               (config.max_batch_size == 0 || shape[0] <= config.max_batch_size);
  for (size_t i = 0; takes && i < full.size(); ++i) takes = full[i] == -1 || full[i] == shape[i];
  if (!takes) {
    throw CheckError(config.path + ": " + (which == 0 ? "input " : "output ") +
                     c10::str(c10::IntArrayRef(full)) + " (max_batch_size " +
                     std::to_string(config.max_batch_size) + ") where the sample's is " +
                     c10::str(shape));
  }
}

// The device of the server's instance: GPU 0 for KIND_GPU.
torch::Device instance_device(const ModelConfig& config) {
  if (config.kind == "KIND_CPU") return torch::kCPU;
  if (config.kind != "KIND_GPU") {
    throw CheckError(config.path + ": kind " + config.kind + ", where KIND_GPU or KIND_CPU runs");
  }
  if (!torch::cuda::is_available()) {
    throw CheckError(config.path + ": kind KIND_GPU, and this process sees no CUDA device");
  }
  return {torch::kCUDA, 0};
}

// Runs one model kRuns times on x (on the instance's device); prints its line.
bool check_model(const std::string& name, const std::string& how, const torch::Device& device,
                 const torch::Tensor& x, const torch::Tensor& want,
                 const std::function<torch::Tensor(const torch::Tensor&)>& run) {
  const torch::Tensor input = x.to(device);
  double difference = 0.0;
  for (int i = 0; i < kRuns; ++i) {
    double d = 0.0;
    try {
      d = max_abs_difference(run(input), want);
    } catch (const std::exception& e) {
      throw CheckError(name + ": " + error_line(e));
    }
    if (std::isnan(d) || d > difference) difference = d;
  }
  const bool ok = difference <= kTolerance;
  std::printf(
      "%s (%s on %s): %s -> %s, max abs difference from PyTorch %.3g over %d runs "
      "(tolerance %g): %s\n",
      name.c_str(), how.c_str(), device.str().c_str(), c10::str(x.sizes()).c_str(),
      c10::str(want.sizes()).c_str(), difference, kRuns, kTolerance, ok ? "ok" : "FAIL");
  std::fflush(stdout);
  return ok;
}

int check(const std::string& repository, const std::string& model) {
  const std::string aoti = repository + "/" + model + "_aoti";
  const std::string script = repository + "/" + model + "_torchscript";
  const std::string package_path = aoti + "/1/model.pt2";
  const std::string module_path = script + "/1/model.pt";
  for (const std::string& path : {package_path, module_path, repository + "/" + model + "_input.pt",
                                  repository + "/" + model + "_want.pt"}) {
    require_file(path);
  }
  const torch::Tensor x = read_tensor(repository + "/" + model + "_input.pt");
  const torch::Tensor want = read_tensor(repository + "/" + model + "_want.pt");
  if (x.scalar_type() != torch::kFloat32 || want.scalar_type() != torch::kFloat32 || x.dim() != 2 ||
      want.dim() != 2 || x.size(0) != want.size(0)) {
    throw CheckError(repository + ": the sample input and output are " + c10::str(x.sizes()) + " " +
                     c10::toString(x.scalar_type()) + " and " + c10::str(want.sizes()) + " " +
                     c10::toString(want.scalar_type()) +
                     ", where float32 rows of each were expected");
  }
  const ModelConfig aoti_config = read_config(aoti + "/config.pbtxt");
  const ModelConfig script_config = read_config(script + "/config.pbtxt");
  for (const auto& [config, platform] : {std::make_pair(&aoti_config, "torch_aoti"),
                                         std::make_pair(&script_config, "pytorch_libtorch")}) {
    if (config->platform != platform) {
      throw CheckError(config->path + ": platform \"" + config->platform + "\", where \"" +
                       platform + "\" was expected");
    }
    check_shape(*config, 0, x.sizes());
    check_shape(*config, 1, want.sizes());
  }

  const torch::Device aoti_device = instance_device(aoti_config);
  const torch::Device script_device = instance_device(script_config);

  // The backend's default (INFERENCE_MODE true), over loading and running alike.
  c10::InferenceMode inference_mode;
  // As the torch_aoti platform loads it: the package's model "model" on the instance's device
  // (the server also passes one runner, multi-threaded use and the device index, from torch 2.8
  // on; for GPU 0 and the CPU these are the defaults, so this builds from torch 2.6 on).
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> package;
  try {
    package = std::make_unique<torch::inductor::AOTIModelPackageLoader>(package_path, "model");
  } catch (const std::exception& e) {
    throw CheckError(package_path + ": " + error_line(e));
  }
  bool ok = check_model(
      model + "_aoti", "torch_aoti: AOTIModelPackageLoader", aoti_device, x, want,
      [&](const torch::Tensor& input) {
        const std::vector<torch::Tensor> outputs = package->run({input});
        if (outputs.size() != 1) {
          throw CheckError(std::to_string(outputs.size()) + " outputs where one was expected");
        }
        return outputs[0];
      });
  package.reset();
  // As the pytorch_libtorch platform loads it: the module's tensors moved to the instance's
  // device as it is read.
  torch::jit::Module module;
  try {
    module = torch::jit::load(module_path, script_device);
  } catch (const std::exception& e) {
    throw CheckError(module_path + ": " + error_line(e));
  }
  ok = check_model(model + "_torchscript", "pytorch_libtorch (legacy): torch::jit::load",
                   script_device, x, want,
                   [&](const torch::Tensor& input) {
                     const torch::IValue output = module.forward({input});
                     if (!output.isTensor()) {
                       throw CheckError("forward returned " + output.tagKind() + ", not a tensor");
                     }
                     return output.toTensor();
                   }) &&
       ok;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: fusedlinear_check_serving REPOSITORY MODEL (a repository that "
                 "examples/serving/build_repository.py wrote; MODEL e.g. swish_chain)\n");
    return 2;
  }
  try {
    return check(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusedlinear_check_serving: error: %s\n", error_line(e).c_str());
    return 2;
  }
}
