// hopper_gemm_check: the Hopper GEMM (kernels/cuda/gemm/hopper_gemm.cuh) on its own, without
// libtorch. First the checks, every mode against a float64 host reference on random inputs, each
// output judged against a bound in sum_k |x||w| (the products' error) plus the chain's and the
// output type's rounding: every tile shape on tails of m and n, k = 8, k not a multiple of the
// k-tile, odd n (element stores); bf16x3's error beside a float32 GEMM's (cublasSgemm, TF32 off)
// and cuBLAS's three bf16 GEMMs' (the promoted bf16x3's within 1.5x float32's), bf16x6's on
// wide-range inputs (within 2x float32's) and on the timed problem; misaligned pointers
// and k not a multiple of 8 refused with nothing written; two runs bitwise the same; a CUDA graph
// captured on a side stream and replayed. Exits non-zero on any failure. Then the timings at
// 128-1024 rows x 8192 -> 8192: the median of 50 runs of each (cudaEvents), the kernel in every
// mode beside cuBLAS's bf16 GEMM alone and cuBLAS's bf16x3 as three GEMMs summed.
//
// clang-format off
//   cmake --build build-gpu --target hopper_gemm_check
//     (this file, linked with hopper_gemm_check_launch.cu compiled once a mode,
//      -DHOPPER_GEMM_CHECK_MODE=kBf16ToF32 ... kBf16x6Promoted; with -lcublas)
//   hopper_gemm_check [check | bench | all]      (default all)
// clang-format on
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "app/tools/hopper_gemm_check.h"
#include "kernels/math/bf16_split.h"

using namespace fusedlinear;
using namespace fusedlinear::gemm_check;

#define CHECK_CUBLAS(call)                                                               \
  do {                                                                                   \
    const cublasStatus_t status_ = (call);                                               \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                              \
      std::fprintf(stderr, "hopper_gemm_check: %s: cuBLAS status %d\n", #call, status_); \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

namespace {

int g_failures = 0;

void verdict(bool ok, const char* format, ...) {
  std::printf("%s ", ok ? "PASS" : "FAIL");
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::printf("\n");
  if (!ok) ++g_failures;
}

// --- inputs
// ---------------------------------------------------------------------------------------

// splitmix64: the same inputs on every run.
struct Random {
  uint64_t state;
  float uniform() {  // in [-1, 1)
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return float(int64_t(z >> 40) - (int64_t(1) << 23)) * 0x1p-23f;
  }
};

// A problem's float32 values: x [m][k], W [n][k], the bias and swish_chain's add_value [n].
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> x, w, bias, add_value;
};

Problem make_problem(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  Random random{seed};
  p.x.resize(size_t(m * k));
  p.w.resize(size_t(n * k));
  for (float& v : p.x) v = random.uniform();
  for (float& v : p.w) v = random.uniform();
  p.bias.resize(size_t(n));
  p.add_value.resize(size_t(n));
  for (float& v : p.bias) v = 0.5f * random.uniform();
  for (float& v : p.add_value) v = random.uniform();
  return p;
}

template <typename T>
T to_type(float v) {
  return cuda::from_float<T>(v);
}
template <typename T>
float value_of(T v) {
  return cuda::to_float(v);
}

// The bfloat16 parts of every value, as the library's split kernels give them (bf16_split.h).
template <int kParts>
void split_into(const std::vector<float>& v, std::vector<__nv_bfloat16> (&parts)[kParts]) {
  for (auto& part : parts) part.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const split::Bf16Triple split = split::split_into_parts(v[i], kParts);
    const uint16_t bits[3] = {split.hi, split.mid, split.lo};
    for (int p = 0; p < kParts; ++p) {
      __nv_bfloat16_raw raw;
      raw.x = bits[p];
      parts[p][i] = raw;
    }
  }
}

template <Mode kMode>
Operands<kMode> make_operands(const Problem& p) {
  using O = Operands<kMode>;
  using In = typename O::In;
  using Out = typename O::Out;
  constexpr int kParts = ModeTraits<kMode>::kParts;
  O op;
  op.m = p.m;
  op.n = p.n;
  op.k = p.k;
  for (int i = 0; i < kParts; ++i) {
    op.x[i] = DeviceBuffer<In>(p.x.size());
    op.w[i] = DeviceBuffer<In>(p.w.size());
  }
  if constexpr (kParts > 1) {
    const auto values = [](const std::vector<In>& typed) {
      std::vector<float> v(typed.size());
      for (size_t i = 0; i < typed.size(); ++i) v[i] = value_of(typed[i]);
      return v;
    };
    std::vector<In> parts[kParts];
    split_into(p.x, parts);
    for (int i = 0; i < kParts; ++i) {
      op.x[i].upload(parts[i]);
      op.ref_x[i] = values(parts[i]);
    }
    split_into(p.w, parts);
    for (int i = 0; i < kParts; ++i) {
      op.w[i].upload(parts[i]);
      op.ref_w[i] = values(parts[i]);
    }
    op.x32 = p.x;
    op.w32 = p.w;
  } else {
    const auto round = [](const std::vector<float>& v, std::vector<float>& as_float) {
      std::vector<In> typed(v.size());
      as_float.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        typed[i] = to_type<In>(v[i]);
        as_float[i] = value_of(typed[i]);
      }
      return typed;
    };
    op.x[0].upload(round(p.x, op.ref_x[0]));
    op.w[0].upload(round(p.w, op.ref_w[0]));
  }
  const auto column = [&](const std::vector<float>& v, DeviceBuffer<Out>& buffer,
                          std::vector<float>& as_float) {
    std::vector<Out> typed(v.size());
    as_float.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      typed[i] = to_type<Out>(v[i]);
      as_float[i] = value_of(typed[i]);
    }
    buffer = DeviceBuffer<Out>(v.size());
    buffer.upload(typed);
  };
  column(p.bias, op.bias, op.ref_bias);
  column(p.add_value, op.add_value, op.ref_add_value);
  return op;
}

