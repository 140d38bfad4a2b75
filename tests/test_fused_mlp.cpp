// The fused-MLP kernel (GemmKernel::kMlp, kernels/cuda/mlp/): its plan's refusals and forms and, on
// the CPU, the per-layer path it falls back to; on a GPU, its results in both forms (a block a
// tile, a cluster a tile) against float64 and against the per-layer path, bitwise where every sum
// is exact, run to run and from a CUDA graph.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernels/ops/gemm_plan.h"
#include "kernels/ops/linear_forward.h"
#include "kernels/ops/ops.h"
#include "modules/layered_model.h"

#ifdef FUSEDLINEAR_WITH_CUDA
#include "tests/cuda_graph_support.h"
#endif
#ifdef FUSEDLINEAR_WITH_JIT
#include <cstdlib>

#include "kernels/cuda/jit/compiled_chains.h"
#endif

namespace fusedlinear {
namespace {

MlpQuery fitting_query() {
  MlpQuery query;
  query.device = GemmDevice{true, 9, 0};
  query.widths = {64, 256, 256, 256, 8};
  query.compiled_chains = {false, false, false, false};
  return query;
}

TEST(FusedMlpPlan, TakesAModelThatFits) {
  EXPECT_EQ(mlp_refusal(fitting_query()), "");
  MlpQuery sixteen_bit = fitting_query();
  sixteen_bit.float32_model = false;
  sixteen_bit.device = GemmDevice{true, 8, 0};
  EXPECT_EQ(mlp_refusal(sixteen_bit), "");
}

TEST(FusedMlpPlan, RefusesWhatDoesNotFitWithItsReason) {
  const auto refusal = [](auto change) {
    MlpQuery query = fitting_query();
    change(query);
    return mlp_refusal(query);
  };
  EXPECT_EQ(refusal([](MlpQuery& q) { q.device = GemmDevice{}; }), "it runs on a GPU only");
  EXPECT_EQ(refusal([](MlpQuery& q) { q.widths[2] = 512; }),
            "layer 2's output is 512 wide; it takes 1 to 256");
  EXPECT_EQ(refusal([](MlpQuery& q) { q.widths[0] = 300; }),
            "the input is 300 wide; it takes 1 to 256");
  EXPECT_EQ(refusal([](MlpQuery& q) {
              q.widths.assign(10, 16);
              q.compiled_chains.assign(9, false);
            }),
            "the model has 9 layers; it takes at most 8");
  EXPECT_EQ(refusal([](MlpQuery& q) {
              q.precision = Precision::kBf16x3;
              q.device.shared_bytes_per_block = 48 * 1024;
            }),
            "it forms float32 products of float32 models (ieee), and bf16 and bf16x3 products "
            "on the tensor cores (compute capability 8.0 or newer) where a block's shared "
            "memory holds the model's chunks of W; not bf16x3's here");
  EXPECT_EQ(refusal([](MlpQuery& q) {
              q.float32_model = false;
              q.device = GemmDevice{true, 7, 5};
            }),
            "its 16-bit products take tensor cores of compute capability 8.0 or newer, not 7.5");
  EXPECT_EQ(refusal([](MlpQuery& q) { q.compiled_chains[1] = true; }),
            "layer 2's chain is a declaration's compiled chain; it runs run-time chains (the "
            "interpreter)");
  EXPECT_EQ(refusal([](MlpQuery& q) {
              q.widths = {64, 8};
              q.compiled_chains = {false};
            }),
            "it runs layered models whole; a Linear on its own runs as auto plans it");
}

TEST(FusedMlpPlan, ItsNameParsesAndALinearOnItsOwnRunsAsAuto) {
  EXPECT_EQ(parse_gemm_kernel("mlp"), GemmKernel::kMlp);
  EXPECT_STREQ(gemm_kernel_name(GemmKernel::kMlp), "mlp");
  for (const bool gpu : {false, true}) {
    GemmQuery query;
    query.device = GemmDevice{gpu, gpu ? 9 : 0, 0};
    query.rows = 4;
    query.in_features = 64;
    const GemmPlan auto_plan = plan_gemm(query);
    query.kernel = GemmKernel::kMlp;
    const GemmPlan plan = plan_gemm(query);
    EXPECT_EQ(plan.description, auto_plan.description);
    EXPECT_EQ(plan.skinny, auto_plan.skinny);
    EXPECT_NE(plan.reason.find("the fused MLP kernel was asked for"), std::string::npos)
        << plan.reason;
  }
}

TEST(FusedMlpPlan, EachFormWhereItsRuleSaysAndTheReportSaysWhich) {
  const GemmDevice h200{true, 9, 0, 132, 232448};
  const auto form = [](MlpQuery query, GemmDevice device, int64_t rows, bool float32 = true) {
    query.device = device;
    query.rows = rows;
    query.float32_model = float32;
    return mlp_form(query);
  };
  using cuda::MlpForm;
  MlpQuery policy = fitting_query();  // 64 -> 256 -> 256 -> 256 -> 8
  // Few rows on sm_90: clusters while 8 blocks for each tile of 8 rows fit one wave (16 tiles, 128
  // blocks of 132); then a block a tile, as on older GPUs.
  for (const int64_t rows : {1, 9, 128}) EXPECT_EQ(form(policy, h200, rows), MlpForm::kClusters);
  EXPECT_EQ(form(policy, h200, 129), MlpForm::kTiles);
  EXPECT_EQ(form(policy, h200, 0), MlpForm::kTiles);
  EXPECT_EQ(form(policy, GemmDevice{true, 8, 0, 108, 166912}, 1), MlpForm::kTiles);
  // 16-bit models at most 128 wide whose weights fit a block's shared memory: resident past the
  // cluster form's rows.
  MlpQuery field = fitting_query();
  field.widths = {32, 64, 64, 64, 64, 16};
  field.compiled_chains.assign(5, false);
  field.gated.assign(5, false);
  EXPECT_EQ(form(field, h200, 1 << 21, false), MlpForm::kResident);
  EXPECT_EQ(form(field, h200, 1, false), MlpForm::kClusters);
  EXPECT_EQ(form(field, GemmDevice{true, 8, 0, 108, 166912}, 1, false), MlpForm::kResident);
  EXPECT_EQ(form(field, h200, 1 << 21, true), MlpForm::kTiles);  // float32 ieee: CUDA cores
  MlpQuery field_128 = field;
  field_128.widths = {32, 128, 128, 128, 128, 16};
  EXPECT_EQ(form(field_128, h200, 1 << 21, false), MlpForm::kResident);
  EXPECT_EQ(form(field, GemmDevice{true, 8, 6, 84, 4096}, 1 << 21, false), MlpForm::kTiles);
  // Its shared memory: each layer's rows padded to 32 (a warp's group of tiles), its k to 16 and 8
  // elements past each row, 2 bytes.
  EXPECT_EQ(cuda::mlp_resident_layer_bytes(32, 64, false, 1), 64 * 40 * 2);
  EXPECT_EQ(cuda::mlp_resident_layer_bytes(50, 10, true, 1), 2 * 32 * 72 * 2);
  // Wider than 128, or weights that do not fit together: streamed where the ring of chunks and
  // the threads' slots fit (3 chunks of 32 rows of W, padded as above, and 16 steps of 4 words a
  // thread at 256 wide), else a block a tile.
  EXPECT_EQ(form(policy, h200, 1 << 21, false), MlpForm::kStreamed);
  EXPECT_EQ(cuda::mlp_streamed_bytes(256, 256, false, 1), 3 * 32 * 264 * 2 + 16 * 4 * 4 * 256);
  EXPECT_EQ(cuda::mlp_streamed_bytes(64, 100, true, 2), 3 * 2 * 2 * 16 * 72 * 2 + 2 * 8 * 16 * 256);
  MlpQuery deep = field_128;  // eight gated layers 128 wide: 557 KiB of W
  deep.widths.assign(9, 128);
  deep.gated.assign(8, true);
  deep.compiled_chains.assign(8, false);
  EXPECT_EQ(form(deep, h200, 1 << 21, false), MlpForm::kStreamed);
  EXPECT_EQ(form(policy, GemmDevice{true, 8, 6, 84, 101376}, 1 << 21, false), MlpForm::kTiles);

  // float32 models in bf16 and bf16x3: the resident form's products (their W split in shared
  // memory: bf16x3 holds two parts), or float32's in the cluster form at few rows; elsewhere, and
  // in bf16x6 and tf32, the model runs layer by layer.
  MlpQuery split = field;
  split.device = h200;
  split.rows = 1 << 21;
  for (const Precision precision : {Precision::kBf16, Precision::kBf16x3}) {
    split.precision = precision;
    EXPECT_EQ(mlp_form(split), MlpForm::kResident);
    EXPECT_EQ(mlp_refusal(split), "");
  }
  EXPECT_EQ(cuda::mlp_resident_layer_bytes(32, 64, false, 2), 2 * 64 * 40 * 2);
  EXPECT_EQ(mlp_description(split),
            "fused MLP, bf16x3, tensor cores, weights resident in shared memory");
  split.rows = 1;
  EXPECT_EQ(mlp_refusal(split), "");
  EXPECT_EQ(mlp_description(split),
            "fused MLP, ieee, float32 FMAs (bf16x3 runs ieee's kernel at few rows), clusters of 8 "
            "blocks a tile");
  split.rows = 1 << 21;
  for (const Precision precision : {Precision::kBf16x6, Precision::kTf32}) {
    split.precision = precision;
    EXPECT_NE(mlp_refusal(split), "");
  }
  // 128 wide: bf16 (one part) resident, bf16x3 (two) streamed; 256 wide streamed in both. A
  // GPU whose blocks have too little shared memory refuses them.
  split.widths = field_128.widths;
  split.precision = Precision::kBf16;
  EXPECT_EQ(mlp_form(split), MlpForm::kResident);
  split.precision = Precision::kBf16x3;
  EXPECT_EQ(mlp_form(split), MlpForm::kStreamed);
  EXPECT_EQ(mlp_refusal(split), "");
  split.widths = policy.widths;
  for (const Precision precision : {Precision::kBf16, Precision::kBf16x3}) {
    split.precision = precision;
    EXPECT_EQ(mlp_form(split), MlpForm::kStreamed);
    EXPECT_EQ(mlp_refusal(split), "");
  }
  EXPECT_EQ(mlp_description(split),
            "fused MLP, bf16x3, tensor cores, weights streamed through shared memory");
  split.device = GemmDevice{true, 8, 6, 84, 101376};
  EXPECT_NE(mlp_refusal(split), "");
  split.device = h200;

  policy.device = field.device = h200;
  policy.rows = 1;
  EXPECT_EQ(mlp_description(policy), "fused MLP, ieee, float32 FMAs, clusters of 8 blocks a tile");
  policy.rows = 1024;
  EXPECT_EQ(mlp_description(policy), "fused MLP, ieee, float32 FMAs");
  field.float32_model = false;
  field.rows = 1 << 21;
  EXPECT_EQ(mlp_description(field), "fused MLP, tensor cores, weights resident in shared memory");
  field.rows = 1;
  EXPECT_EQ(mlp_description(field), "fused MLP, float32 FMAs, clusters of 8 blocks a tile");
}

// Auto takes the kernel in the forms and modes where it measured faster than the per-layer path,
// and says why either way; the other kernels never take it.
TEST(FusedMlpPlan, AutoTakesItWhereItMeasuredFaster) {
  const GemmDevice h200{true, 9, 0, 132, 232448};
  const auto choice = [&](MlpQuery query, int64_t rows, bool float32, Precision precision,
                          GemmKernel kernel = GemmKernel::kAuto) {
    query.device = h200;
    query.rows = rows;
    query.float32_model = float32;
    query.precision = precision;
    return choose_mlp(query, kernel);
  };
  MlpQuery policy = fitting_query();  // 64 -> 256 -> 256 -> 256 -> 8
  MlpQuery field = fitting_query();
  field.widths = {32, 64, 64, 64, 64, 16};
  field.compiled_chains.assign(5, false);
  MlpQuery field_128 = field, field_256 = field;
  field_128.widths = {32, 128, 128, 128, 128, 16};
  field_256.widths = {32, 256, 256, 256, 256, 16};
  const int64_t many = int64_t(1) << 21;
  // Taken: the cluster form at few rows, in float32 and 16 bits; 16-bit models at most 64 wide
  // resident; float32 models in bf16x3 resident or streamed.
  for (const bool float32 : {true, false}) {
    for (const int64_t rows : {1, 64}) {
      const MlpChoice c = choice(policy, rows, float32, Precision::kIeee);
      EXPECT_TRUE(c.fused) << rows;
      EXPECT_NE(c.reason.find("one launch of the fused MLP measured faster"), std::string::npos);
    }
  }
  EXPECT_TRUE(choice(field, many, false, Precision::kIeee).fused);
  EXPECT_TRUE(choice(field, many, true, Precision::kBf16x3).fused);
  EXPECT_TRUE(choice(field_256, many, true, Precision::kBf16x3).fused);
  // Left to the per-layer path, the reason naming the form: a block a tile (float32 ieee past the
  // cluster form's rows), 16-bit models wider than 64, the streamed form of 16-bit models and of
  // bf16.
  const MlpChoice tiles = choice(policy, 1024, true, Precision::kIeee);
  EXPECT_FALSE(tiles.fused);
  EXPECT_EQ(tiles.reason,
            "auto: layer by layer; the fused MLP's block a tile is not among the forms and modes "
            "that measured faster for auto (docs/USAGE.md, \"Small MLPs in one kernel\")");
  EXPECT_FALSE(choice(field, many, true, Precision::kIeee).fused);
  EXPECT_FALSE(choice(field_128, many, false, Precision::kIeee).fused);
  EXPECT_FALSE(choice(field_256, many, false, Precision::kIeee).fused);
  EXPECT_FALSE(choice(field_256, many, true, Precision::kBf16).fused);
  EXPECT_FALSE(choice(policy, 1024, false, Precision::kIeee).fused);  // streamed, 16-bit
  // What the kernel refuses, auto leaves with the refusal; asked for, the refusal alone.
  MlpQuery declared = policy;
  declared.compiled_chains[0] = true;
  const MlpChoice refused = choice(declared, 1, true, Precision::kIeee);
  EXPECT_FALSE(refused.fused);
  EXPECT_EQ(refused.reason.rfind("auto: the fused MLP kernel cannot take it: layer 1's chain", 0),
            0u)
      << refused.reason;
  MlpQuery declared_one_row = declared;
  declared_one_row.device = h200;
  declared_one_row.rows = 1;
  EXPECT_EQ(choice(declared, 1, true, Precision::kIeee, GemmKernel::kMlp).reason,
            mlp_refusal(declared_one_row));
  EXPECT_TRUE(choice(policy, 1024, true, Precision::kIeee, GemmKernel::kMlp).fused);
  for (const GemmKernel kernel : {GemmKernel::kCublas, GemmKernel::kSkinny, GemmKernel::kHopper}) {
    const MlpChoice c = choice(policy, 1, true, Precision::kIeee, kernel);
    EXPECT_FALSE(c.fused);
    EXPECT_EQ(c.reason, "not asked for");
  }
}

// A model of every kind of layer the kernel takes: a chunked Linear's halves, a gated pair with a
// gate Linear of its own, a chain with a parameter, and the residual.
const char* const kEveryLayerSpec = "x+(w13[0]:silu*w13[1]|fc1:add(shift),tanh*g1|fc2:gelu|fc3)";

TEST(FusedMlpPlan, OnTheCpuTheModelRunsLayerByLayerWithTheSameBits) {
  torch::NoGradGuard no_grad;
  LayeredModelImpl model(layered_model(kEveryLayerSpec), {32, 48, 48, 64, 32},
                         at::detail::createCPUGenerator(7));
  const torch::Tensor x = torch::randn({5, 32}, at::detail::createCPUGenerator(8));
  const torch::Tensor per_layer = model.forward(x);
  EXPECT_EQ(model.mlp_refusal(x),
            "auto: the fused MLP kernel cannot take it: it runs on a GPU only");
  model.set_gemm_kernel(GemmKernel::kCublas);
  EXPECT_EQ(model.mlp_refusal(x), "not asked for");
  model.set_gemm_kernel(GemmKernel::kMlp);
  EXPECT_EQ(model.mlp_refusal(x), "it runs on a GPU only");
  EXPECT_TRUE(torch::equal(model.forward(x), per_layer));
  EXPECT_TRUE(torch::equal(model.forward_op(x), per_layer));
  EXPECT_EQ(model.gemm_description(x).find("fused MLP"), std::string::npos);
}

// The GPU's tests: skipped where no CUDA device is.
bool has_cuda() { return torch::cuda::is_available(); }

// Two models of the same parameters on the GPU in `dtype`: one run by the fused-MLP kernel, one
// layer by layer (`per_layer_kernel`: cuBLAS, as auto may take the fused-MLP kernel too).
struct ModelPair {
  std::shared_ptr<LayeredModelImpl> fused, per_layer;
};

ModelPair model_pair(const std::string& spec, const std::vector<int64_t>& widths,
                     torch::ScalarType dtype, uint64_t seed,
                     GemmKernel per_layer_kernel = GemmKernel::kCublas,
                     const std::map<std::string, bool>& biases = {}) {
  ModelPair pair;
  for (auto* model : {&pair.fused, &pair.per_layer}) {
    *model = std::make_shared<LayeredModelImpl>(layered_model(spec, biases), widths,
                                                at::detail::createCPUGenerator(seed));
    (*model)->to(torch::kCUDA, dtype);
  }
  pair.fused->set_gemm_kernel(GemmKernel::kMlp);
  pair.per_layer->set_gemm_kernel(per_layer_kernel);
  return pair;
}

// How far from float64 a result of `dtype` may lie: float32's sums over at most 256 terms of
// moderate size, or one rounding to the 16-bit type a layer (a few units in its last place).
double tolerance_of(torch::ScalarType dtype) {
  return dtype == torch::kFloat32 ? 2e-5 : dtype == torch::kFloat16 ? 1e-2 : 6e-2;
}

// max |a - b| / (1 + max |b|), in float64 on the CPU.
double scaled_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor b64 = b.to(torch::kCPU, torch::kFloat64);
  return (a64 - b64).abs().max().item<double>() / (1.0 + b64.abs().max().item<double>());
}

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat32, torch::kFloat16, torch::kBFloat16};

