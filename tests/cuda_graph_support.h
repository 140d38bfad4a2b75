// The output of `call` replayed from a CUDA graph: captured on a side stream (so a kernel launched
// on the default stream instead of the current one would be missed or fail the capture), after
// one untimed call there (cuBLAS's workspace for that stream, the allocator's blocks), then the
// captured output filled with NaN and the graph replayed into it. For CUDA builds only.
#pragma once

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <functional>
#include <limits>

namespace fusedlinear {
namespace testing_support {

inline torch::Tensor replayed_from_cuda_graph(const std::function<torch::Tensor()>& call) {
  at::cuda::CUDAGraph graph;
  torch::Tensor out;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    call();
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    out = call();
    graph.capture_end();
  }
  out.fill_(std::numeric_limits<float>::quiet_NaN());
  graph.replay();
  return out;
}

}  // namespace testing_support
}  // namespace fusedlinear