// --- the float64 reference --------------------------------------------------------------------

// The sums of products in float64 and the sums of their magnitudes, for rows `rows` and every
// column: sum_k x[r][k] w[c][k], or for x and W given in `parts` parts the products of parts i and
// j with i + j < parts (bf16x3's three, bf16x6's six; each exact in float64).
struct Sums {
  std::vector<int64_t> rows;
  int64_t n = 0;
  std::vector<double> y, magnitude;  // [rows.size()][n]
};

Sums reference_sums(const std::vector<float>* x, const std::vector<float>* w, int parts, int64_t n,
                    int64_t k, const std::vector<int64_t>& rows) {
  Sums s;
  s.rows = rows;
  s.n = n;
  s.y.resize(rows.size() * size_t(n));
  s.magnitude.resize(rows.size() * size_t(n));
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t xr = size_t(rows[i] * k);
    for (int64_t c = 0; c < n; ++c) {
      const size_t wc = size_t(c * k);
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < k; ++j) {
        for (int a = 0; a < parts; ++a) {
          for (int b = 0; a + b < parts; ++b) {
            const double product = double(x[a][xr + size_t(j)]) * double(w[b][wc + size_t(j)]);
            sum += product;
            magnitude += std::fabs(product);
          }
        }
      }
      s.y[i * size_t(n) + size_t(c)] = sum;
      s.magnitude[i * size_t(n) + size_t(c)] = magnitude;
    }
  }
  return s;
}
template <Mode kMode>
Sums reference_sums(const Operands<kMode>& op, const std::vector<int64_t>& rows) {
  return reference_sums(op.ref_x, op.ref_w, ModeTraits<kMode>::kParts, op.n, op.k, rows);
}
// The float64 product of the float32 values the parts were split from.
Sums reference_sums32(const std::vector<float>& x32, const std::vector<float>& w32, int64_t n,
                      int64_t k, const std::vector<int64_t>& rows) {
  return reference_sums(&x32, &w32, 1, n, k, rows);
}

std::vector<int64_t> all_rows(int64_t m) {
  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) rows[size_t(r)] = r;
  return rows;
}

struct Error {
  double max_abs = 0;    // largest |out - reference|
  double max_ratio = 0;  // largest error over its bound
  bool finite = true;
};

// The chain's largest slope on the inputs that occur (mish's is under 1.1, swish_chain's under
// 1.2): how much of its input's error reaches its output.
constexpr double kChainSlope = 1.25;

// out (host copy, [m][n]) against Model's chain of the float64 sums plus the bias, as the kernel
// read them.
template <Mode kMode, class Model, typename Out>
Error compare(const std::vector<Out>& out, const Operands<kMode>& op, const Sums& sums,
              bool with_bias) {
  using Traits = ModeTraits<kMode>;
  const double gamma = Traits::gamma(op.k);
  Error e;
  for (size_t i = 0; i < sums.rows.size(); ++i) {
    const int64_t r = sums.rows[i];
    for (int64_t c = 0; c < op.n; ++c) {
      const size_t at = i * size_t(op.n) + size_t(c);
      const double bias = with_bias ? op.ref_bias[size_t(c)] : 0.0;
      const double input = sums.y[at] + bias;
      const double terms[act::kMaxColumnTerms] = {op.ref_add_value[size_t(c)], 0, 0, 0};
      const double want = act::reference_of(Model::kChain, input, terms);
      const double got = value_of(out[size_t(r * op.n + c)]);
      const double err = std::fabs(got - want);
      const double bound = kChainSlope * (gamma * (sums.magnitude[at] + std::fabs(bias)) +
                                          0x1p-24 * std::fabs(input)) +
                           Traits::kOutputError * std::fabs(want) + 1e-6;
      if (!std::isfinite(got)) e.finite = false;
      e.max_abs = std::max(e.max_abs, err);
      e.max_ratio = std::max(e.max_ratio, err / bound);
    }
  }
  return e;
}

const char* tile_name(GemmTile tile) {
  switch (tile) {
    case GemmTile::kAuto:
      return "auto";
    case GemmTile::k128x256:
      return "128x256";
    case GemmTile::k128x128:
      return "128x128";
    case GemmTile::k128x64:
      return "128x64";
    case GemmTile::k64x256Turns:
      return "64x256 turns";
    case GemmTile::k64x128Turns:
      return "64x128 turns";
    case GemmTile::k256x128:
      return "256x128";
    case GemmTile::k128x128Turns:
      return "128x128 turns";
  }
  return "?";
}
constexpr GemmTile kTiles[] = {
    GemmTile::kAuto,    GemmTile::k128x256,     GemmTile::k128x128,     GemmTile::k128x64,
    GemmTile::k256x128, GemmTile::k64x256Turns, GemmTile::k64x128Turns, GemmTile::k128x128Turns};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// --- the checks -------------------------------------------------------------------------------