// The longest suites, one test a dtype so that they run side by side (the same cases and seeds as
// one loop over the dtypes would take).
class FusedMlpCudaDtype : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  // The dtype's place in kDtypes, which the seeds count in.
  size_t dtype_index() const {
    return size_t(std::find(kDtypes.begin(), kDtypes.end(), GetParam()) - kDtypes.begin());
  }
};

INSTANTIATE_TEST_SUITE_P(Each, FusedMlpCudaDtype, ::testing::ValuesIn(kDtypes),
                         [](const ::testing::TestParamInfo<torch::ScalarType>& info) {
                           return std::string(c10::toString(info.param));
                         });

// Each width, a chain of each activation family, every dtype, batches 1, 2 and 9 (the cluster form
// on sm_90, its tiles of one and of eight rows, a partial tile), 255 and 257 (past it: the resident
// and streamed forms in 16 bits, a block a tile in float32): within the dtype's bound of float64
// and of the per-layer path.
TEST_P(FusedMlpCudaDtype, MatchesFloat64AndThePerLayerPath) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = GetParam();
  const std::vector<std::string> chains = {"tanh",        "relu",      "gelu",
                                           "silu",        "sigmoid",   "mish",
                                           "softplus",    "elu(0.5)",  "leaky_relu(0.2)",
                                           "gelu(tanh)",  "hardswish", "softsign",
                                           "clamp(-2,2)", "selu"};
  // 36 and 33: rows of W the cluster form copies element by element (not 16 bytes at a time).
  const std::vector<int64_t> widths = {16, 32, 33, 36, 48, 64, 128, 200, 256};
  for (size_t w = 0; w < widths.size(); ++w) {
    const int64_t width = widths[w];
    const uint64_t seed = w * kDtypes.size() + dtype_index();  // the case's place in all of them
    const std::string& chain = chains[size_t(seed) % chains.size()];
    const std::string spec = "fc1:" + chain + "|fc2:add(shift)," + chain + "|fc3";
    SCOPED_TRACE(spec + " width " + std::to_string(width) + " " + c10::toString(dtype));
    const ModelPair pair = model_pair(spec, {width, width, width, 8}, dtype, seed + 1);
    for (const int64_t batch : {1, 2, 9, 255, 257}) {
      const torch::Tensor x =
          torch::randn({batch, width}, at::detail::createCPUGenerator(seed + 101))
              .to(torch::kCUDA, dtype);
      ASSERT_EQ(pair.fused->mlp_refusal(x), "");
      const torch::Tensor fused = pair.fused->forward(x);
      ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{batch, 8}));
      EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), tolerance_of(dtype));
      EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), tolerance_of(dtype));
    }
  }
}

