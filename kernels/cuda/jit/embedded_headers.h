// The text of the kernel headers NVRTC compiles (nvrtc_compile.h), embedded in the library at
// build time by embed_headers.cmake, each under the path other headers include it by.
#pragma once

namespace fusedlinear {
namespace cuda {
namespace jit {

struct EmbeddedHeader {
  const char* path;  // "kernels/math/chain.h"
  const char* text;
};

extern const EmbeddedHeader kEmbeddedHeaders[];
extern const int kEmbeddedHeaderCount;

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