// Every tile on one problem in mode kMode with Model's chain: within the bound, and every tile's
// output bitwise the same as the first's (each output's sum takes the same k in the same order
// whatever the tile); a tile whose accumulators do not fit refused with cudaErrorNotSupported.
template <Mode kMode, class Model>
void check_tiles(const Problem& p, const char* what, cudaStream_t stream) {
  using Out = typename ModeTraits<kMode>::Out;
  const Operands<kMode> op = make_operands<kMode>(p);
  const Sums sums = reference_sums(op, all_rows(p.m));
  DeviceBuffer<Out> out(size_t(p.m * p.n));
  std::vector<Out> first;
  for (GemmTile tile : kTiles) {
    CHECK_CUDA(cudaMemsetAsync(out.data, 0xff, size_t(p.m * p.n) * sizeof(Out), stream));
    const cudaError_t err = launch<kMode, Model>(op, pointers_of(op, out.data), tile, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (!cuda::gemm::tile_fits(ModeTraits<kMode>::kProducts, tile)) {
      verdict(err == cudaErrorNotSupported, "%-15s %-10s %-14s %s: refused (%s), does not fit",
              ModeTraits<kMode>::kName, Model::kName, tile_name(tile), what, cudaGetErrorName(err));
      continue;
    }
    if (err != cudaSuccess) {
      verdict(false, "%-15s %-10s %-14s %s: launch %s", ModeTraits<kMode>::kName, Model::kName,
              tile_name(tile), what, cudaGetErrorString(err));
      continue;
    }
    const std::vector<Out> host = out.download(size_t(p.m * p.n));
    const Error e = compare<kMode, Model>(host, op, sums, true);
    if (first.empty()) first = host;
    const bool same = same_bits(host, first);
    verdict(e.finite && e.max_ratio <= 1.0 && same,
            "%-15s %-10s %-14s %s: max error %.3e (%.3f of the bound)%s", ModeTraits<kMode>::kName,
            Model::kName, tile_name(tile), what, e.max_abs, e.max_ratio,
            same ? "" : ", bits differ from the auto tile's");
  }
}

// Refusals: a base pointer off 16-byte alignment (x, W's part, out) and k not a multiple of 8 each
// give cudaErrorNotSupported and leave out untouched.
template <Mode kMode>
void check_refusals(const Problem& p, cudaStream_t stream) {
  using Out = typename ModeTraits<kMode>::Out;
  const Operands<kMode> op = make_operands<kMode>(p);
  DeviceBuffer<Out> out(size_t(p.m * p.n) + 16);
  const size_t bytes = (size_t(p.m * p.n) + 16) * sizeof(Out);
  struct Case {
    const char* what;
    Pointers ptr;
    int64_t k;
  };
  std::vector<Case> cases;
  const Pointers good = pointers_of(op, out.data);
  const auto shifted = [](const void* p, int bytes_on) {
    return static_cast<const void*>(static_cast<const char*>(p) + bytes_on);
  };
  Case c{"x + 1 element", good, -1};
  c.ptr.x[0] = shifted(good.x[0], 2);
  cases.push_back(c);
  constexpr int kLast = ModeTraits<kMode>::kParts - 1;  // W's last part
  c = Case{kLast == 2   ? "w_lo (third part) + 4 elements"
           : kLast == 1 ? "w_lo + 4 elements"
                        : "w + 4 elements",
           good, -1};
  c.ptr.w[kLast] = shifted(good.w[kLast], 8);
  cases.push_back(c);
  c = Case{"out + 1 element", good, -1};
  c.ptr.out = static_cast<Out*>(out.data) + 1;
  cases.push_back(c);
  c = Case{"k - 4 (not a multiple of 8)", good, p.k - 4};
  cases.push_back(c);
  for (const Case& t : cases) {
    CHECK_CUDA(cudaMemsetAsync(out.data, 0x5a, bytes, stream));
    const cudaError_t err =
        launch<kMode, IdentityModel>(op, t.ptr, GemmTile::kAuto, stream, true, t.k);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const std::vector<Out> host = out.download(size_t(p.m * p.n) + 16);
    bool untouched = true;
    const unsigned char* b = reinterpret_cast<const unsigned char*>(host.data());
    for (size_t i = 0; i < bytes; ++i) untouched = untouched && b[i] == 0x5a;
    verdict(err == cudaErrorNotSupported && untouched, "%-15s refuses %s: %s, output %s",
            ModeTraits<kMode>::kName, t.what, cudaGetErrorName(err),
            untouched ? "untouched" : "WRITTEN");
  }
  (void)cudaGetLastError();
}

// Two runs bitwise the same, and a graph of the launch captured on a side stream and replayed
// three times giving the same bits.
template <Mode kMode, class Model>
void check_repeat_and_graph(const Problem& p, GemmTile tile, cudaStream_t stream) {
  using Out = typename ModeTraits<kMode>::Out;
  const Operands<kMode> op = make_operands<kMode>(p);
  const size_t count = size_t(p.m * p.n);
  DeviceBuffer<Out> out(count);
  std::vector<Out> runs[2];
  for (auto& run : runs) {
    CHECK_CUDA(cudaMemsetAsync(out.data, 0xff, count * sizeof(Out), stream));
    CHECK_CUDA((launch<kMode, Model>(op, pointers_of(op, out.data), tile, stream)));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    run = out.download(count);
  }
  verdict(same_bits(runs[0], runs[1]), "%-15s %-12s two runs bitwise the same (%lldx%lldx%lld)",
          ModeTraits<kMode>::kName, tile_name(tile), (long long)p.m, (long long)p.n,
          (long long)p.k);

  cudaStream_t side;
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CHECK_CUDA(cudaMemsetAsync(out.data, 0xff, count * sizeof(Out), side));
  CHECK_CUDA(cudaStreamSynchronize(side));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(side, cudaStreamCaptureModeGlobal));
  const cudaError_t captured = launch<kMode, Model>(op, pointers_of(op, out.data), tile, side);
  CHECK_CUDA(cudaStreamEndCapture(side, &graph));
  bool same = captured == cudaSuccess;
  if (same) {
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3 && same; ++replay) {
      CHECK_CUDA(cudaMemsetAsync(out.data, 0xff, count * sizeof(Out), side));
      CHECK_CUDA(cudaGraphLaunch(exec, side));
      CHECK_CUDA(cudaStreamSynchronize(side));
      same = same_bits(out.download(count), runs[0]);
    }
    CHECK_CUDA(cudaGraphExecDestroy(exec));
  }
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaStreamDestroy(side));
  verdict(same, "%-15s %-12s graph captured on a side stream, 3 replays the same bits (%s)",
          ModeTraits<kMode>::kName, tile_name(tile), cudaGetErrorName(captured));
}