// Gated pairs, chunked halves and the residual, uneven widths, every dtype.
TEST(FusedMlpCuda, GatedChunkedAndResidualLayersMatchFloat64) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  uint64_t seed = 50;
  for (const torch::ScalarType dtype : kDtypes) {
    for (const int64_t batch : {1, 9, 257}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " batch " + std::to_string(batch));
      const ModelPair pair = model_pair(kEveryLayerSpec, {48, 200, 40, 256, 48}, dtype, ++seed);
      const torch::Tensor x =
          torch::randn({batch, 48}, at::detail::createCPUGenerator(seed)).to(torch::kCUDA, dtype);
      ASSERT_EQ(pair.fused->mlp_refusal(x), "");
      const torch::Tensor fused = pair.fused->forward(x);
      EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), tolerance_of(dtype));
      EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), tolerance_of(dtype));
    }
  }
}

// Parameters whose every sum is exact in float32 (and in 16-bit partial sums), whatever its
// order: the first Linears' weights and x in {-1, 0, 1}, and every later Linear one power of two
// a row. Then only the epilogue's roundings can differ, and the kernel must give the per-layer
// path's bits (cuBLAS then the epilogue, which rounds where the kernel does).
void make_sums_exact(LayeredModelImpl& model, const std::string& first_input_linears) {
  auto generator = at::detail::createCPUGenerator(11);
  for (LinearChainImpl* linear : model.linears()) {
    torch::Tensor& w = linear->linear()->weight;
    const bool first = first_input_linears.find(linear->spec().linear) != std::string::npos;
    torch::Tensor values;
    if (first) {
      values = torch::randint(-1, 2, w.sizes(), generator, torch::kFloat32);
    } else {
      values = torch::zeros(w.sizes());
      const torch::Tensor columns = torch::randint(0, w.size(1), {w.size(0)}, generator);
      const torch::Tensor scales =
          torch::pow(2.0, torch::randint(-1, 2, {w.size(0)}, generator, torch::kFloat64))
              .to(torch::kFloat32);
      for (int64_t n = 0; n < w.size(0); ++n) {
        values[n][columns[n].item<int64_t>()] = scales[n].item<float>() * (n % 2 ? -1 : 1);
      }
    }
    w.copy_(values.to(w.device(), w.scalar_type()));
  }
}

