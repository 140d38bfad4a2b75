// Chain specs (kernels/ops/chain_spec.h, docs/CHAINS.md): the grammar (tests/spec_grammar.tsv's
// cases, which weights/fx_chain.py's tests read too), the canonical form, the messages of refused
// specs, the interpreter's op lists; and 200 seeded random specs run by the fused op against the
// eager chain of the same spec and against float64, on the CPU (each loop) and on CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/epilogue.h"
#include "kernels/math/reference_models.h"
#include "kernels/ops/chain_registry.h"
#include "kernels/ops/chain_source.h"
#include "kernels/ops/model_spec.h"
#include "kernels/ops/ops.h"
#include "modules/linear_chain.h"
#include "tests/test_support.h"

#ifdef FUSEDLINEAR_WITH_JIT
#include "kernels/cuda/jit/compiled_chains.h"
#endif
#ifdef FUSEDLINEAR_TEST_NVRTC
#include "kernels/cuda/jit/nvrtc_compile.h"
#endif

namespace fusedlinear {
namespace {

using testing_support::message_of;

TEST(ChainSpecs, CanonicalForm) {
  const std::pair<const char*, const char*> cases[] = {
      {"gelu(tanh),silu,clamp(-2,2)", "gelu(tanh),silu,clamp(-2,2)"},
      {" leaky_relu( negative_slope = 0.2 ) , gelu(approximate=tanh), gelu(none)",
       "leaky_relu(0.2),gelu(tanh),gelu"},
      {"add(add_value),swish,tanh,gelu,hardtanh", "add(add_value),swish,tanh,gelu,hardtanh(-1,1)"},
      {"softplus(beta=2),elu,celu(alpha=0.5)", "softplus(2,20),elu(1),celu(0.5)"},
      {"clamp(min=0,max=inf),clamp(-inf,1)", "clamp(0,inf),clamp(-inf,1)"},
      {"div(2.50),sub(-0.20000000298023224),mul(1e-5),add(100000)",
       "div(2.5),sub(-0.2),mul(1e-5),add(100000)"},
      {"mul(block.scale),relu6,selu,hardsigmoid,hardswish,softsign,tanhshrink,logsigmoid",
       "mul(block.scale),relu6,selu,hardsigmoid,hardswish,softsign,tanhshrink,logsigmoid"},
      {"add(0.33333334),mul(3.4028235e38)", "add(0.33333334),mul(3.4028235e38)"},
      // swish's beta is written only when it is not 1, so that beta-less specs read as before.
      {"swish,swish(1),swish(beta=1.0),swish(1.702),swish(beta=1.702)",
       "swish,swish,swish,swish(1.702),swish(1.702)"},
      {"swish( beta = -0.5 ),swish(0),swish(-0),swish(inf)",
       "swish(-0.5),swish(0),swish(-0),swish(inf)"},
      {"square,relu,square", "square,relu,square"},
  };
  for (const auto& [spec, canonical] : cases) {
    const ParsedChain chain = parse_chain(spec);
    EXPECT_EQ(chain.to_string(), canonical) << spec;
    EXPECT_EQ(parse_chain(canonical).to_string(), canonical) << "reads back: " << canonical;
  }
  EXPECT_EQ(parse_chain("add(a),mul(b),add(a)").slot_params(),
            (std::vector<std::string>{"a", "b", "a"}));
  EXPECT_EQ(parse_chain("add(a),mul(b),add(a)").params(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parse_chain("mish,mish").description(), "Linear -> mish -> mish");
  EXPECT_EQ(parse_chain("swish(beta=1.702),square").description(),
            "Linear -> swish(1.702) -> square");
  // The parsed arguments, and a declaration's chain printed as the same spec.
  EXPECT_EQ(parse_chain("swish").ops[0].args[0], 1.0f);
  EXPECT_EQ(parse_chain("swish(beta=1.702)").ops[0].args[0], 1.702f);
  EXPECT_EQ(chain_of(act::Chain(act::Swish{}, act::Swish{1.702f}, act::Square{})).to_string(),
            "swish,swish(1.702),square");
}

// tests/spec_grammar.tsv's spec column: \t \n \v \f \r \\ and \xNN stand for the byte.
std::string unescaped(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    const char c = field[++i];
    if (c == 'x') {
      out += char(std::stoi(field.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      const std::string from = "tnvfr\\", to = "\t\n\v\f\r\\";
      out += to.at(from.find(c));
    }
  }
  return out;
}

struct GrammarCase {
  int line = 0;
  std::vector<std::string> columns;  // the spec (unescaped), then its canonical form or "refused"
};

// The cases of tests/spec_grammar.tsv, the grammar's test shared with weights/fx_chain.py's.
std::vector<GrammarCase> grammar_cases() {
  const std::string path = std::string(FUSEDLINEAR_SOURCE_DIR) + "/tests/spec_grammar.tsv";
  std::istringstream in(testing_support::read_file(path));
  std::vector<GrammarCase> cases;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    GrammarCase c;
    c.line = number;
    std::istringstream columns(line);
    for (std::string column; std::getline(columns, column, '\t');) c.columns.push_back(column);
    c.columns.at(0) = unescaped(c.columns.at(0));
    cases.push_back(c);
  }
  return cases;
}

// A chain or layered spec's canonical form, as the program reads a --chain, or "refused: " and
// the message.
std::string canonical_or_message(const std::string& spec) {
  try {
    return is_layered_spec(spec) ? parse_model_spec(spec).to_string()
                                 : parse_chain(spec).to_string();
  } catch (const ChainSpecError& e) {
    return std::string("refused: ") + e.what();
  }
}

bool printable_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// Each case of the table: the canonical form, which reads back as itself, or the refusal, one line
// of printable ASCII naming the character and holding the phrase.
TEST(ChainSpecs, GrammarTable) {
  const std::vector<GrammarCase> cases = grammar_cases();
  ASSERT_GT(cases.size(), 150u);
  for (const GrammarCase& c : cases) {
    SCOPED_TRACE("tests/spec_grammar.tsv:" + std::to_string(c.line));
    ASSERT_GE(c.columns.size(), 2u);
    const std::string& spec = c.columns[0];
    const std::string got = canonical_or_message(spec);
    if (c.columns[1] != "refused") {
      EXPECT_EQ(got, c.columns[1]);
      EXPECT_EQ(canonical_or_message(c.columns[1]), c.columns[1]);
      continue;
    }
    ASSERT_EQ(c.columns.size(), 4u);
    EXPECT_EQ(got.rfind("refused: ", 0), 0u) << got;
    EXPECT_NE(got.find("(at character " + c.columns[2] + ")"), std::string::npos) << got;
    EXPECT_NE(got.find(c.columns[3]), std::string::npos) << got;
    EXPECT_TRUE(printable_ascii(got)) << got;
  }
}

// --- a run-time chain as a declaration writes it (kernels/ops/chain_source.h) ------------------

// A C++ string literal of chain_expression's (printable ASCII, octal escapes) as its bytes.
std::string string_literal_bytes(const std::string& literal) {
  std::string out;
  for (size_t i = 1; i + 1 < literal.size(); ++i) {
    if (literal[i] == '\\') {
      out += char(std::stoi(literal.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += literal[i];
    }
  }
  return out;
}

// chain_expression read back: each functor's type, its arguments (hexadecimal literals or
// INFINITY, as strtof reads them) and its parameter's key, against the chain's own.
void expect_expression_is_the_chain(const std::string& expression, const ParsedChain& chain) {
  static const std::map<std::string, int> code_of = {
#define FUSEDLINEAR_CODE(F) {#F, act::op_code_of<act::F>()},
      FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_CODE)
#undef FUSEDLINEAR_CODE
  };
  ASSERT_EQ(expression.rfind("act::Chain(", 0), 0u) << expression;
  ASSERT_EQ(expression.back(), ')') << expression;
  const std::regex functor("act::(\\w+)\\{([^}]*)\\}(, |\\)$)");
  size_t index = 0;
  auto it = std::sregex_iterator(expression.begin() + 11, expression.end(), functor);
  for (; it != std::sregex_iterator(); ++it, ++index) {
    ASSERT_LT(index, chain.ops.size()) << expression;
    const ChainOp& op = chain.ops[index];
    const std::string name = (*it)[1], body = (*it)[2];
    ASSERT_TRUE(code_of.count(name)) << name;
    EXPECT_EQ(code_of.at(name), op.op->code) << expression;
    if (op.op->takes_param) {
      EXPECT_EQ(string_literal_bytes(body), op.param) << expression;
      continue;
    }
    std::vector<float> args;
    const char* at = body.c_str();
    while (*at) {
      char* end = nullptr;
      args.push_back(std::strtof(at, &end));
      ASSERT_NE(end, at) << body;
      at = end;
      if (*at == 'f') ++at;  // a literal's suffix (INFINITY has none)
      if (*at == ',') at += 2;
    }
    ASSERT_EQ(args.size(), op.op->args.size()) << expression;
    for (size_t a = 0; a < args.size(); ++a) {
      EXPECT_EQ(std::memcmp(&args[a], &op.args[a], sizeof(float)), 0) << expression;
    }
  }
  EXPECT_EQ(index, chain.ops.size()) << expression;
}

// Every chain of the grammar table, and the declarations' chains, written as a declaration writes
// them: the same functors, their arguments bitwise, their keys byte for byte.
TEST(ChainSpecs, WrittenAsADeclarationForNvrtc) {
  int chains = 0;
  for (const GrammarCase& c : grammar_cases()) {
    if (c.columns.at(1) == "refused" || is_layered_spec(c.columns[0])) continue;
    SCOPED_TRACE("tests/spec_grammar.tsv:" + std::to_string(c.line));
    const ParsedChain chain = parse_chain(c.columns[0]);
    expect_expression_is_the_chain(chain_expression(chain), chain);
    ++chains;
  }
  EXPECT_GT(chains, 40);
  EXPECT_EQ(chain_expression(chain_of(SwishChainModel::kChain)),
            "act::Chain(act::AddParam{\"add_value\"}, act::Swish{0x1p+0f}, act::Tanh{}, "
            "act::Gelu{}, act::Hardtanh{-0x1p+0f, 0x1p+0f})");
  // A key is written byte for byte whatever it holds (a file's state-dict keys are any text).
  ParsedChain odd = parse_chain("clamp(max=1e-3),gelu(tanh),mul(w)");
  odd.ops[2].param = "w.\"q\\\x01";
  EXPECT_EQ(chain_expression(odd),
            "act::Chain(act::Clamp{-INFINITY, 0x1.0624dep-10f}, act::GeluTanh{}, "
            "act::MulParam{\"w.\\042q\\134\\001\"})");
  EXPECT_EQ(chain_expression(parse_chain_or_empty("")), "act::Chain()");
  for (const OpInfo& op : vocabulary()) {
    // Its arguments other than the defaults (a parameter, gelu's choice, numbers).
    std::string args = op.takes_param ? "p" : op.choice;
    for (size_t a = 0; a < op.args.size(); ++a) args += a == 0 ? "0.75" : ",1.5";
    const ParsedChain chain = parse_chain(args.empty() ? op.name : op.name + "(" + args + ")");
    expect_expression_is_the_chain(chain_expression(chain), chain);
  }
}

#ifdef FUSEDLINEAR_TEST_NVRTC
// Every chain of the grammar table as a declaration NVRTC compiles (its chain for each result
// precision, as the kernels take it): one translation unit for all.
TEST(ChainSpecs, WrittenAsADeclarationNvrtcCompiles) {
  if (cuda::jit::cuda_include_directory().empty()) {
    GTEST_SKIP() << "the CUDA Toolkit's headers are not on this machine (set CUDA_HOME)";
  }
  cuda::jit::NvrtcRequest request;
  request.architecture = "sm_90a";
  request.source = "#include \"kernels/cuda/jit/compiled_chain.cuh\"\nnamespace fusedlinear {\n";
  int index = 0;
  for (const GrammarCase& c : grammar_cases()) {
    if (c.columns.at(1) == "refused" || is_layered_spec(c.columns[0])) continue;
    act::Program program;
    try {
      program = program_of(parse_chain(c.columns[0]));
    } catch (const ChainSpecError&) {
      continue;  // past the run-time chains' limits: never compiled
    }
    const std::string name = "Declaration" + std::to_string(index++);
    request.source += "struct " + name +
                      " : CompiledRuntimeChain {\n  static constexpr auto kChain = " +
                      chain_expression(parse_chain(c.columns[0])) + ";\n};\n";
    // The compiled chain takes the Half forms where its op list does (model.h).
    request.source += "static_assert(act::kHalfFormsHold<std::decay_t<decltype(" + name +
                      "::kChain)>> == " + (act::half_forms_hold(program) ? "true" : "false") +
                      ");\n";
    for (const char* precision : {"kFloat32", "kHalf"}) {
      request.source +=
          "static_assert(DeviceChain<" + name + ", act::ResultPrecision::" + precision +
          ">::kTerms == " + std::to_string(parse_chain(c.columns[0]).slot_params().size()) + ");\n";
    }
  }
  request.source += "}  // namespace fusedlinear\n";
  cuda::jit::CompiledModule module;
  std::string error;
  EXPECT_TRUE(cuda::jit::compile_with_nvrtc(request, module, error)) << error;
}
#endif

// A long spec shows in a message only around the error, with the error's place counted in the
// whole spec.
TEST(ChainSpecs, MessagesShowALongSpecAroundTheError) {
  std::string spec;
  for (int i = 0; i < 10000; ++i) spec += "relu,";
  const std::string chain = canonical_or_message(spec + "mesh,relu");
  EXPECT_LT(chain.size(), 400u) << chain;
  EXPECT_NE(chain.find("chain '...relu,relu,relu,relu,relu,relu,relu,relu,mesh,relu'"),
            std::string::npos)
      << chain;
  EXPECT_NE(chain.find("unknown op 'mesh'"), std::string::npos) << chain;
  EXPECT_NE(chain.find("(at character 50001)"), std::string::npos) << chain;
  const std::string key(50000, 'k');
  const std::string middle = canonical_or_message(spec + "clamp(" + key + ")," + spec);
  EXPECT_LT(middle.size(), 400u) << middle;
  EXPECT_NE(middle.find("relu,clamp(" + key.substr(0, 40) + "...'"), std::string::npos) << middle;
  EXPECT_NE(middle.find("clamp's min is a number, not '" + key.substr(0, 40) + "...'"),
            std::string::npos)
      << middle;
  const std::string layered = canonical_or_message("fc1:" + spec + "relu|fc1");
  EXPECT_LT(layered.size(), 400u) << layered;
  EXPECT_NE(layered.find("relu,relu|fc1': expected a Linear used once; 'fc1' comes twice (at "
                         "character 50010)"),
            std::string::npos)
      << layered;
}

// What the interpreter cannot take.
TEST(ChainSpecs, RefusedByTheInterpreter) {
  std::string many = "relu";
  for (int i = 0; i < act::kMaxProgramOps; ++i) many += ",relu";
  EXPECT_NE(message_of<ChainSpecError>([&] { program_of(parse_chain(many)); }).find("at most 16"),
            std::string::npos);
  // However long the chain, the message shows its start, as a parse error shows the spec.
  for (int i = 0; i < 2000; ++i) many += ",relu";
  const std::string long_message =
      message_of<ChainSpecError>([&] { program_of(parse_chain(many)); });
  EXPECT_EQ(long_message,
            "chain 'relu,relu,relu,relu,relu,relu,relu,relu,...': 2017 ops; a run-time chain "
            "takes at most 16");
  EXPECT_NE(message_of<ChainSpecError>([&] {
              program_of(parse_chain("add(a),add(b),add(c),add(d),add(e)"));
            }).find("more than 4 parameter terms"),
            std::string::npos);
}

// The command line's tolerances and the specs read numbers by one rule.
TEST(ChainSpecs, NumbersAreDecimal) {
  for (const char* good :
       {"1", "-2", "+0.5", ".5", "5.", "1e-3", "2.5E+7", "inf", "-inf", "+inf"}) {
    EXPECT_TRUE(is_spec_number(good)) << good;
  }
  for (const char* bad : {"", "0x10", "0x1p3", "-Infinity", "+INF", "INF", "nan", "1_000", "1e",
                          ".", "-", " 1", "1 ", "1e5x", "1.2.3", "--1"}) {
    EXPECT_FALSE(is_spec_number(bad)) << bad;
  }
}

TEST(ChainSpecs, ProgramsNumberTheSlots) {
  const act::Program program =
      program_of(parse_chain("add(a),sigmoid,gelu,mul(b),leaky_relu(0.5)"));
  ASSERT_EQ(program.count, 5);
  EXPECT_EQ(program.terms, 2);
  EXPECT_EQ(program.ops[0].code, act::OpCode::kAddParam);
  EXPECT_EQ(program.ops[0].slot, 0);
  EXPECT_EQ(program.ops[2].code, act::OpCode::kGeluOnUnitInterval);  // after sigmoid
  EXPECT_EQ(program.ops[3].slot, 1);
  EXPECT_EQ(program.ops[4].args[0], 0.5f);
  // swish's beta travels in the op's arguments; square is an op of its own.
  const act::Program quick = program_of(parse_chain("swish(1.702),square,swish"));
  ASSERT_EQ(quick.count, 3);
  EXPECT_EQ(quick.ops[0].code, act::OpCode::kSwish);
  EXPECT_EQ(quick.ops[0].args[0], 1.702f);
  EXPECT_EQ(quick.ops[1].code, act::OpCode::kSquare);
  EXPECT_EQ(quick.ops[2].args[0], 1.0f);
  // A spec is kept once found, under its text and its canonical form.
  const std::string spaced = "leaky_relu( 0.5 )", canonical = "leaky_relu(0.5)";
  const ChainEntry* a = &find_chain(spaced);
  EXPECT_EQ(a, &find_chain(canonical));
  EXPECT_FALSE(a->compiled);
  EXPECT_TRUE(find_chain("mish_mish").compiled);
}

// A spec of 1 to 8 ops drawn from the vocabulary, arguments drawn in range, parameters named
// p0... (a parameter may be used twice).
std::string random_spec(std::mt19937& rng) {
  const std::vector<std::string> ops = {
      "relu",       "relu6",       "leaky_relu", "elu",      "selu",     "celu",       "gelu",
      "gelu(tanh)", "silu",        "swish",      "mish",     "sigmoid",  "tanh",       "hardtanh",
      "clamp",      "hardsigmoid", "hardswish",  "softplus", "softsign", "tanhshrink", "logsigmoid",
      "square",     "add",         "sub",        "mul",      "div"};
  std::uniform_int_distribution<int> count(1, 8), pick(0, int(ops.size()) - 1), param(0, 2);
  std::uniform_real_distribution<float> slope(0.01f, 0.5f), alpha(0.25f, 2.0f), lo(-3.0f, 0.0f),
      width(0.5f, 4.0f), scalar(0.5f, 2.0f), coin(0, 1), beta(-2.0f, 2.0f);
  const auto number = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", double(v));
    return std::string(b);
  };
  std::string spec;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    const std::string op = ops[size_t(pick(rng))];
    std::string text = op;
    if (op == "leaky_relu") text += "(" + number(slope(rng)) + ")";
    if (op == "elu" || op == "celu") text += "(" + number(alpha(rng)) + ")";
    // swish: beta 1 (written bare) or, half the time, drawn from [-2, 2].
    if (op == "swish" && coin(rng) < 0.5f) text += "(" + number(beta(rng)) + ")";
    if (op == "hardtanh" || op == "clamp") {
      const float a = lo(rng);
      text += "(" + number(a) + "," + number(a + width(rng)) + ")";
    }
    if (op == "softplus") text += "(" + number(alpha(rng)) + "," + number(5 + 15 * coin(rng)) + ")";
    if (op == "add" || op == "sub" || op == "mul" || op == "div") {
      text += coin(rng) < 0.5f ? "(p" + std::to_string(param(rng)) + ")"
                               : "(" + number(scalar(rng)) + ")";
    }
    spec += (spec.empty() ? "" : ",") + text;
  }
  return spec;
}

// Each random spec's fused chain against the eager chain of the same spec and against float64, in
// float32 (float16 and bfloat16 against float64 at their rounding, every `half_every`th spec),
// with per-feature and one-element parameters drawn away from zero.
void check_random_specs(const torch::Device& device, int half_every = 1) {
  torch::NoGradGuard no_grad;
  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    const std::string spec = random_spec(rng);
    const ParsedChain chain = parse_chain(spec);
    ModelSpec model = runtime_model(spec);
    for (const std::string& key : chain.params()) {
      if (key == "p2") model.param_shapes[key] = {};  // one value for every column
    }
    auto m = make_model(model, 3, 37, uint64_t(i));
    for (const std::string& key : chain.params()) {
      m->param(key).copy_(m->param(key).abs() + 0.5);  // away from zero: div's parameter
    }
    m->to(device);
    const torch::Tensor y = (torch::randn({9, 37}) * 3).to(device);
    const torch::Tensor fused = m->chain_fused(y, c10::nullopt);
    const torch::Tensor eager = m->chain_eager(y);
    EXPECT_TRUE(torch::allclose(fused, eager, 1e-5, 1e-5, /*equal_nan=*/true))
        << spec << " on " << device << ": max abs diff "
        << (fused - eager).abs().nan_to_num(0).max().item<double>();
    const torch::Tensor reference = reference_chain(m->chain(), y.cpu(), m->slot_params());
    const torch::Tensor error = (fused.cpu().to(torch::kFloat64) - reference).abs().nan_to_num(0);
    EXPECT_LE((error / reference.abs().clamp_min(1.0)).max().item<double>(), 1e-5)
        << spec << " on " << device << " against float64";
    if (i % half_every != 0) continue;
    for (const auto dtype : {torch::kFloat16, torch::kBFloat16}) {
      m->to(device, dtype);
      const torch::Tensor half = m->chain_fused(y.to(dtype), c10::nullopt).cpu();
      const torch::Tensor want = reference_chain(m->chain(), y.to(dtype).cpu(), m->slot_params());
      const double ulp = dtype == torch::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
      // Where the value is past float16's range, the fused result is inf, as it must be.
      const torch::Tensor in_range = want.abs() < 6e4;
      const torch::Tensor off =
          torch::where(in_range, (half.to(torch::kFloat64) - want).abs(), torch::zeros_like(want))
              .nan_to_num(0) /
          (want.abs().clamp_min(1e-3) * ulp);
      EXPECT_LE(off.max().item<double>(), 1.0) << spec << " " << dtype << " on " << device;
      m->to(device, torch::kFloat32);
    }
  }
}

TEST(ChainSpecs, RandomSpecsMatchEagerOnEveryCpuLoop) {
  const cpu::RestoreCapability restore;
  for (const auto capability : cpu::supported_capabilities()) {
    SCOPED_TRACE(cpu::capability_name(capability));
    cpu::set_capability(capability);
    check_random_specs(torch::kCPU);
  }
}

// The interpreter's kernels: compiling off before the first spec is met (each spec compiled
// would take the test from seconds to many minutes; the next test compiles them).
TEST(ChainSpecs, RandomSpecsMatchEagerOnCudaByTheInterpreter) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
  ::setenv("FUSEDLINEAR_JIT", "0", 1);
  check_random_specs(torch::kCUDA);
}

// The same specs compiled by NVRTC (compiling on before the first spec is met): every spec's
// float32 epilogue, and every tenth spec's 16-bit ones; kernels were compiled (or read from the
// disk cache) and none failed, so the interpreter ran none of them.
TEST(ChainSpecs, RandomSpecsMatchEagerOnCudaCompiled) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA tests skipped";
#ifndef FUSEDLINEAR_WITH_JIT
  GTEST_SKIP() << "this build has no CUDA kernels compiled at run time (no CUDA or no NVRTC)";
#else
  ::setenv("FUSEDLINEAR_JIT", "1", 1);
  check_random_specs(torch::kCUDA, 10);
  const cuda::jit::CompileCounts counts = cuda::jit::compile_counts();
  EXPECT_EQ(counts.failed, 0);
  EXPECT_GT(counts.compiled + counts.read_from_disk, 0);
#endif
}

}  // namespace
}  // namespace fusedlinear