// A gated pair, chain(x A^T + bias) * (x B^T + gate bias), in one kernel: on every tile, bitwise
// the two Linears launched apart, each output rounded to Out, then multiplied (in float32,
// rounded to Out), as the per-layer path forms it.
template <Mode kMode, class Model>
void check_gated(const Problem& a, cudaStream_t stream) {
  using Out = typename ModeTraits<kMode>::Out;
  Problem b = make_problem(a.m, a.n, a.k, 99);
  b.x = a.x;
  const Operands<kMode> a_op = make_operands<kMode>(a), b_op = make_operands<kMode>(b);
  const size_t count = size_t(a.m * a.n);
  DeviceBuffer<Out> chain_out(count), gate_out(count), out(count);
  const cudaError_t chain_launch =
      launch<kMode, Model>(a_op, pointers_of(a_op, chain_out.data), GemmTile::kAuto, stream);
  const cudaError_t gate_launch =
      launch<kMode, IdentityModel>(b_op, pointers_of(b_op, gate_out.data), GemmTile::kAuto, stream);
  CHECK_CUDA(chain_launch);
  CHECK_CUDA(gate_launch);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::vector<Out> chain_values = chain_out.download(count);
  const std::vector<Out> gate_values = gate_out.download(count);
  std::vector<Out> want(count);
  for (size_t i = 0; i < count; ++i) {
    want[i] = to_type<Out>(value_of(chain_values[i]) * value_of(gate_values[i]));
  }
  char what[64];
  std::snprintf(what, sizeof what, "gated %lldx%lldx%lld", static_cast<long long>(a.m),
                static_cast<long long>(a.n), static_cast<long long>(a.k));
  for (GemmTile tile : kTiles) {
    CHECK_CUDA(cudaMemsetAsync(out.data, 0xff, count * sizeof(Out), stream));
    const cudaError_t err =
        launch<kMode, Model>(a_op, pointers_of(a_op, out.data), tile, stream, true, -1, &b_op);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (!cuda::gemm::tile_fits(ModeTraits<kMode>::kProducts, tile)) {
      verdict(err == cudaErrorNotSupported, "%-15s %-10s %-14s %s: refused (%s), does not fit",
              ModeTraits<kMode>::kName, Model::kName, tile_name(tile), what, cudaGetErrorName(err));
      continue;
    }
    const bool same = err == cudaSuccess && same_bits(out.download(count), want);
    verdict(same, "%-15s %-10s %-14s %s: %s", ModeTraits<kMode>::kName, Model::kName,
            tile_name(tile), what,
            err != cudaSuccess ? cudaGetErrorString(err)
            : same             ? "the two Linears' bits"
                               : "bits differ from the two Linears'");
  }
}

template <Mode kMode>
void check_mode(cudaStream_t stream) {
  // Tails of m and n against every tile, k not a multiple of 64; k = 8; odd n (element stores).
  check_tiles<kMode, MishMishModel>(make_problem(300, 520, 1000, 11), "300x520x1000", stream);
  check_tiles<kMode, MishMishModel>(make_problem(129, 72, 8, 12), "129x72x8", stream);
  check_tiles<kMode, MishMishModel>(make_problem(77, 257, 136, 13), "77x257x136", stream);
  check_refusals<kMode>(make_problem(64, 64, 64, 14), stream);
  check_repeat_and_graph<kMode, MishMishModel>(make_problem(300, 520, 1000, 15), GemmTile::kAuto,
                                               stream);
}

// --- cuBLAS -----------------------------------------------------------------------------------

// y [m][n] = x [m][k] W [n][k]^T (row-major) as cuBLAS's column-major y^T = W x^T (its TN case).
void cublas_gemm(cublasHandle_t handle, const void* x, const void* w, cudaDataType in, void* y,
                 cudaDataType out, int64_t m, int64_t n, int64_t k, float beta) {
  const float alpha = 1.0f;
  CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w, in,
                            int(k), x, in, int(k), &beta, y, out, int(n), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}