TEST_P(FusedMlpCudaDtype, GivesThePerLayerBitsWhereEverySumIsExact) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = GetParam();
  // A spec, its Linears that read x, and the Linears without a bias: the last, where the residual
  // is added, takes x in its product's one rounding (cuBLAS's beta = 1).
  struct ExactCase {
    std::string spec, first;
    std::map<std::string, bool> biases;
  };
  const std::vector<ExactCase> cases = {
      {"fc1:tanh|fc2:relu|fc3:gelu|fc4", "fc1", {}},           {kEveryLayerSpec, "w13", {}},
      {"w1:silu*w3|w2:sigmoid", "w1 w3", {{"w3", false}}},     {"x+(fc1:mish|fc2)", "fc1", {}},
      {"x+(fc1:hardtanh(-1,1)|fc2)", "fc1", {{"fc2", false}}},
  };
  // Hidden layers 200 wide and less, and (16-bit models: the resident form past a few rows) 64.
  const int64_t hiddens[] = {200, 64};
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [spec, first, biases] = cases[c];
    for (size_t h = 0; h < 2; ++h) {
      const int64_t hidden = hiddens[h];
      // The case's place in all of them (dtypes innermost), after the suite's first seed.
      const uint64_t seed = 71 + (c * 2 + h) * kDtypes.size() + dtype_index();
      const int64_t in = 48;
      const size_t layers = layered_model(spec).layers.size();
      std::vector<int64_t> widths = {in};
      for (size_t i = 0; i < layers; ++i) widths.push_back(i + 1 == layers ? in : hidden - 8 * i);
      SCOPED_TRACE(spec + " " + c10::toString(dtype) + " hidden " + std::to_string(hidden));
      const ModelPair pair = model_pair(spec, widths, dtype, seed, GemmKernel::kCublas, biases);
      make_sums_exact(*pair.fused, first);
      make_sums_exact(*pair.per_layer, first);
      for (const int64_t batch : {1, 9, 257}) {
        const torch::Tensor x =
            torch::randint(-1, 2, {batch, in}, at::detail::createCPUGenerator(seed))
                .to(torch::kCUDA, dtype);
        ASSERT_EQ(pair.fused->mlp_refusal(x), "");
        const torch::Tensor fused = pair.fused->forward(x);
        const torch::Tensor per_layer = pair.per_layer->forward(x);
        EXPECT_TRUE(torch::equal(fused, per_layer))
            << "batch " << batch << ": " << (fused - per_layer).abs().max().item<double>();
      }
    }
  }
}

