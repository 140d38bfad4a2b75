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

// The chain's declaration, as a header of declarations writes one (kernels/math/model.h), after
// the headers of the kernels it instantiates.
std::string declaration_unit(const std::vector<std::string>& headers,
                             const std::string& chain_expression) {
  std::string unit;
  for (const std::string& header : headers) unit += "#include \"" + header + "\"\n";
  return unit +
         "\nnamespace fusedlinear {\nnamespace compiled {\n\n"
         "struct Declaration : CompiledRuntimeChain {\n  static constexpr auto kChain = " +
         chain_expression + ";\n};\n\n}  // namespace compiled\n}  // namespace fusedlinear\n";
}

// CompiledEpilogue (compiled_chain.cuh) of the declaration for results of `type`.
std::string compiled_epilogue(ElementType type) {
  return std::string("fusedlinear::cuda::CompiledEpilogue<fusedlinear::compiled::Declaration, ") +
         element_name(type) + ">";
}

// The chain's value for results of `type`, as the kernels take it.
std::string chain_value(ElementType type) {
  return std::string("&fusedlinear::cuda::kCompiledChain<fusedlinear::compiled::Declaration, ") +
         element_name(type) + ">";
}

}  // namespace

NvrtcRequest epilogue_unit(const std::string& chain_expression, ElementType type,
                           const std::string& architecture) {
  NvrtcRequest request;
  request.family = "epilogue";
  request.source = declaration_unit({"kernels/cuda/jit/compiled_chain.cuh"}, chain_expression);
  const std::string epilogue = compiled_epilogue(type);
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
  request.name_expressions.push_back(chain_value(type));
  // As the declarations' epilogue files are compiled (kernels/register/fusedlinear_models.cmake).
  request.options = {"-ftz=true"};
  request.architecture = architecture;
  return request;
}

NvrtcRequest hopper_unit(const std::string& chain_expression, const HopperInstance& instance,
                         const std::string& architecture) {
  NvrtcRequest request;
  request.family = "hopper";
  request.source =
      declaration_unit({"kernels/cuda/jit/compiled_chain.cuh", "kernels/cuda/gemm/hopper_gemm.cuh"},
                       chain_expression);
  // float32 x: its bfloat16 parts' products, float32 out (kernels/cuda/gemm/launch.cuh).
  const std::string in = instance.type == ElementType::kFloat16 ? "__half" : "__nv_bfloat16";
  const std::string out =
      std::string("fusedlinear::cuda::DeviceElement<") + element_name(instance.type) + ">";
  request.name_expressions.push_back(
      "&fusedlinear::cuda::gemm::hopper_gemm_kernel<fusedlinear::cuda::gemm::GemmShape<"
      "fusedlinear::cuda::gemm::GemmProducts::" +
      instance.products + ", " + std::to_string(instance.tile_n) + ", " +
      std::to_string(instance.consumer_rows) + ", " + (instance.turns ? "true" : "false") + ">, " +
      in + ", " + out + ", " + compiled_epilogue(instance.type) + "::ChainT, " +
      (instance.gated ? "true" : "false") + ">");
  request.name_expressions.push_back(chain_value(instance.type));
  request.architecture = architecture;  // no options of its own, as the declarations' files
  return request;
}

NvrtcRequest skinny_unit(const std::string& chain_expression, ElementType type,
                         const std::string& variant, const std::string& architecture) {
  NvrtcRequest request;
  request.family = "skinny";
  request.source =
      declaration_unit({"kernels/cuda/jit/compiled_chain.cuh", "kernels/cuda/skinny/variants.cuh"},
                       chain_expression);
  const std::string element =
      std::string("fusedlinear::cuda::DeviceElement<") + element_name(type) + ">";
  const std::string chain = compiled_epilogue(type) + "::ChainT";
  const std::string kernel_type = "fusedlinear::cuda::skinny::KernelOf<" + element +
                                  ", fusedlinear::cuda::SkinnyVariant::" + variant + ">::type";
  const std::string kernel = kernel_type + "::kernel<" + chain + ", ";
  request.name_expressions.push_back(kernel + "false>()");
  request.name_expressions.push_back(kernel + kernel_type + "::kHasTileCopies>()");
  request.name_expressions.push_back("&fusedlinear::cuda::skinny::skinny_reduce_kernel<" + element +
                                     ", " + chain + ">");
  request.name_expressions.push_back(chain_value(type));
  // No -ftz, as the declarations' small-batch files (kernels/register/fusedlinear_models.cmake):
  // their split of x may be subnormal.
  request.architecture = architecture;
  return request;
}

NvrtcRequest mlp_unit(const std::vector<std::string>& layer_chains, const std::string& instance,
                      const std::string& architecture) {
  NvrtcRequest request;
  request.family = "mlp";
  std::string unit =
      "#include \"kernels/cuda/mlp/cluster_mlp.cuh\"\n"
      "#include \"kernels/cuda/mlp/streamed_mlp.cuh\"\n"
      "#include \"kernels/math/model.h\"\n\n"
      "namespace fusedlinear {\nnamespace compiled {\n\n";
  // Each layer's chain as a declaration of it, then its forms for results of precision P by
  // layer, as fused_mlp.cuh's InterpretedChains applies them.
  std::string cases;
  for (size_t l = 0; l < layer_chains.size(); ++l) {
    const std::string layer = "Layer" + std::to_string(l);
    unit += "struct " + layer +
            " : CompiledRuntimeChain {\n  static constexpr auto kChain = " + layer_chains[l] +
            ";\n};\n";
    cases += "      case " + std::to_string(l) +
             ": {\n        constexpr auto chain = device_chain<" + layer +
             ", P>(act::Program{});\n"
             "        act::apply_chain(chain, v, terms);\n        return;\n      }\n";
  }
  unit +=
      "\nstruct MlpChains {\n"
      "  template <act::ResultPrecision P, int R, int C>\n"
      "  static __device__ __forceinline__ void apply(\n"
      "      const cuda::MlpLayer&, int l, float (&v)[R][C],\n"
      "      const float (&terms)[act::kMaxColumnTerms][C]) {\n"
      "    switch (l) {\n" +
      cases + "    }\n  }\n};\n\n}  // namespace compiled\n}  // namespace fusedlinear\n";
  request.source = unit;
  request.name_expressions.push_back("&fusedlinear::cuda::mlp::" + instance +
                                     ", fusedlinear::compiled::MlpChains>");
  // As the library's instances are compiled (fused_mlp.cu, streamed_mlp.cu).
  request.options = {"-ftz=true"};
  request.architecture = architecture;
  return request;
}

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
