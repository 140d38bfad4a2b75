// A run-time chain as a declaration writes it (chain_source.h).
#include "kernels/ops/chain_source.h"

#include <cmath>
#include <cstdio>

#include "kernels/math/program.h"

namespace fusedlinear {
namespace {

// The functors' type names, by act::OpCode.
const char* const kFunctorNames[] = {
#define FUSEDLINEAR_FUNCTOR_NAME(F) #F,
    FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_FUNCTOR_NAME) FUSEDLINEAR_REWRITTEN(FUSEDLINEAR_FUNCTOR_NAME)
#undef FUSEDLINEAR_FUNCTOR_NAME
};
static_assert(sizeof kFunctorNames / sizeof kFunctorNames[0] == size_t(act::OpCode::kCount));

// `value` exactly, as a float literal: hexadecimal (0x1.8p+1f), or INFINITY (as the functors'
// defaults write it). The spec grammar has no NaN.
std::string float_literal(float value) {
  if (std::isinf(value)) return value < 0 ? "-INFINITY" : "INFINITY";
  char text[32];
  std::snprintf(text, sizeof text, "%af", double(value));
  return text;
}

// `text` as a C++ string literal: printable ASCII as itself, other bytes (and " and \) as
// three-digit octal escapes, which no following character can extend.
std::string string_literal(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += char(c);
    } else {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\%03o", unsigned(c));
      out += escape;
    }
  }
  return out + "\"";
}

}  // namespace

std::string chain_expression(const ParsedChain& chain) {
  std::string out = "act::Chain(";
  for (size_t i = 0; i < chain.ops.size(); ++i) {
    const ChainOp& op = chain.ops[i];
    if (op.op->code < 0) {
      throw ChainSpecError("chain '" + chain.to_string() + "': the op '" + op.op->name +
                           "' is not of the vocabulary");
    }
    if (i > 0) out += ", ";
    out += "act::";
    out += kFunctorNames[op.op->code];
    out += "{";
    if (op.op->takes_param) {
      out += string_literal(op.param);
    } else {
      for (size_t a = 0; a < op.op->args.size(); ++a) {
        if (a > 0) out += ", ";
        out += float_literal(op.args[a]);
      }
    }
    out += "}";
  }
  return out + ")";
}

}  // namespace fusedlinear