// Many rows (tiles past the grid's first wave, a tail tile), repeatable to the bit, and the same
// from a CUDA graph's replay.
TEST(FusedMlpCuda, ManyRowsRepeatableAndCapturedInACudaGraph) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const std::string spec = "fc1:relu|fc2:relu|fc3:relu|fc4:relu|fc5";
  for (const torch::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const ModelPair pair = model_pair(spec, {32, 64, 64, 64, 64, 16}, dtype, 90);
    const int64_t rows = (int64_t(1) << 20) + 3;
    const torch::Tensor x =
        torch::randn({rows, 32}, at::detail::createCPUGenerator(91)).to(torch::kCUDA, dtype);
    const torch::Tensor fused = pair.fused->forward(x);
    EXPECT_TRUE(torch::equal(pair.fused->forward(x), fused));
    EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), tolerance_of(dtype));
#ifdef FUSEDLINEAR_WITH_CUDA
    const torch::Tensor replayed =
        testing_support::replayed_from_cuda_graph([&] { return pair.fused->forward(x); });
    EXPECT_TRUE(torch::equal(replayed, fused));
#endif
  }
}

// Under auto the module runs the fused-MLP kernel where choose_mlp takes the model, with the bits
// it gives when asked for (kMlp), and layer by layer elsewhere; the report says which, and the
// whole-model op gives the module's bits either way.
TEST(FusedMlpCuda, AutoRunsItWhereThePlanTakesIt) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const std::string spec = "fc1:tanh|fc2:tanh|fc3:relu|fc4";
  const std::vector<int64_t> widths = {64, 256, 256, 256, 8};
  const ModelPair pair = model_pair(spec, widths, torch::kFloat32, 140);
  LayeredModelImpl automatic(layered_model(spec), widths, at::detail::createCPUGenerator(140));
  automatic.to(torch::kCUDA);
  bool any_fused = false;
  for (const int64_t rows : {1, 64, 1024}) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    const torch::Tensor x =
        torch::randn({rows, 64}, at::detail::createCPUGenerator(141)).to(torch::kCUDA);
    const MlpChoice choice = automatic.mlp_choice(x);
    EXPECT_EQ(choice.reason.rfind("auto: ", 0), 0u) << choice.reason;
    const std::string description = automatic.gemm_description(x);
    EXPECT_EQ(description.find("fused MLP") != std::string::npos, choice.fused) << description;
    const torch::Tensor y = automatic.forward(x);
    EXPECT_TRUE(torch::equal(automatic.forward_op(x), y));
    if (choice.fused) {
      EXPECT_TRUE(torch::equal(pair.fused->forward(x), y));
    }
    EXPECT_LE(scaled_difference(y, automatic.reference(x)), tolerance_of(torch::kFloat32));
    any_fused = any_fused || choice.fused;
  }
  // On sm_90 the cluster form takes a row or a few: auto runs it there.
  if (gemm_device_of(torch::zeros({1, 8}, torch::kCUDA)).compute_major >= 9) {
    EXPECT_TRUE(any_fused);
  }
}

// The module decides from its own layers (LayeredModelImpl::mlp_choice) before it calls the
// whole-model op, which decides again from its arguments: both must say the same in every form,
// dtype, mode and kernel.
TEST(FusedMlpCuda, TheModuleAndTheWholeModelOpDecideAlike) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> models = {
      {kEveryLayerSpec, {32, 48, 48, 64, 32}},
      {"fc1:tanh|fc2:tanh|fc3:relu|fc4", {64, 256, 256, 256, 8}},
      {"fc1:relu|fc2:relu|fc3:relu|fc4:relu|fc5", {32, 64, 64, 64, 64, 16}},
      {"fc1:relu|fc2", {32, 512, 16}}};
  for (const auto& [spec, widths] : models) {
    for (const torch::ScalarType dtype : kDtypes) {
      LayeredModelImpl model(layered_model(spec), widths, at::detail::createCPUGenerator(150));
      model.to(torch::kCUDA, dtype);
      const std::vector<Precision> modes =
          dtype == torch::kFloat32 ? std::vector<Precision>{Precision::kIeee, Precision::kBf16,
                                                            Precision::kBf16x3, Precision::kBf16x6}
                                   : std::vector<Precision>{Precision::kIeee};
      for (const Precision precision : modes) {
        model.set_precision(precision);
        for (const GemmKernel kernel : {GemmKernel::kAuto, GemmKernel::kMlp}) {
          model.set_gemm_kernel(kernel);
          for (const int64_t rows : {1, 64, 1024, 40000}) {
            SCOPED_TRACE(spec + " " + c10::toString(dtype) + " " + precision_name(precision) + " " +
                         std::to_string(rows) + " rows");
            const torch::Tensor x = torch::zeros({rows, widths.front()}, torch::kCUDA).to(dtype);
            const ModelOpArguments a = model.op_arguments();
            const FusedMlpPlan op =
                fused_model_mlp_plan(x, a.weights, a.biases, a.params, a.spec, a.precision, a.gemm);
            const MlpChoice module = model.mlp_choice(x);
            EXPECT_EQ(module.fused, op.choice.fused);
            EXPECT_EQ(module.reason, op.choice.reason);
            if (op.choice.fused) {
              EXPECT_EQ(model.gemm_description(x), op.description);
            }
          }
        }
      }
    }
  }
}

