// The small-batch products (small_batch.h): the loop of the epilogue's chosen instruction set, W's
// rows split across libtorch's threads.
#include "kernels/cpu/small_batch.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "kernels/cpu/epilogue.h"

namespace fusedlinear {
namespace cpu {

bool small_batch_runs() {
#if FUSEDLINEAR_CPU_SIMD
  return capability() != Capability::kScalar;
#else
  return false;
#endif
}

bool small_batch_takes(int64_t rows, bool w_output_major) {
  return small_batch_runs() && rows <= kSmallBatchMaxRows && w_output_major;
}

void small_batch_linear(const SmallBatchCall& call) {
  TORCH_CHECK(small_batch_runs(),
              "fusedlinear: the small-batch products need the AVX2 or AVX-512 loop, and the CPU "
              "loop chosen is the scalar one");
#if FUSEDLINEAR_CPU_SIMD
  const auto rows =
      capability() == Capability::kAvx512 ? &avx512::small_batch_rows : &avx2::small_batch_rows;
  // A task's share of W: enough products (about 2^18) that starting it costs little beside them.
  const int64_t grain =
      std::max<int64_t>(8, (int64_t{1} << 18) / std::max<int64_t>(1, call.k * call.rows));
  at::parallel_for(0, call.n, grain, [&](int64_t first, int64_t last) { rows(call, first, last); });
#endif
}

}  // namespace cpu
}  // namespace fusedlinear