// The library's bf16x3 and bf16x6 paths (gemm_bf16_parts): a bf16 GEMM for each product of x's
// and W's parts i and j with i + j < parts, into one float32 output, smallest first.
template <Mode kMode>
void cublas_parts(cublasHandle_t handle, const Operands<kMode>& op, float* y) {
  constexpr int kParts = ModeTraits<kMode>::kParts;
  float beta = 0.0f;
  for (int order = kParts - 1; order >= 0; --order) {
    for (int i = order; i >= 0; --i) {
      cublas_gemm(handle, op.x[i].data, op.w[order - i].data, CUDA_R_16BF, y, CUDA_R_32F, op.m,
                  op.n, op.k, beta);
      beta = 1.0f;
    }
  }
}

// float32's own GEMM of the values the parts were split from (cublasSgemm, TF32 off).
void cublas_sgemm(cublasHandle_t handle, const float* x, const float* w, float* y, int64_t m,
                  int64_t n, int64_t k) {
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));  // no TF32
  CHECK_CUBLAS(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w,
                           int(k), x, int(k), &beta, y, int(n)));
  CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
}

// max |y - reference| over the sampled rows of float32 y [m][n] against the float64 sums.
double max_gemm_error(const std::vector<float>& y, const Sums& sums) {
  double worst = 0;
  for (size_t i = 0; i < sums.rows.size(); ++i) {
    for (int64_t c = 0; c < sums.n; ++c) {
      const double err =
          std::fabs(double(y[size_t(sums.rows[i] * sums.n + c)]) - sums.y[i * sums.n + c]);
      worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
    }
  }
  return worst;
}

// --- timing -----------------------------------------------------------------------------------

template <typename T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> host(n);
  CHECK_CUDA(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// One timed launch (or cuBLAS sequence) and the cuBLAS entry its time is compared with.
struct Entry {
  std::string name, tile;
  std::function<void()> run;
  int reference = 0;
  double us = 0;
};

// Each entry's median over rounds x per_round runs, each run timed alone between two events; the
// entries take turns round by round, so that the GPU's clock and temperature drifts fall on all
// of them alike.
void time_entries(cudaStream_t stream, std::vector<Entry>& entries, int rounds = 5,
                  int per_round = 10) {
  const size_t runs = size_t(rounds * per_round);
  std::vector<std::vector<cudaEvent_t>> events(entries.size());
  for (auto& list : events) {
    list.resize(2 * runs);
    for (auto& e : list) CHECK_CUDA(cudaEventCreate(&e));
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < entries.size(); ++i) {
      entries[i].run();  // untimed: the caches and clocks as the previous entry left them
      for (int j = 0; j < per_round; ++j) {
        const size_t at = size_t(r * per_round + j);
        CHECK_CUDA(cudaEventRecord(events[i][2 * at], stream));
        entries[i].run();
        CHECK_CUDA(cudaEventRecord(events[i][2 * at + 1], stream));
      }
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    std::vector<double> us(runs);
    for (size_t j = 0; j < runs; ++j) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, events[i][2 * j], events[i][2 * j + 1]));
      us[j] = 1e3 * double(ms);
    }
    std::sort(us.begin(), us.end());
    entries[i].us = us[runs / 2];
    for (auto& e : events[i]) CHECK_CUDA(cudaEventDestroy(e));
  }
}

// The kernel in mode kMode with Model's chain at `tile` as an entry, after one run whose output is
// checked at the sampled rows against the bound and, where `first` is given, compared bit for bit
// with the first such output (reported, not judged). Tiles that do not fit are left out.
template <Mode kMode, class Model>
void add_ours(std::vector<Entry>& entries, const Operands<kMode>& op,
              typename ModeTraits<kMode>::Out* out, GemmTile tile, const Sums& sums,
              cudaStream_t stream, int reference,
              std::vector<typename ModeTraits<kMode>::Out>* first = nullptr) {
  using Out = typename ModeTraits<kMode>::Out;
  if (!cuda::gemm::tile_fits(ModeTraits<kMode>::kProducts, tile)) return;
  const Pointers ptr = pointers_of(op, out);
  const auto run = [&op, ptr, tile, stream] {
    CHECK_CUDA((launch<kMode, Model>(op, ptr, tile, stream)));
  };
  CHECK_CUDA(cudaMemsetAsync(out, 0xff, size_t(op.m * op.n) * sizeof(Out), stream));
  run();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::vector<Out> host = download(out, size_t(op.m * op.n));
  const Error e = compare<kMode, Model>(host, op, sums, true);
  std::string same;
  if (first) {
    if (first->empty()) *first = host;
    same = same_bits(host, *first) ? ", bits as the auto tile's" : ", bits differ from auto's";
  }
  const std::string name = std::string("ours ") + ModeTraits<kMode>::kName + " " + Model::kName;
  verdict(e.finite && e.max_ratio <= 1.0,
          "%-32s %-14s %lld rows: max error %.3e (%.3f of the bound)%s", name.c_str(),
          tile_name(tile), (long long)op.m, e.max_abs, e.max_ratio, same.c_str());
  entries.push_back(Entry{name, tile_name(tile), run, reference});
}