// The last rows the cluster form takes on this GPU and the first it leaves to a block a tile: each
// form as the report says, within float64's bound, repeatable to the bit.
TEST(FusedMlpCuda, EachFormAtTheBoundaryBetweenThem) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  MlpQuery query = fitting_query();
  query.device = gemm_device_of(torch::zeros({1, 8}, torch::kCUDA));
  const auto clusters = [&](int64_t rows) {
    query.rows = rows;
    return mlp_form(query) == cuda::MlpForm::kClusters;
  };
  if (!clusters(1)) GTEST_SKIP() << "no cluster form before sm_90";
  int64_t last = 1;
  while (clusters(last + 1)) ++last;
  for (const torch::ScalarType dtype : kDtypes) {
    const ModelPair pair = model_pair("w1:gelu*w3|fc2:tanh|fc3", {72, 136, 256, 40}, dtype, 97);
    for (const int64_t batch : {last, last + 1}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " batch " + std::to_string(batch));
      const torch::Tensor x =
          torch::randn({batch, 72}, at::detail::createCPUGenerator(98)).to(torch::kCUDA, dtype);
      const bool clusters = batch == last;
      EXPECT_EQ(pair.fused->gemm_description(x).find("clusters of") != std::string::npos, clusters)
          << pair.fused->gemm_description(x);
      const torch::Tensor fused = pair.fused->forward(x);
      EXPECT_TRUE(torch::equal(pair.fused->forward(x), fused));
      EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), tolerance_of(dtype));
      EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), tolerance_of(dtype));
    }
  }
}

// 16-bit models at most 128 wide past the cluster form's rows: the resident form, with gated,
// chunked and residual layers and uneven widths, a tail tile, against float64 and the per-layer
// path, repeatable to the bit.
TEST(FusedMlpCuda, ResidentFormMatchesFloat64) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  for (const torch::ScalarType dtype : {torch::kFloat16, torch::kBFloat16}) {
    uint64_t seed = 110;
    for (const auto& [spec, widths] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"fc1:relu|fc2:relu|fc3:relu|fc4:relu|fc5", {32, 64, 64, 64, 64, 16}},
             {kEveryLayerSpec, {48, 40, 56, 64, 48}},
             {"fc1:gelu|fc2:softplus|fc3", {3, 17, 33, 5}},
             {"w1:silu*w3|fc2:relu|fc3", {72, 128, 100, 24}}}) {
      const ModelPair pair = model_pair(spec, widths, dtype, ++seed);
      for (const int64_t batch : {int64_t(1000), int64_t(1 << 16) + 5}) {
        SCOPED_TRACE(spec + " " + c10::toString(dtype) + " batch " + std::to_string(batch));
        const torch::Tensor x =
            torch::randn({batch, widths[0]}, at::detail::createCPUGenerator(seed))
                .to(torch::kCUDA, dtype);
        ASSERT_EQ(pair.fused->mlp_refusal(x), "");
        EXPECT_NE(pair.fused->gemm_description(x).find("resident"), std::string::npos)
            << pair.fused->gemm_description(x);
        const torch::Tensor fused = pair.fused->forward(x);
        EXPECT_TRUE(torch::equal(pair.fused->forward(x), fused));
        EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), tolerance_of(dtype));
        EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), tolerance_of(dtype));
      }
    }
  }
}

// float32 models in bf16 and bf16x3, resident (their W split in shared memory, the activations
// split in registers): within the mode's bound of float64 and of the per-layer path in the same
// mode; eager's inf and NaN where x holds them, as the per-layer path gives them.
TEST(FusedMlpCuda, ResidentFormSplitsFloat32ModelsAsTheModeSays) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> widths = {32, 64, 64, 64, 16};
  for (const Precision precision : {Precision::kBf16x3, Precision::kBf16}) {
    for (const std::string spec : {"fc1:relu|fc2:relu|fc3:tanh|fc4", "w1:silu*w3|fc2:gelu|fc3"}) {
      const std::vector<int64_t> model_widths =
          spec[0] == 'w' ? std::vector<int64_t>{32, 64, 48, 16} : widths;
      SCOPED_TRACE(spec + " " + precision_name(precision));
      const ModelPair pair = model_pair(spec, model_widths, torch::kFloat32, 120);
      pair.fused->set_precision(precision);
      pair.per_layer->set_precision(precision);
      torch::Tensor x = torch::randn({5000, model_widths[0]}, at::detail::createCPUGenerator(121))
                            .to(torch::kCUDA);
      ASSERT_EQ(pair.fused->mlp_refusal(x), "");
      EXPECT_NE(pair.fused->gemm_description(x).find(std::string(precision_name(precision)) +
                                                     ", tensor cores, weights resident"),
                std::string::npos)
          << pair.fused->gemm_description(x);
      const double bound = precision == Precision::kBf16x3 ? 2e-5 : 2e-2;
      const torch::Tensor fused = pair.fused->forward(x);
      EXPECT_TRUE(torch::equal(pair.fused->forward(x), fused));
      EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), bound);
      EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), bound);
      x[0][0] = std::numeric_limits<float>::infinity();
      x[1][3] = -std::numeric_limits<float>::infinity();
      x[2][5] = std::numeric_limits<float>::quiet_NaN();
      const torch::Tensor with_inf = pair.fused->forward(x);
      const torch::Tensor per_layer = pair.per_layer->forward(x);
      EXPECT_TRUE(torch::equal(torch::isnan(with_inf), torch::isnan(per_layer)));
      EXPECT_TRUE(torch::equal(torch::isinf(with_inf), torch::isinf(per_layer)));
      const float inf = std::numeric_limits<float>::infinity();
      EXPECT_TRUE(torch::equal(with_inf.eq(inf), per_layer.eq(inf)));
    }
  }
}

