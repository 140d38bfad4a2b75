// The floor under a launched forward: an empty kernel, as one block and as one 8-block cluster (the
// fused-MLP cluster form's launch), timed three ways: a plain launch with CUDA events around it
// (bench's "launched" column), replayed from a CUDA graph (bench's "graph" column), and the host's
// time per launch call with many calls issued back to back. Medians of 200 (the first two).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "app/tools/cuda_check.h"

namespace {

constexpr const char* kToolName = "launch_floor";
constexpr int kClusterBlocks = 8;
constexpr int kThreads = 256;
constexpr int kTimed = 200;
constexpr int kHostCalls = 1000;

// Does nothing, but takes an argument and may store, as a real kernel does.
__global__ void empty_kernel(int* never) {
  if (never && threadIdx.x == 0 && blockIdx.x == gridDim.x) *never = 1;
}

cudaError_t launch(bool cluster, cudaStream_t stream) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = kClusterBlocks;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(cluster ? kClusterBlocks : 1);
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = cluster ? &attribute : nullptr;
  config.numAttrs = cluster ? 1 : 0;
  int* never = nullptr;
  void* args[] = {&never};
  return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(empty_kernel), args);
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median µs between events recorded around `issue`, each waited for before the next.
template <class Issue>
float event_median_us(cudaStream_t stream, Issue issue) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> us;
  for (int i = 0; i < kTimed; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    issue();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return median(us);
}

}  // namespace

int main() {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  for (const bool cluster : {false, true}) {
    for (int i = 0; i < 50; ++i) CHECK_CUDA(launch(cluster, stream));
    const float launched = event_median_us(stream, [&] { CHECK_CUDA(launch(cluster, stream)); });

    cudaGraph_t graph;
    cudaGraphExec_t replay;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(launch(cluster, stream));
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&replay, graph, 0));
    const float replayed =
        event_median_us(stream, [&] { CHECK_CUDA(cudaGraphLaunch(replay, stream)); });
    CHECK_CUDA(cudaGraphExecDestroy(replay));
    CHECK_CUDA(cudaGraphDestroy(graph));

    // The host's share: calls issued back to back, the GPU keeping up with empty kernels.
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kHostCalls; ++i) CHECK_CUDA(launch(cluster, stream));
    const auto t1 = std::chrono::steady_clock::now();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const double host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / kHostCalls;
    std::printf("%-16s launched %.2f us, graph %.2f us, host %.2f us a launch call\n",
                cluster ? "8-block cluster:" : "one block:", launched, replayed, host_us);
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