// The GEMM alone in mode kMode (no chain, no bias; the auto tile) into out: its max error at the
// sampled rows against the float64 sums.
template <Mode kMode>
double gemm_error(const Operands<kMode>& op, float* out, const Sums& sums, cudaStream_t stream) {
  CHECK_CUDA(
      (launch<kMode, IdentityModel>(op, pointers_of(op, out), GemmTile::kAuto, stream, false)));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return max_gemm_error(download(out, size_t(op.m * op.n)), sums);
}

// Inputs of wide dynamic range: x = rand * logspace(-6, 3) along k, the scales
// permuted, 32 x 2048 -> 1024. bf16x3's two parts keep 17 bits of each value, which such inputs
// expose; bf16x6's three keep float32's 24. The GEMM alone against the float64 product of the
// float32 values: promoted bf16x6 within 2x of float32's error (cublasSgemm), which cuBLAS's six
// GEMMs miss (their tensor cores' accumulation over the whole k).
void check_wide_range(cublasHandle_t handle, cudaStream_t stream) {
  constexpr int64_t m = 32, n = 1024, k = 2048;
  Problem p = make_problem(m, n, k, 31);
  Random random{32};
  std::vector<float> scale(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j)
    scale[size_t(j)] = float(std::pow(10.0, -6.0 + 9.0 * j / (k - 1)));
  for (int64_t j = k - 1; j > 0; --j) {  // Fisher-Yates
    const int64_t other = int64_t((0.5 * (random.uniform() + 1.0)) * double(j + 1)) % (j + 1);
    std::swap(scale[size_t(j)], scale[size_t(other)]);
  }
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      float& v = p.x[size_t(r * k + j)];
      v = 0.5f * (v + 1.0f) * scale[size_t(j)];
    }
  }
  const Operands<Mode::kBf16x3Promoted> three = make_operands<Mode::kBf16x3Promoted>(p);
  const Operands<Mode::kBf16x6Promoted> six = make_operands<Mode::kBf16x6Promoted>(p);
  const Sums sums32 = reference_sums32(p.x, p.w, n, k, all_rows(m));
  DeviceBuffer<float> out(size_t(m * n)), x32(p.x.size()), w32(p.w.size());
  x32.upload(p.x);
  w32.upload(p.w);
  const double ours_three = gemm_error(three, out.data, sums32, stream);
  const double ours_six = gemm_error(six, out.data, sums32, stream);
  const auto cublas_error = [&](const auto& run) {
    run();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    return max_gemm_error(out.download(size_t(m * n)), sums32);
  };
  const double theirs_six = cublas_error([&] { cublas_parts(handle, six, out.data); });
  const double float32 =
      cublas_error([&] { cublas_sgemm(handle, x32.data, w32.data, out.data, m, n, k); });
  std::printf(
      "wide-range inputs (32 x 2048 -> 1024), GEMM error against float64: ours bf16x3 promoted"
      " %.3e, ours bf16x6 promoted %.3e, cuBLAS bf16x6 %.3e, float32 (cublasSgemm) %.3e\n",
      ours_three, ours_six, theirs_six, float32);
  verdict(ours_six <= 2.0 * float32,
          "promoted bf16x6 on wide-range inputs within 2x of float32's error (%.2fx; cuBLAS's six"
          " GEMMs %.2fx, promoted bf16x3 %.2fx)",
          ours_six / float32, theirs_six / float32, ours_three / float32);
}