#ifdef FUSEDLINEAR_WITH_JIT
// The kernel compiled with the model's chains in (kernels/cuda/jit/, the default) gives the bits of
// the library's instance, which interprets them (FUSEDLINEAR_JIT=0), in each form and mode: two
// models of the same chains, weights and input under other names, so that each is laid out, its
// kernels chosen, under its own setting; every compile succeeds. No chain here has an op ending in
// a multiply before one beginning with an add, which nvcc may join into one FMA where compiled.
TEST(FusedMlpCuda, ChainsCompiledInGiveTheInterpretersBits) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  struct Case {
    std::string chains;  // the layers' chains, a "%" where a layer's name goes
    std::vector<int64_t> widths;
    torch::ScalarType dtype;
    Precision precision;
    std::vector<int64_t> rows;  // the cluster form, then a block a tile or the tensor-core forms
  };
  const std::vector<Case> cases = {
      {"%1:gelu|%2:add(shift),silu|%3",
       {64, 256, 256, 8},
       torch::kFloat32,
       Precision::kIeee,
       {1, 9, 300}},
      {"%1:relu|%2:relu|%3:relu|%4",
       {32, 64, 64, 64, 16},
       torch::kFloat16,
       Precision::kIeee,
       {3, 5000}},
      {"%1:relu|%2:tanh|%3:relu|%4",
       {32, 128, 128, 128, 16},
       torch::kBFloat16,
       Precision::kIeee,
       {5000}},
      {"%1:mish|%2:softplus|%3", {32, 256, 200, 16}, torch::kFloat16, Precision::kIeee, {3000}},
      {"%1:silu*%9|%2:gelu|%3", {32, 64, 48, 16}, torch::kFloat32, Precision::kBf16x3, {5000}},
      {"%1:relu|%2:hardswish|%3", {32, 256, 256, 16}, torch::kFloat32, Precision::kBf16x3, {3000}}};
  const auto named = [](std::string chains, const std::string& prefix) {
    for (size_t at = chains.find('%'); at != std::string::npos; at = chains.find('%', at)) {
      chains.replace(at, 1, prefix);
    }
    return chains;
  };
  const cuda::jit::CompileCounts before = cuda::jit::compile_counts();
  uint64_t seed = 300;
  for (const Case& one : cases) {
    ++seed;
    std::shared_ptr<LayeredModelImpl> models[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      const std::string spec = named(one.chains, compiled ? "c" : "i");
      models[compiled] = model_pair(spec, one.widths, one.dtype, seed).fused;
      models[compiled]->set_precision(one.precision);
    }
    const auto theirs = models[0]->parameters(), ours = models[1]->parameters();
    ASSERT_EQ(theirs.size(), ours.size());
    for (size_t i = 0; i < ours.size(); ++i) ours[i].copy_(theirs[i]);
    for (const int64_t rows : one.rows) {
      const torch::Tensor x =
          torch::randn({rows, one.widths[0]}, at::detail::createCPUGenerator(seed))
              .to(torch::kCUDA, one.dtype);
      SCOPED_TRACE(one.chains + " " + c10::toString(one.dtype) + " " +
                   precision_name(one.precision) + " rows " + std::to_string(rows) + ": " +
                   models[1]->gemm_description(x));
      ASSERT_EQ(models[1]->mlp_refusal(x), "");
      setenv("FUSEDLINEAR_JIT", "0", 1);
      const torch::Tensor interpreted = models[0]->forward(x);
      setenv("FUSEDLINEAR_JIT", "1", 1);
      const torch::Tensor compiled = models[1]->forward(x);
      EXPECT_TRUE(torch::equal(compiled, interpreted))
          << "max abs diff "
          << (compiled.to(torch::kFloat64) - interpreted.to(torch::kFloat64))
                 .abs()
                 .max()
                 .item<double>();
    }
  }
  const cuda::jit::CompileCounts after = cuda::jit::compile_counts();
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_GT(after.compiled + after.read_from_disk, before.compiled + before.read_from_disk);
}

// The resident form compiles a model's widths into its kernel, not only its chains: one spec at two
// shapes, run in turns, gives each shape its own kernel, with the bits of the library's instance
// (which reads the widths from the call) and within float16's bound of float64.
TEST(FusedMlpCuda, OneSpecAtTwoShapesTakesAKernelCompiledForEach) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const std::string spec = "shape1:relu|shape2:tanh|shape3";
  const std::vector<std::vector<int64_t>> shapes = {{32, 64, 48, 16}, {32, 48, 64, 8}};
  std::vector<ModelPair> pairs;
  for (const auto& widths : shapes) pairs.push_back(model_pair(spec, widths, torch::kFloat16, 501));
  const torch::Tensor x =
      torch::randn({4000, 32}, at::detail::createCPUGenerator(502)).to(torch::kCUDA, torch::kHalf);
  for (const size_t i : {0, 1, 0}) {
    SCOPED_TRACE("widths " + std::to_string(shapes[i][1]) + ", " + std::to_string(shapes[i][2]));
    const ModelPair& pair = pairs[i];
    ASSERT_NE(pair.fused->gemm_description(x).find("resident"), std::string::npos)
        << pair.fused->gemm_description(x);
    setenv("FUSEDLINEAR_JIT", "0", 1);
    const torch::Tensor interpreted = pair.fused->forward(x);
    setenv("FUSEDLINEAR_JIT", "1", 1);
    const torch::Tensor compiled = pair.fused->forward(x);
    ASSERT_EQ(compiled.size(1), shapes[i].back());
    EXPECT_TRUE(torch::equal(compiled, interpreted));
    EXPECT_LE(scaled_difference(compiled, pair.fused->reference(x)), tolerance_of(torch::kFloat16));
  }
}

