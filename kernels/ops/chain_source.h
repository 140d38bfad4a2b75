// A run-time chain as a declaration writes it (kernels/math/model.h), for NVRTC to compile the
// same kernels a declaration of it gets (kernels/cuda/jit/).
#pragma once

#include <string>

#include "kernels/ops/chain_spec.h"

namespace fusedlinear {

// The chain's kChain: the C++ expression, in namespace fusedlinear, of its functors with their
// arguments as exact hexadecimal float literals and its parameters under their keys:
// `act::Chain(act::AddParam{"add_value"}, act::Swish{0x1p+0f}, act::Tanh{}, act::Gelu{},
// act::Hardtanh{-0x1p+0f, 0x1p+0f})`. Throws ChainSpecError for an op outside the vocabulary.
std::string chain_expression(const ParsedChain& chain);

}  // namespace fusedlinear
