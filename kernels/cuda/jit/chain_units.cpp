// The translation units NVRTC compiles for a run-time chain (chain_units.h).
#include "kernels/cuda/jit/chain_units.h"

namespace fusedlinear {
namespace cuda {
namespace jit {
namespace {

const char* element_name(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return "fusedlinear::ElementType::kFloat32";
    case ElementType::kFloat16:
      return "fusedlinear::ElementType::kFloat16";
    case ElementType::kBFloat16:
      return "fusedlinear::ElementType::kBFloat16";
  }
  return "";
}

// The chain's declaration, as a header of declarations writes one (kernels/math/model.h).
std::string declaration_unit(const std::string& header, const std::string& chain_expression) {
  return "#include \"" + header +
         "\"\n\nnamespace fusedlinear {\nnamespace compiled {\n\n"
         "struct Declaration : CompiledRuntimeChain {\n  static constexpr auto kChain = " +
         chain_expression + ";\n};\n\n}  // namespace compiled\n}  // namespace fusedlinear\n";
}

}  // namespace

NvrtcRequest epilogue_unit(const std::string& chain_expression, ElementType type,
                           const std::string& architecture) {
  NvrtcRequest request;
  request.source = declaration_unit("kernels/cuda/jit/compiled_chain.cuh", chain_expression);
  const std::string epilogue = std::string("fusedlinear::cuda::CompiledEpilogue<") +
                               "fusedlinear::compiled::Declaration, " + element_name(type) + ">";
  for (const bool vectorized : {false, true}) {
    for (const bool has_bias : {false, true}) {
      for (const bool gated : {false, true}) {
        request.name_expressions.push_back(
            "&fusedlinear::cuda::fused_epilogue_kernel<" + epilogue + "::T, " +
            (vectorized ? epilogue + "::kVec" : "1") + ", " + epilogue + "::Shape, " +
            (has_bias ? "true" : "false") + ", " + (gated ? "true" : "false") + ", " + epilogue +
            "::ChainT>");
      }
    }
  }
  request.name_expressions.push_back(
      "&fusedlinear::cuda::kCompiledChain<"
      "fusedlinear::compiled::Declaration, " +
      std::string(element_name(type)) + ">");
  // As the declarations' epilogue files are compiled (kernels/register/fusedlinear_models.cmake).
  request.options = {"-ftz=true"};
  request.architecture = architecture;
  return request;
}

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
