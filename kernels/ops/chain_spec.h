// Chains on the host: the vocabulary as the spec parser knows it, chain specs parsed and printed
// (docs/CHAINS.md has the grammar), a declaration's chain as the same description, and what a
// description gives: the op list the interpreter runs (kernels/math/program.h), the eager
// libtorch expression and the float64 reference, each op's from its functor's own `eager` and
// `reference` (kernels/math/functors.h).
#pragma once

#include <torch/types.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/math/chain.h"
#include "kernels/math/program.h"

namespace fusedlinear {

// A malformed chain spec, an unknown op, a wrong argument: one line naming the token and what
// was expected.
struct ChainSpecError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// One op: a functor of the vocabulary, or one a declaration brings (compiled chains only).
struct OpInfo {
  std::string name;    // the spec's token, "leaky_relu"
  std::string choice;  // gelu's approximate: "" (none) or "tanh"
  std::vector<act::Arg> args;
  bool takes_param = false;  // add/sub/mul/div by a parameter, named by its state-dict key
  // The canonical spec writes the bare name when every argument is its default (swish for
  // beta = 1); other ops write every argument.
  bool args_written_when_not_default = false;
  bool output_in_unit_interval = false;
  int code = -1;  // its act::OpCode; -1 outside the vocabulary
  // The functor with these arguments on a tensor (`term`: a column op's parameter, broadcast
  // over the rows) and on a double.
  torch::Tensor (*eager)(const float* args, const torch::Tensor& x,
                         const torch::Tensor& term) = nullptr;
  double (*reference)(const float* args, double x, double term) = nullptr;
};

// An op of a chain: what it is, its arguments, and for a column op its parameter's key.
struct ChainOp {
  const OpInfo* op = nullptr;
  float args[2] = {0, 0};
  std::string param;
};

// A chain as the host knows it.
struct ParsedChain {
  std::vector<ChainOp> ops;
  // The column ops' keys in slot order (the k-th column op's in slot k; a key may repeat).
  std::vector<std::string> slot_params() const;
  // Each parameter's key once, in the order of first use.
  std::vector<std::string> params() const;
  // The canonical spec: no spaces, every argument written (swish's beta only when not 1), numbers
  // as the shortest decimal that reads back to the same float
  // ("add(add_value),swish,tanh,gelu,hardtanh(-1,1)").
  std::string to_string() const;
  // "Linear -> add(add_value) -> swish -> ...".
  std::string description() const;
};

// The vocabulary, in functors.h's order.
const std::vector<OpInfo>& vocabulary();
// The names of the vocabulary, comma-separated, for messages.
std::string vocabulary_names();

// Parses a spec (docs/CHAINS.md's grammar; tests/spec_grammar.tsv is its test, shared with
// weights/fx_chain.py). Throws ChainSpecError naming the faulty token, what was expected and where
// (the vocabulary for an unknown name, the arguments an op takes for a wrong count or name).
ParsedChain parse_chain(const std::string& spec);
// parse_chain, with the empty spec as the chain of no ops: a Linear alone, as a layer of a layered
// model may be (the ops take "" so).
ParsedChain parse_chain_or_empty(const std::string& spec);

// Whether `text` is a number of the spec grammar: decimal digits with an optional sign, point,
// fraction and exponent ("1", "-2.5", ".5", "1e-3"), or inf with an optional sign; not
// hexadecimal, not nan, no spaces. The command line's tolerances are read by the same rule.
bool is_spec_number(const std::string& text);

// Whether `path` is a module's attribute path as a state dict's keys hold it: [A-Za-z0-9_] parts
// joined by single dots ("fc1", "block.0"), none of them empty. A spec's words (keys, op names)
// are such paths; so are a layered spec's Linears and a file's metadata's Linear.
bool is_attribute_path(const std::string& path);

// `text` for a one-line message: its bytes within 40 of byte `at`, "..." where it is cut, in single
// quotes, with backslash, control bytes and bytes outside ASCII escaped ("\\", "\n", "\x00").
std::string spec_excerpt(const std::string& text, size_t at);
// `text` whole, in single quotes and escaped as spec_excerpt escapes it: for a message that names
// a spec to compare with another, where a cut one would not do.
std::string spec_quoted(const std::string& text);

// The op list the interpreter runs for `chain`, with chain.h's rewrites (GELU after an op whose
// results lie in [-1, 1] as GeluOnUnitInterval) and without the clamps that cannot change a value
// (act::without_identity_clamps). Throws ChainSpecError for an op outside the vocabulary or more
// ops or parameters than the interpreter takes.
act::Program program_of(const ParsedChain& chain);

// The chain as libtorch's eager ops, op by op as the Python model runs them; `slot_params` in
// slot order (each broadcast against x's last dimension).
torch::Tensor eager_chain(const ParsedChain& chain, torch::Tensor x,
                          const std::vector<torch::Tensor>& slot_params);
// The chain in float64 from the functors' `reference` forms, element by element: y [..., n] and
// each parameter [n] or of one element, any floating dtype. Returns a float64 tensor shaped as y.
torch::Tensor reference_chain(const ParsedChain& chain, const torch::Tensor& y,
                              const std::vector<torch::Tensor>& slot_params);

// --- a declaration's chain as a ParsedChain -----------------------------------------------------

template <class F, class = void>
struct ChoiceOf {
  static constexpr const char* value = "";
};
template <class F>
struct ChoiceOf<F, std::void_t<decltype(F::kChoice)>> {
  static constexpr const char* value = F::kChoice;
};

template <class F, class = void>
struct ArgsWrittenWhenNotDefaultOf : std::false_type {};
template <class F>
struct ArgsWrittenWhenNotDefaultOf<F, std::void_t<decltype(F::kArgsWrittenWhenNotDefault)>>
    : std::bool_constant<F::kArgsWrittenWhenNotDefault> {};

// The OpInfo of functor F (its name, arguments, eager and float64 forms).
template <class F>
OpInfo op_info_of() {
  OpInfo info;
  info.name = F::kName;
  info.choice = ChoiceOf<F>::value;
  if constexpr (act::kArgCount < F >> 0) info.args.assign(std::begin(F::kArgs), std::end(F::kArgs));
  info.takes_param = act::kTakesColumnTerm<F>;
  info.args_written_when_not_default = ArgsWrittenWhenNotDefaultOf<F>::value;
  info.output_in_unit_interval = act::kOutputInUnitInterval<F>;
  info.code = act::op_code_of<F>();
  if constexpr (act::kTakesColumnTerm<F>) {
    info.eager = [](const float*, const torch::Tensor& x, const torch::Tensor& term) {
      return F::eager(x, term);
    };
    info.reference = [](const float*, double x, double term) { return F::reference(x, term); };
  } else {
    info.eager = [](const float* args, const torch::Tensor& x, const torch::Tensor&) {
      return act::with_args<F>(args).eager(x);
    };
    info.reference = [](const float* args, double x, double) {
      return act::with_args<F>(args).reference(x);
    };
  }
  return info;
}

// The OpInfo of F, kept for the program's life: the vocabulary's own entry for its functors.
template <class F>
const OpInfo* op_info_for() {
  if constexpr (act::op_code_of<F>() >= 0) {
    for (const OpInfo& info : vocabulary()) {
      if (info.code == act::op_code_of<F>()) return &info;
    }
  }
  static const OpInfo info = op_info_of<F>();
  return &info;
}

// A declaration's kChain (kernels/math/model.h) as a ParsedChain.
template <class... Fs>
ParsedChain chain_of(const act::Chain<Fs...>& chain) {
  ParsedChain parsed;
  chain.for_each([&](const auto& functor) {
    using F = std::decay_t<decltype(functor)>;
    ChainOp op;
    op.op = op_info_for<F>();
    if constexpr (act::kTakesColumnTerm<F>) {
      op.param = functor.key ? functor.key : "";
    } else if constexpr (act::kArgCount<F> == 1) {
      const auto [a0] = functor;
      op.args[0] = a0;
    } else if constexpr (act::kArgCount<F> == 2) {
      const auto [a0, a1] = functor;
      op.args[0] = a0;
      op.args[1] = a1;
    }
    parsed.ops.push_back(op);
  });
  return parsed;
}

}  // namespace fusedlinear
