// plan_gemm (gemm_plan.h): what a fused forward's GEMM runs, from the mode, the kernel asked for,
// the rows, the model's dtype and the device; the thresholds in one table per architecture.
#include "kernels/ops/gemm_plan.h"

#include <algorithm>
#include <tuple>

#include "kernels/cpu/small_batch.h"

namespace fusedlinear {

const SkinnyThresholds* skinny_thresholds(const GemmDevice& device) {
  // Each row count is where the kernel measured faster than cuBLAS at 8192 -> 8192 on an H200,
  // both forced (docs/RESULTS.md: small batches; bench at 128-1024 rows). The small-batch kernels
  // read W once, so they lead at few rows and fall behind once each further tile of x's rows
  // reads W again; cuBLAS's tf32 kernel leads from 2 rows. 16-bit models' rows are where the
  // kernels measured faster launched at every width measured: there cuBLAS's 16-bit GEMM takes
  // more host time a call than the GPU's work (docs/RESULTS.md: bfloat16 at few rows). At few rows
  // bf16x3 runs ieee's kernel, faster there and more accurate; bf16x6, whose six products read W's
  // three bfloat16 parts (1.5x float32's bytes), at every row where ieee's kernel runs
  // (docs/RESULTS.md: bf16x6 at 8-128 rows). The Hopper GEMM's promoted bf16x3 and bf16x6 take over
  // from the row after the small-batch kernel that runs the mode (bf16x3's own, ieee's for bf16x6):
  // past it they led cuBLAS's products with the epilogue at nearly every batch and width measured,
  // and were closer to float64, where cuBLAS's products lose the modes' float32-grade accuracy
  // (docs/RESULTS.md: bf16x6 at 33-127 rows, bf16x3 at 65-127 rows).
  static const SkinnyThresholds kMeasured[] = {
      {9, /*ieee*/ 32, /*bf16x3*/ 64, /*tf32*/ 1, /*bf16*/ 8, /*half_models*/ 8,
       /*bf16x3_as_ieee*/ 8, /*bf16x6_as_ieee*/ 32, /*bf16x3_hopper_min*/ 65,
       /*bf16x6_hopper_min*/ 33},
  };
  if (!device.gpu) return nullptr;
  for (const SkinnyThresholds& t : kMeasured) {
    if (t.compute_major == device.compute_major) return &t;
  }
  return nullptr;
}

int64_t skinny_max_rows(const GemmQuery& query, Precision precision) {
  if (query.skinny_max_rows >= 0) return query.skinny_max_rows;
  const SkinnyThresholds* t = skinny_thresholds(query.device);
  if (!t) return 0;
  if (!query.float32_model) return t->half_models;
  switch (precision) {
    case Precision::kIeee:
      return t->ieee;
    case Precision::kBf16x3:
      return t->bf16x3;
    case Precision::kBf16x6:
      return 0;  // no small-batch kernel forms its products
    case Precision::kTf32:
      return t->tf32;
    case Precision::kBf16:
      return t->bf16;
  }
  return 0;
}

std::string hopper_refusal(const GemmQuery& query) {
  if (!query.device.gpu) return "it runs on a GPU only";
  if (query.device.compute_major != 9 || query.device.compute_minor != 0) {
    return "it runs on compute capability 9.0 only, not " +
           std::to_string(query.device.compute_major) + "." +
           std::to_string(query.device.compute_minor);
  }
  if (query.float32_model &&
      (query.precision == Precision::kIeee || query.precision == Precision::kTf32)) {
    return std::string("it forms bfloat16 products, not ") + precision_name(query.precision) +
           "'s (float32 models: bf16, bf16x3 or bf16x6)";
  }
  if (query.in_features % 8 != 0) {
    return "in_features (" + std::to_string(query.in_features) + ") is not a multiple of 8";
  }
  if (!query.float32_model && !query.weight_output_major) {
    return "W lies input-major, and it reads W output-major";
  }
  return "";
}

std::string mlp_refusal(const MlpQuery& query) {
  if (!query.device.gpu) return "it runs on a GPU only";
  if (!query.float32_model && query.device.compute_major < 8) {
    return "its 16-bit products take tensor cores of compute capability 8.0 or newer, not " +
           std::to_string(query.device.compute_major) + "." +
           std::to_string(query.device.compute_minor);
  }
  const int64_t layers = int64_t(query.widths.size()) - 1;
  if (layers < 2) return "it runs layered models whole; a Linear on its own runs as auto plans it";
  if (layers > cuda::kMaxMlpLayers) {
    return "the model has " + std::to_string(layers) + " layers; it takes at most " +
           std::to_string(cuda::kMaxMlpLayers);
  }
  for (size_t i = 0; i < query.widths.size(); ++i) {
    const int64_t width = query.widths[i];
    if (width >= 1 && width <= cuda::kMaxMlpWidth) continue;
    const std::string what = i == 0 ? "the input" : "layer " + std::to_string(i) + "'s output";
    return what + " is " + std::to_string(width) + " wide; it takes 1 to " +
           std::to_string(cuda::kMaxMlpWidth);
  }
  for (size_t i = 0; i < query.compiled_chains.size(); ++i) {
    if (query.compiled_chains[i]) {
      return "layer " + std::to_string(i + 1) +
             "'s chain is a declaration's compiled chain; it runs run-time chains (the "
             "interpreter)";
    }
  }
  // bf16 and bf16x3: the resident form's products, or float32's (ieee) in the cluster form.
  const bool split_taken = query.float32_model && (query.precision == Precision::kBf16 ||
                                                   query.precision == Precision::kBf16x3);
  if (query.precision != Precision::kIeee &&
      !(split_taken && mlp_form(query) != cuda::MlpForm::kTiles)) {
    return std::string(
               "it forms float32 products of float32 models (ieee), and bf16 and bf16x3 "
               "products on the tensor cores (compute capability 8.0 or newer) where a block's "
               "shared memory holds the model's chunks of W; not ") +
           precision_name(query.precision) + "'s here";
  }
  return "";
}

cuda::MlpForm mlp_form(const MlpQuery& query) {
  const int64_t tiles = (query.rows + cuda::kMlpClusterTileRows - 1) / cuda::kMlpClusterTileRows;
  if (query.device.gpu && query.device.compute_major >= 9 && query.rows >= 1 &&
      tiles * cuda::kMlpClusterBlocks <= query.device.multiprocessors) {
    return cuda::MlpForm::kClusters;
  }
  // The tensor cores' products: a 16-bit model's own, or a float32 model's bf16 and bf16x3.
  const bool tensor_cores = !query.float32_model || query.precision == Precision::kBf16 ||
                            query.precision == Precision::kBf16x3;
  const int parts = cuda::mlp_resident_parts(query.precision);
  int64_t widest = 0, widest_in = 0, resident_bytes = 0;
  bool any_gated = false;
  for (size_t l = 0; l + 1 < query.widths.size(); ++l) {
    widest = std::max({widest, query.widths[l], query.widths[l + 1]});
    widest_in = std::max(widest_in, query.widths[l]);
    const bool gated = l < query.gated.size() && query.gated[l];
    any_gated = any_gated || gated;
    resident_bytes +=
        cuda::mlp_resident_layer_bytes(query.widths[l], query.widths[l + 1], gated, parts);
  }
  if (!tensor_cores || query.device.compute_major < 8) return cuda::MlpForm::kTiles;
  const int64_t shared = query.device.shared_bytes_per_block;
  if (widest <= cuda::mlp_resident_max_width(parts) && resident_bytes <= shared) {
    return cuda::MlpForm::kResident;
  }
  if (cuda::mlp_streamed_bytes(widest_in, widest, any_gated, parts) <= shared) {
    return cuda::MlpForm::kStreamed;
  }
  return cuda::MlpForm::kTiles;
}

std::string mlp_description(const MlpQuery& query) {
  const std::string mode = precision_name(query.precision);
  switch (mlp_form(query)) {
    case cuda::MlpForm::kClusters:
      return std::string("fused MLP, ") +
             (!query.float32_model ? "float32 FMAs"
              : query.precision == Precision::kIeee
                  ? "ieee, float32 FMAs"
                  : "ieee, float32 FMAs (" + mode + " runs ieee's kernel at few rows)") +
             ", clusters of " + std::to_string(cuda::kMlpClusterBlocks) + " blocks a tile";
    case cuda::MlpForm::kResident:
      return "fused MLP, " + (query.float32_model ? mode + ", " : std::string()) +
             "tensor cores, weights resident in shared memory";
    case cuda::MlpForm::kStreamed:
      return "fused MLP, " + (query.float32_model ? mode + ", " : std::string()) +
             "tensor cores, weights streamed through shared memory";
    case cuda::MlpForm::kTiles:
      break;
  }
  return std::string("fused MLP, ") + (query.float32_model ? "ieee, float32 FMAs" : "tensor cores");
}

MlpChoice choose_mlp(const MlpQuery& query, GemmKernel kernel) {
  if (kernel != GemmKernel::kMlp && kernel != GemmKernel::kAuto) return {false, "not asked for"};
  const std::string refusal = mlp_refusal(query);
  if (kernel == GemmKernel::kMlp) return {refusal.empty(), refusal.empty() ? "asked for" : refusal};
  if (!refusal.empty()) return {false, "auto: the fused MLP kernel cannot take it: " + refusal};
  const cuda::MlpForm form = mlp_form(query);
  const int64_t widest = *std::max_element(query.widths.begin(), query.widths.end());
  if (form == cuda::MlpForm::kClusters) {
    return {true,
            "auto: at few rows one launch of the fused MLP measured faster than a launch a "
            "layer"};
  }
  const bool tensor_cores = form == cuda::MlpForm::kResident || form == cuda::MlpForm::kStreamed;
  if (tensor_cores && query.float32_model && query.precision == Precision::kBf16x3) {
    return {true,
            "auto: bf16x3 in the fused MLP (x and the activations split on chip) measured "
            "faster than layer by layer"};
  }
  if (form == cuda::MlpForm::kResident && !query.float32_model && widest <= 64) {
    return {true,
            "auto: a 16-bit model at most 64 wide, its weights resident in shared memory, "
            "measured faster than layer by layer"};
  }
  const char* what = form == cuda::MlpForm::kResident   ? "resident form"
                     : form == cuda::MlpForm::kStreamed ? "streamed form"
                                                        : "block a tile";
  return {false,
          std::string("auto: layer by layer; the fused MLP's ") + what +
              " is not among the forms and modes that measured faster for auto (docs/USAGE.md, "
              "\"Small MLPs in one kernel\")"};
}

namespace {

// Every field of the queries and of GemmDevice: a field left out would hand one query another's
// answer.
auto device_fields(const GemmDevice& d) {
  return std::tie(d.gpu, d.compute_major, d.compute_minor, d.multiprocessors,
                  d.shared_bytes_per_block, d.cpu_small_batch);
}

}  // namespace

bool same_query(const GemmQuery& a, const GemmQuery& b) {
  const auto fields = [](const GemmQuery& q) {
    return std::tie(q.precision, q.kernel, q.rows, q.in_features, q.float32_model,
                    q.weight_output_major, q.skinny_max_rows, q.bf16x3_min_rows, q.chain_kernels);
  };
  return fields(a) == fields(b) && device_fields(a.device) == device_fields(b.device);
}

bool same_query(const MlpQuery& a, const MlpQuery& b) {
  const auto fields = [](const MlpQuery& q) {
    return std::tie(q.precision, q.float32_model, q.widths, q.compiled_chains, q.gated, q.rows);
  };
  return fields(a) == fields(b) && device_fields(a.device) == device_fields(b.device);
}

GemmPlan plan_gemm(const GemmQuery& query) {
  if (query.kernel == GemmKernel::kMlp) {
    // A Linear the fused-MLP kernel does not run (a model it refused, or one Linear): auto's plan.
    GemmQuery as_auto = query;
    as_auto.kernel = GemmKernel::kAuto;
    GemmPlan plan = plan_gemm(as_auto);
    plan.reason =
        "the fused MLP kernel was asked for, a Linear runs as auto plans it; " + plan.reason;
    return plan;
  }
  const std::string gemm = query.device.gpu ? "cuBLAS" : "CPU GEMM";
  const std::string mode = precision_name(query.precision);
  GemmPlan plan;
  // `from_rows`: where the products differ from the mode's, the rows from which the mode's own run.
  // `run`: cuBLAS (or the CPU's GEMM), the small-batch kernels or the Hopper GEMM.
  const auto finish_on = [&](GemmKernel run, Precision products, const std::string& reason,
                             int64_t from_rows) {
    plan.products = products;
    plan.skinny = run == GemmKernel::kSkinny;
    plan.hopper = run == GemmKernel::kHopper;
    plan.reason = reason;
    plan.description = std::string(precision_name(products)) + ", " +
                       (plan.skinny   ? "skinny"
                        : plan.hopper ? "Hopper GEMM"
                                      : gemm);
    if (products != query.precision) {
      plan.description += " (" + mode +
                          (from_rows > 0 ? " from " + std::to_string(from_rows) + " rows)"
                                         : " runs ieee's kernel)");
    }
    if (query.device.gpu && query.chain_kernels != ChainKernelKind::kDeclaration) {
      const bool compiled = query.chain_kernels == ChainKernelKind::kCompiledAtRunTime;
      plan.description += compiled ? ", chain compiled at run time" : ", chain by the interpreter";
    }
    return plan;
  };
  const auto finish = [&](Precision products, bool skinny, const std::string& reason,
                          int64_t from_rows) {
    return finish_on(skinny ? GemmKernel::kSkinny : GemmKernel::kCublas, products, reason,
                     from_rows);
  };
  // The small-batch kernels form tf32's products as float32's: more accurate, and no slower there.
  const auto skinny_products = [&](Precision p) {
    return p == Precision::kTf32 ? Precision::kIeee : p;
  };
  // cuBLAS (or the CPU's GEMM): bf16x3 and bf16x6 run ieee below bf16x3_min_rows.
  const bool split_as_ieee =
      sums_split_products(query.precision) && query.rows < query.bf16x3_min_rows;
  const auto library = [&](const std::string& reason) {
    const int products = query.precision == Precision::kBf16x6 ? 6 : 3;
    return finish(split_as_ieee ? Precision::kIeee : query.precision, false,
                  split_as_ieee ? reason + "; " + mode + "'s " + std::to_string(products) +
                                      " products are slower than one float32 GEMM below " +
                                      std::to_string(query.bf16x3_min_rows) + " rows"
                                : reason,
                  query.bf16x3_min_rows);
  };
  const bool has_skinny_kernel = query.precision != Precision::kBf16x6;
  if (query.kernel == GemmKernel::kCublas) return library("asked for");
  if (query.kernel == GemmKernel::kSkinny) {
    if (!has_skinny_kernel) {
      return library("the small-batch kernels were asked for, but they have no " + mode +
                     " products");
    }
    // On a CPU the op runs its CPU twin (ops.cpp, whole_forward_cpu), which the reason names.
    return finish(skinny_products(query.precision), true,
                  query.device.gpu ? "asked for"
                                   : "asked for; on a CPU their twin: the CPU's small-batch "
                                     "products (W read once, at up to " +
                                         std::to_string(cpu::kSmallBatchMaxRows) +
                                         " rows, with AVX2 or AVX-512) or else its GEMM, then "
                                         "the chain in one fused op",
                  0);
  }
  if (query.kernel == GemmKernel::kHopper) {
    const std::string refused = hopper_refusal(query);
    if (!refused.empty()) return library("the Hopper GEMM was asked for, but " + refused);
    return finish_on(GemmKernel::kHopper, query.precision, "asked for", 0);
  }
  if (!query.device.gpu) {
    const int64_t max_rows =
        query.skinny_max_rows >= 0 ? query.skinny_max_rows : cpu::kSmallBatchMaxRows;
    if (query.device.cpu_small_batch && query.precision == Precision::kIeee &&
        query.weight_output_major && query.rows <= max_rows) {
      return finish(Precision::kIeee, true,
                    "auto: at up to " + std::to_string(max_rows) +
                        " rows the CPU's small-batch products, which read W once, measured faster "
                        "than its GEMM; then the chain in one fused op",
                    0);
    }
    return library("auto: the CPU's GEMM, then the chain in one fused op");
  }
  const SkinnyThresholds* table = skinny_thresholds(query.device);
  if (!table && query.skinny_max_rows < 0) {
    return library("no small-batch thresholds measured for sm_" +
                   std::to_string(query.device.compute_major * 10 + query.device.compute_minor));
  }
  const auto reads_weight = [](Precision p) {
    return p == Precision::kIeee || p == Precision::kTf32;
  };
  const int64_t ieee_max = skinny_max_rows(query, Precision::kIeee);
  if (sums_split_products(query.precision) && query.weight_output_major) {
    const bool six = query.precision == Precision::kBf16x6;
    const int64_t as_ieee = std::min(
        table ? (six ? table->bf16x6_as_ieee : table->bf16x3_as_ieee) : ieee_max, ieee_max);
    if (query.rows <= as_ieee) {
      return finish(Precision::kIeee, true,
                    "at up to " + std::to_string(as_ieee) +
                        " rows ieee's small-batch kernel is faster than " + mode +
                        "'s products and at least as accurate",
                    as_ieee + 1);
    }
  }
  const int64_t max_rows = has_skinny_kernel ? skinny_max_rows(query, query.precision) : 0;
  // The Hopper GEMM's promoted sums, at the rows where they measured faster (table).
  if (table && query.skinny_max_rows < 0 && query.float32_model &&
      sums_split_products(query.precision) && query.rows > max_rows) {
    const bool six = query.precision == Precision::kBf16x6;
    const int64_t from = six ? table->bf16x6_hopper_min : table->bf16x3_hopper_min;
    const std::string rows = "from " + std::to_string(from) + " rows";
    if (from > 0 && query.rows >= from && hopper_refusal(query).empty()) {
      if (query.chain_kernels == ChainKernelKind::kInterpreter) {
        return library("auto: a run-time chain: " + rows + " the Hopper GEMM takes " + mode +
                       ", but the chain's interpreter in its epilogue measured slower than cuBLAS "
                       "and the chain's own kernel (compiling is off, FUSEDLINEAR_JIT=0, or "
                       "NVRTC is missing)");
      }
      return finish_on(GemmKernel::kHopper, query.precision,
                       "auto: " + rows + " the Hopper GEMM's " + mode +
                           " measured faster than cuBLAS's, and closer to float64" +
                           (query.chain_kernels == ChainKernelKind::kCompiledAtRunTime
                                ? "; the run-time chain compiled as a declaration of it"
                                : ""),
                       0);
    }
  }
  if (!has_skinny_kernel) {
    return library("auto: the small-batch kernels have no " + mode + " products");
  }
  if (query.rows > max_rows) {
    return library("auto: above the " + std::to_string(max_rows) + " rows up to which the " + mode +
                   " small-batch kernel measured faster");
  }
  if (reads_weight(query.precision) && !query.weight_output_major) {
    return library("auto: W lies input-major, and the small-batch kernels read it output-major");
  }
  return finish(skinny_products(query.precision), true,
                "auto: up to " + std::to_string(max_rows) + " rows the " + mode +
                    " small-batch kernel measured faster than cuBLAS",
                max_rows + 1);
}

}  // namespace fusedlinear