// Whether compiling is on is read at each launch, not when the model's layout is made: after
// FUSEDLINEAR_JIT=0 a model laid out with compiling on compiles nothing more, and runs.
TEST(FusedMlpCuda, CompilingTurnedOffLaterCompilesNothing) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const ModelPair pair =
      model_pair("off1:relu|off2:relu|off3", {32, 64, 64, 8}, torch::kFloat32, 404);
  const auto x_of = [](int64_t rows) {
    return torch::randn({rows, 32}, at::detail::createCPUGenerator(405)).to(torch::kCUDA);
  };
  setenv("FUSEDLINEAR_JIT", "1", 1);
  pair.fused->forward(x_of(1));  // the layout made, the cluster form's kernel compiled
  setenv("FUSEDLINEAR_JIT", "0", 1);
  const torch::Tensor x = x_of(3000);  // a block a tile: a form not compiled yet
  const cuda::jit::CompileCounts before = cuda::jit::compile_counts();
  const torch::Tensor fused = pair.fused->forward(x);
  const cuda::jit::CompileCounts after = cuda::jit::compile_counts();
  setenv("FUSEDLINEAR_JIT", "1", 1);
  EXPECT_EQ(after.compiled + after.read_from_disk + after.failed,
            before.compiled + before.read_from_disk + before.failed);
  EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), tolerance_of(torch::kFloat32));
}
#endif

// Models on the tensor cores too wide, or with too many weights, for the resident form: the
// streamed form, 16-bit models and float32 models in bf16 and bf16x3, with gated, chunked and
// residual layers, uneven widths (k not a multiple of 8: W copied element by element) and a tail
// tile, against float64 and the per-layer path in the same mode, repeatable to the bit; eager's
// inf and NaN where x holds them.
TEST(FusedMlpCuda, StreamedFormMatchesFloat64) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  struct Case {
    std::string spec;
    std::vector<int64_t> widths;
  };
  const std::vector<Case> cases = {
      {"fc1:relu|fc2:relu|fc3:relu|fc4:relu|fc5", {32, 256, 256, 256, 256, 16}},
      {"x+(w13[0]:silu*w13[1]|fc1:add(shift),tanh*g1|fc2:gelu|fc3)", {200, 136, 256, 96, 200}},
      {"fc1:gelu|fc2:softplus|fc3", {3, 181, 250, 5}},
      {"w1:silu*w3|w2", {96, 256, 96}}};
  struct Mode {
    torch::ScalarType dtype;
    Precision precision;
    double bound;
  };
  const std::vector<Mode> modes = {
      {torch::kFloat16, Precision::kIeee, tolerance_of(torch::kFloat16)},
      {torch::kBFloat16, Precision::kIeee, tolerance_of(torch::kBFloat16)},
      {torch::kFloat32, Precision::kBf16x3, 2e-5},
      {torch::kFloat32, Precision::kBf16, 2e-2}};
  uint64_t seed = 130;
  for (const Mode& mode : modes) {
    for (const Case& one : cases) {
      const ModelPair pair = model_pair(one.spec, one.widths, mode.dtype, ++seed);
      pair.fused->set_precision(mode.precision);
      pair.per_layer->set_precision(mode.precision);
      for (const int64_t batch : {int64_t(1000), int64_t(1 << 15) + 3}) {
        SCOPED_TRACE(one.spec + " " + c10::toString(mode.dtype) + " " +
                     precision_name(mode.precision) + " batch " + std::to_string(batch));
        torch::Tensor x = torch::randn({batch, one.widths[0]}, at::detail::createCPUGenerator(seed))
                              .to(torch::kCUDA, mode.dtype);
        ASSERT_EQ(pair.fused->mlp_refusal(x), "");
        EXPECT_NE(pair.fused->gemm_description(x).find("streamed"), std::string::npos)
            << pair.fused->gemm_description(x);
        const torch::Tensor fused = pair.fused->forward(x);
        EXPECT_TRUE(torch::equal(pair.fused->forward(x), fused));
        EXPECT_LE(scaled_difference(fused, pair.fused->reference(x)), mode.bound);
        EXPECT_LE(scaled_difference(fused, pair.per_layer->forward(x)), mode.bound);
        if (mode.dtype != torch::kFloat32 || batch != 1000) continue;
        x[0][0] = std::numeric_limits<float>::infinity();
        x[1][2] = -std::numeric_limits<float>::infinity();
        x[2][1] = std::numeric_limits<float>::quiet_NaN();
        const torch::Tensor with_inf = pair.fused->forward(x);
        const torch::Tensor per_layer = pair.per_layer->forward(x);
        EXPECT_TRUE(torch::equal(torch::isnan(with_inf), torch::isnan(per_layer)));
        const float inf = std::numeric_limits<float>::infinity();
        EXPECT_TRUE(torch::equal(with_inf.eq(inf), per_layer.eq(inf)));
        EXPECT_TRUE(torch::equal(with_inf.eq(-inf), per_layer.eq(-inf)));
      }
    }
  }
}

// A model the kernel does not take runs layer by layer, as auto, and says why.
TEST(FusedMlpCuda, AModelThatDoesNotFitRunsAsAuto) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  const ModelPair pair =
      model_pair("fc1:gelu|fc2", {64, 512, 8}, torch::kFloat32, 95, GemmKernel::kAuto);
  const torch::Tensor x = torch::randn({4, 64}).to(torch::kCUDA);
  EXPECT_EQ(pair.fused->mlp_refusal(x), "layer 1's output is 512 wide; it takes 1 to 256");
  EXPECT_TRUE(torch::equal(pair.fused->forward(x), pair.per_layer->forward(x)));
  EXPECT_EQ(pair.fused->gemm_description(x).find("fused MLP"), std::string::npos);
}

}  // namespace
}  // namespace fusedlinear