void bench(cudaStream_t stream, cublasHandle_t handle) {
  constexpr int64_t kMaxRows = 1024, n = 8192, k = 8192;
  std::printf(
      "\nTimings: x [m][%lld] W [%lld][%lld], the median of 50 runs each (5 rounds of 10, the"
      " entries in turns); ours with the chain, cuBLAS the GEMM alone\n",
      (long long)k, (long long)n, (long long)k);
  const Problem p = make_problem(kMaxRows, n, k, 99);
  Operands<Mode::kBf16ToF32> bf16_f32 = make_operands<Mode::kBf16ToF32>(p);
  Operands<Mode::kBf16ToBf16> bf16 = make_operands<Mode::kBf16ToBf16>(p);
  Operands<Mode::kFp16ToF32> fp16_f32 = make_operands<Mode::kFp16ToF32>(p);
  Operands<Mode::kFp16ToFp16> fp16 = make_operands<Mode::kFp16ToFp16>(p);
  Operands<Mode::kBf16x3> three = make_operands<Mode::kBf16x3>(p);
  Operands<Mode::kBf16x3OneSum> one_sum = make_operands<Mode::kBf16x3OneSum>(p);
  Operands<Mode::kBf16x3Promoted> promoted = make_operands<Mode::kBf16x3Promoted>(p);
  Operands<Mode::kBf16x6Promoted> six = make_operands<Mode::kBf16x6Promoted>(p);
  DeviceBuffer<float> x32(p.x.size()), w32(p.w.size());
  x32.upload(p.x);
  w32.upload(p.w);
  const size_t count = size_t(kMaxRows * n);
  DeviceBuffer<float> out32(count), cublas32(count);
  DeviceBuffer<__nv_bfloat16> out_bf16(count), cublas_bf16(count);
  DeviceBuffer<__half> out_fp16(count), cublas_fp16(count);

  for (const int64_t m : {int64_t(128), int64_t(256), int64_t(512), int64_t(1024)}) {
    bf16_f32.m = bf16.m = fp16_f32.m = fp16.m = three.m = one_sum.m = promoted.m = six.m = m;
    const double flops = 2.0 * double(m * n * k);
    std::printf("\n%lld x %lld -> %lld (%.1f GFLOP a GEMM)\n", (long long)m, (long long)k,
                (long long)n, flops * 1e-9);
    const std::vector<int64_t> rows =
        m == kMaxRows ? std::vector<int64_t>{0, m / 2, m - 1} : std::vector<int64_t>{0, m - 1};
    const Sums sums16 = reference_sums(bf16, rows);
    const Sums sums_fp16 = reference_sums(fp16, rows);
    const Sums sums_three = reference_sums(three, rows);
    const Sums sums_six = reference_sums(six, rows);

    std::vector<Entry> entries;
    entries.push_back(Entry{"cuBLAS bf16 -> bf16", "",
                            [&] {
                              cublas_gemm(handle, bf16.x[0].data, bf16.w[0].data, CUDA_R_16BF,
                                          cublas_bf16.data, CUDA_R_16BF, m, n, k, 0.0f);
                            },
                            0});
    entries.push_back(Entry{"cuBLAS bf16 -> f32", "",
                            [&] {
                              cublas_gemm(handle, bf16.x[0].data, bf16.w[0].data, CUDA_R_16BF,
                                          cublas32.data, CUDA_R_32F, m, n, k, 0.0f);
                            },
                            1});
    entries.push_back(Entry{"cuBLAS fp16 -> fp16", "",
                            [&] {
                              cublas_gemm(handle, fp16.x[0].data, fp16.w[0].data, CUDA_R_16F,
                                          cublas_fp16.data, CUDA_R_16F, m, n, k, 0.0f);
                            },
                            2});
    entries.push_back(Entry{"cuBLAS bf16x3 (3 GEMMs) -> f32", "",
                            [&] { cublas_parts(handle, three, cublas32.data); }, 1});
    entries.push_back(Entry{"cuBLAS bf16x6 (6 GEMMs) -> f32", "",
                            [&] { cublas_parts(handle, six, cublas32.data); }, 1});
    std::vector<__nv_bfloat16> first_bf16;
    std::vector<float> first_f32, first_three, first_promoted, first_six;
    for (GemmTile tile : kTiles) {
      add_ours<Mode::kBf16ToBf16, MishMishModel>(entries, bf16, out_bf16.data, tile, sums16, stream,
                                                 0, &first_bf16);
    }
    for (GemmTile tile : {GemmTile::kAuto, GemmTile::k128x256}) {
      add_ours<Mode::kBf16ToBf16, IdentityModel>(entries, bf16, out_bf16.data, tile, sums16, stream,
                                                 0);
    }
    for (GemmTile tile : kTiles) {
      add_ours<Mode::kBf16ToF32, MishMishModel>(entries, bf16_f32, out32.data, tile, sums16, stream,
                                                1, &first_f32);
    }
    add_ours<Mode::kFp16ToFp16, MishMishModel>(entries, fp16, out_fp16.data, GemmTile::kAuto,
                                               sums_fp16, stream, 2);
    add_ours<Mode::kFp16ToF32, MishMishModel>(entries, fp16_f32, out32.data, GemmTile::kAuto,
                                              sums_fp16, stream, 1);
    const size_t three_at = entries.size();
    for (GemmTile tile : kTiles) {
      add_ours<Mode::kBf16x3, MishMishModel>(entries, three, out32.data, tile, sums_three, stream,
                                             1, &first_three);
    }
    for (GemmTile tile : {GemmTile::kAuto, GemmTile::k128x256, GemmTile::k64x128Turns}) {
      add_ours<Mode::kBf16x3OneSum, MishMishModel>(entries, one_sum, out32.data, tile, sums_three,
                                                   stream, 1);
    }
    const size_t promoted_at = entries.size();
    for (GemmTile tile : kTiles) {  // those that fit: auto, 128x128, 128x64, 64x128 turns
      add_ours<Mode::kBf16x3Promoted, MishMishModel>(entries, promoted, out32.data, tile,
                                                     sums_three, stream, 1, &first_promoted);
    }
    const size_t six_at = entries.size();
    for (GemmTile tile : kTiles) {  // the promoted tiles, as above
      add_ours<Mode::kBf16x6Promoted, MishMishModel>(entries, six, out32.data, tile, sums_six,
                                                     stream, 4, &first_six);
    }

    time_entries(stream, entries);
    for (const Entry& e : entries) {
      const Entry& against = entries[size_t(e.reference)];
      std::printf("  %-36s %-14s %9.1f us %7.1f TFLOP/s %6.1f%% of %s\n", e.name.c_str(),
                  e.tile.c_str(), e.us, flops / e.us * 1e-6, 100.0 * against.us / e.us,
                  against.name.c_str());
    }
    std::printf(
        "  bf16x3 (auto) against cuBLAS's three GEMMs: %.2fx as fast; promoted bf16x3 (auto)"
        " %.2fx; promoted bf16x6 (auto) against cuBLAS's six GEMMs %.2fx\n",
        entries[3].us / entries[three_at].us, entries[3].us / entries[promoted_at].us,
        entries[4].us / entries[six_at].us);

    if (m == kMaxRows) {
      // bf16x3's accuracy: the GEMM alone (no chain, no bias) against the float64 product of the
      // float32 values x and W were split from, beside cuBLAS's three bf16 GEMMs' and a float32
      // GEMM's on the same values.
      const Sums sums32 = reference_sums32(three.x32, three.w32, n, k, rows);
      const double ours = gemm_error(three, out32.data, sums32, stream);
      const double ours_one_sum = gemm_error(one_sum, out32.data, sums32, stream);
      const double ours_promoted = gemm_error(promoted, out32.data, sums32, stream);
      const double ours_six = gemm_error(six, out32.data, sums32, stream);
      cublas_parts(handle, three, cublas32.data);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double theirs = max_gemm_error(download(cublas32.data, count), sums32);
      cublas_parts(handle, six, cublas32.data);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double theirs_six = max_gemm_error(download(cublas32.data, count), sums32);
      cublas_sgemm(handle, x32.data, w32.data, cublas32.data, m, n, k);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double float32 = max_gemm_error(download(cublas32.data, count), sums32);
      std::printf(
          "  GEMM error against float64 at %zu rows x %lld: ours bf16x3 %.3e, ours bf16x3"
          " one sum %.3e, ours bf16x3 promoted %.3e, ours bf16x6 promoted %.3e, cuBLAS bf16x3"
          " %.3e, cuBLAS bf16x6 %.3e, float32 (cublasSgemm) %.3e\n",
          rows.size(), (long long)n, ours, ours_one_sum, ours_promoted, ours_six, theirs,
          theirs_six, float32);
      // Both bf16x3s leave out x_lo W_lo and the parts' own rounding; summing the small terms
      // apart must keep the rest of the error at cuBLAS's level.
      verdict(ours <= 1.25 * theirs,
              "bf16x3's GEMM error within 1.25x of cuBLAS bf16x3's (%.2fx; %.2fx float32's)",
              ours / theirs, ours / float32);
      // Promotion leaves the tensor cores' truncation to each k-tile's sums: what remains is
      // float32 accumulation's, and the parts' x_lo W_lo and rounding.
      verdict(ours_promoted <= 1.5 * float32,
              "promoted bf16x3's GEMM error within 1.5x of float32's (cublasSgemm) (%.2fx; %.2fx"
              " cuBLAS bf16x3's)",
              ours_promoted / float32, ours_promoted / theirs);
      verdict(ours_six <= 1.5 * float32,
              "promoted bf16x6's GEMM error within 1.5x of float32's (cublasSgemm) (%.2fx; %.2fx"
              " cuBLAS bf16x6's)",
              ours_six / float32, ours_six / theirs_six);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is printed
  const std::string what = argc > 1 ? argv[1] : "all";
  if ((what != "all" && what != "check" && what != "bench") || argc > 2) {
    std::fprintf(stderr, "usage: hopper_gemm_check [check | bench | all]\n");
    return 2;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, compute capability %d.%d, %d SMs\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasSetStream(handle, stream));
  if (what != "bench") {
    check_mode<Mode::kBf16ToF32>(stream);
    check_mode<Mode::kBf16ToBf16>(stream);
    check_mode<Mode::kFp16ToF32>(stream);
    check_mode<Mode::kFp16ToFp16>(stream);
    check_mode<Mode::kBf16x3>(stream);
    check_mode<Mode::kBf16x3OneSum>(stream);
    check_mode<Mode::kBf16x3Promoted>(stream);
    check_mode<Mode::kBf16x6Promoted>(stream);
    // A chain with a per-feature term (swish_chain's add_value) and 16-bit Half forms.
    check_tiles<Mode::kBf16ToBf16, SwishChainModel>(make_problem(300, 520, 1000, 21),
                                                    "300x520x1000", stream);
    check_tiles<Mode::kBf16x3, SwishChainModel>(make_problem(300, 520, 1000, 22), "300x520x1000",
                                                stream);
    check_tiles<Mode::kBf16x3Promoted, SwishChainModel>(make_problem(300, 520, 1000, 22),
                                                        "300x520x1000", stream);
    check_tiles<Mode::kBf16x6Promoted, SwishChainModel>(make_problem(300, 520, 1000, 22),
                                                        "300x520x1000", stream);
    // Gated pairs (SwiGLU's form) with a per-feature term on the chain's side, n a multiple of a
    // tile's half and not (odd: element stores), in 16-bit and split modes.
    check_gated<Mode::kBf16ToF32, SwishChainModel>(make_problem(300, 520, 1000, 31), stream);
    check_gated<Mode::kBf16ToBf16, SwishChainModel>(make_problem(300, 261, 136, 32), stream);
    check_gated<Mode::kFp16ToFp16, MishMishModel>(make_problem(77, 520, 1000, 33), stream);
    check_gated<Mode::kBf16x3Promoted, SwishChainModel>(make_problem(300, 261, 1000, 34), stream);
    check_gated<Mode::kBf16x6Promoted, MishMishModel>(make_problem(129, 520, 136, 35), stream);
    check_wide_range(handle, stream);
  }
  if (what == "all" || what == "bench") bench(stream, handle);
  CHECK_CUBLAS(cublasDestroy(handle));
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("\n%s: %d failure%s\n", g_failures == 0 ? "ALL PASSED" : "FAILED", g_failures,
              g_failures == 1 ? "" : "s");
  return g_failures == 0 ? 0 : 1;
}
