// Chain specs parsed and printed, and what a chain gives on the host (chain_spec.h).
#include "kernels/ops/chain_spec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace fusedlinear {
namespace {

// The canonical number (docs/CHAINS.md): the fewest digits that read back to the same float, in
// fixed notation for 1e-4 <= |x| < 1e16, else scientific with no '+' and no leading zeros in the
// exponent ("0.2", "-2", "100000", "1e-5", "3.4028235e38", "inf", "-0").
std::string format_number(float value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const float magnitude = std::fabs(value);
  const bool fixed = magnitude == 0 || (magnitude >= 1e-4f && magnitude < 1e16f);
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value,
                    fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string text(buffer, result.ptr);
  const size_t e = text.find('e');
  if (e != std::string::npos) {
    std::string exponent = text.substr(e + 1);
    const bool negative = !exponent.empty() && exponent[0] == '-';
    if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) exponent.erase(0, 1);
    exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
    text = text.substr(0, e) + "e" + (negative ? "-" : "") + exponent;
  }
  return text;
}

// The spec's tokens: names and numbers, and the punctuation ( ) , =.
struct Token {
  enum Kind { kWord, kNumber, kPunct, kEnd } kind = kEnd;
  std::string text;
  size_t at = 0;  // where it starts in the spec, for messages
};

class Lexer {
 public:
  explicit Lexer(const std::string& spec) : spec_(spec) { advance(); }
  const Token& peek() const { return token_; }
  Token take() {
    Token t = token_;
    advance();
    return t;
  }

 private:
  void advance() {
    while (at_ < spec_.size() && std::isspace(static_cast<unsigned char>(spec_[at_]))) ++at_;
    token_ = Token{};
    token_.at = at_;
    if (at_ == spec_.size()) return;
    const char c = spec_[at_];
    const auto is_word_char = [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
    };
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = at_;
      while (end < spec_.size() && is_word_char(spec_[end])) ++end;
      token_.kind = Token::kWord;
      token_.text = spec_.substr(at_, end - at_);
      at_ = end;
      // inf is a number, not a name.
      if (token_.text == "inf") token_.kind = Token::kNumber;
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') {
      size_t end = at_ + 1;
      while (end < spec_.size() &&
             (std::isalnum(static_cast<unsigned char>(spec_[end])) || spec_[end] == '.' ||
              ((spec_[end] == '-' || spec_[end] == '+') &&
               (spec_[end - 1] == 'e' || spec_[end - 1] == 'E')))) {
        ++end;
      }
      token_.kind = Token::kNumber;
      token_.text = spec_.substr(at_, end - at_);
      at_ = end;
      return;
    }
    token_.kind = Token::kPunct;
    token_.text = std::string(1, c);
    ++at_;
  }

  const std::string& spec_;
  size_t at_ = 0;
  Token token_;
};

struct RawArg {
  std::string key;  // empty when positional
  Token value;
};

class Parser {
 public:
  explicit Parser(const std::string& spec) : spec_(spec), lexer_(spec) {}

  ParsedChain parse() {
    ParsedChain chain;
    if (lexer_.peek().kind == Token::kEnd)
      fail(lexer_.peek(), "an op (the vocabulary: " + vocabulary_names() + ")");
    while (true) {
      chain.ops.push_back(parse_op());
      const Token next = lexer_.take();
      if (next.kind == Token::kEnd) break;
      if (next.text != ",") fail(next, "',' between ops or the end of the spec");
    }
    return chain;
  }

 private:
  [[noreturn]] void fail(const Token& at, const std::string& expected) const {
    const std::string got = at.kind == Token::kEnd ? "the end" : "'" + at.text + "'";
    throw ChainSpecError("chain '" + spec_ + "': expected " + expected + ", got " + got +
                         " at character " + std::to_string(at.at + 1));
  }
  [[noreturn]] void fail_op(const Token& at, const std::string& what) const {
    throw ChainSpecError("chain '" + spec_ + "': " + what + " (at character " +
                         std::to_string(at.at + 1) + ")");
  }

  float number(const Token& t, const std::string& op, const std::string& arg) const {
    if (t.kind != Token::kNumber) fail(t, "a number for " + op + "'s " + arg);
    char* end = nullptr;
    const float value = std::strtof(t.text.c_str(), &end);
    if (t.text.empty() || *end != '\0' || std::isnan(value)) {
      fail(t, "a number for " + op + "'s " + arg);
    }
    return value;
  }

  std::vector<RawArg> parse_args() {
    std::vector<RawArg> args;
    if (lexer_.peek().text != "(" || lexer_.peek().kind != Token::kPunct) return args;
    lexer_.take();
    while (true) {
      RawArg arg;
      Token t = lexer_.take();
      if (t.kind == Token::kWord && lexer_.peek().text == "=") {
        lexer_.take();
        arg.key = t.text;
        t = lexer_.take();
      }
      if (t.kind != Token::kWord && t.kind != Token::kNumber) fail(t, "an argument");
      arg.value = t;
      args.push_back(arg);
      const Token next = lexer_.take();
      if (next.text == ")") break;
      if (next.text != ",") fail(next, "',' or ')' after an argument");
    }
    return args;
  }

  ChainOp parse_op() {
    const Token name = lexer_.take();
    if (name.kind != Token::kWord) fail(name, "an op (the vocabulary: " + vocabulary_names() + ")");
    std::vector<const OpInfo*> candidates;
    for (const OpInfo& info : vocabulary()) {
      if (info.name == name.text) candidates.push_back(&info);
    }
    if (candidates.empty()) {
      fail_op(name, "unknown op '" + name.text + "' (the vocabulary: " + vocabulary_names() + ")");
    }
    const std::vector<RawArg> args = parse_args();
    const OpInfo& first = *candidates.front();
    ChainOp op;
    if (!first.choice.empty() || candidates.size() > 1) {
      // gelu, or an arithmetic op: the argument picks the entry.
      if (first.name == "gelu") return parse_gelu(name, args, candidates);
      return parse_arithmetic(name, args, candidates);
    }
    op.op = &first;
    return with_args(op, name, args);
  }

  ChainOp parse_gelu(const Token& name, const std::vector<RawArg>& args,
                     const std::vector<const OpInfo*>& candidates) {
    std::string choice = "none";
    if (args.size() > 1) fail_op(name, "gelu takes one argument, approximate = none or tanh");
    if (args.size() == 1) {
      const RawArg& arg = args.front();
      if (!arg.key.empty() && arg.key != "approximate") {
        fail_op(arg.value, "gelu has no argument '" + arg.key + "' (approximate = none or tanh)");
      }
      choice = arg.value.text;
      if (choice.size() > 2 && (choice.front() == '\'' || choice.front() == '"')) {
        choice = choice.substr(1, choice.size() - 2);
      }
    }
    for (const OpInfo* info : candidates) {
      if (info->choice == (choice == "none" ? "" : choice)) {
        ChainOp op;
        op.op = info;
        return op;
      }
    }
    fail_op(args.front().value, "gelu's approximate is none or tanh, got '" + choice + "'");
  }

  ChainOp parse_arithmetic(const Token& name, const std::vector<RawArg>& args,
                           const std::vector<const OpInfo*>& candidates) {
    if (args.size() != 1 || !args.front().key.empty()) {
      fail_op(name, name.text + " takes one argument: a number, or a parameter's state-dict key");
    }
    const Token& value = args.front().value;
    const bool is_param = value.kind == Token::kWord;
    for (const OpInfo* info : candidates) {
      if (info->takes_param == is_param) {
        ChainOp op;
        op.op = info;
        if (is_param) {
          op.param = value.text;
        } else {
          op.args[0] = number(value, name.text, "value");
        }
        return op;
      }
    }
    fail_op(name, "no form of " + name.text + " takes '" + value.text + "'");
  }

  ChainOp with_args(ChainOp op, const Token& name, const std::vector<RawArg>& args) {
    const std::vector<act::Arg>& expected = op.op->args;
    std::string names;
    for (const act::Arg& a : expected) names += (names.empty() ? "" : ", ") + std::string(a.name);
    const std::string takes =
        expected.empty() ? name.text + " takes no arguments"
                         : name.text + " takes " + std::to_string(expected.size()) + " argument" +
                               (expected.size() == 1 ? "" : "s") + " (" + names + ")";
    if (args.size() > expected.size()) {
      fail_op(name, takes + ", got " + std::to_string(args.size()) + " argument" +
                        (args.size() == 1 ? "" : "s"));
    }
    std::vector<std::optional<float>> values(expected.size());
    bool keywords = false;
    for (size_t i = 0; i < args.size(); ++i) {
      size_t slot = i;
      if (!args[i].key.empty()) {
        keywords = true;
        slot = expected.size();
        for (size_t j = 0; j < expected.size(); ++j) {
          if (args[i].key == expected[j].name) slot = j;
        }
        if (slot == expected.size()) fail_op(args[i].value, takes + ", not '" + args[i].key + "'");
      } else if (keywords) {
        fail_op(args[i].value, "a positional argument after a keyword one");
      }
      if (values[slot])
        fail_op(args[i].value, name.text + "'s " + expected[slot].name + " given twice");
      values[slot] = number(args[i].value, name.text, expected[slot].name);
    }
    for (size_t j = 0; j < expected.size(); ++j) {
      if (!values[j] && expected[j].required) {
        fail_op(name, name.text + " needs " + expected[j].name + " (" + takes + ")");
      }
      op.args[j] = values[j] ? *values[j] : expected[j].default_value;
    }
    return op;
  }

  const std::string& spec_;
  Lexer lexer_;
};

}  // namespace

const std::vector<OpInfo>& vocabulary() {
  static const std::vector<OpInfo> ops = {
#define FUSEDLINEAR_OP_INFO(F) op_info_of<act::F>(),
      FUSEDLINEAR_VOCABULARY(FUSEDLINEAR_OP_INFO)
#undef FUSEDLINEAR_OP_INFO
  };
  return ops;
}

std::string vocabulary_names() {
  std::vector<std::string> names;
  for (const OpInfo& info : vocabulary()) {
    const std::string name = info.choice.empty() ? info.name : info.name + "(" + info.choice + ")";
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

ParsedChain parse_chain(const std::string& spec) { return Parser(spec).parse(); }

ParsedChain parse_chain_or_empty(const std::string& spec) {
  return spec.empty() ? ParsedChain{} : parse_chain(spec);
}

std::vector<std::string> ParsedChain::slot_params() const {
  std::vector<std::string> keys;
  for (const ChainOp& op : ops) {
    if (op.op->takes_param) keys.push_back(op.param);
  }
  return keys;
}

std::vector<std::string> ParsedChain::params() const {
  std::vector<std::string> keys;
  for (const std::string& key : slot_params()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

namespace {

// Whether each of an op's arguments is its default (NaN cannot be written, so == is exact).
bool all_default(const float* values, const std::vector<act::Arg>& args) {
  for (size_t j = 0; j < args.size(); ++j) {
    if (values[j] != args[j].default_value) return false;
  }
  return true;
}

}  // namespace

std::string ParsedChain::to_string() const {
  std::string spec;
  for (const ChainOp& op : ops) {
    std::string text = op.op->name;
    if (!op.op->choice.empty()) {
      text += "(" + op.op->choice + ")";
    } else if (op.op->takes_param) {
      text += "(" + op.param + ")";
    } else if (!op.op->args.empty() &&
               !(op.op->args_written_when_not_default && all_default(op.args, op.op->args))) {
      text += "(";
      for (size_t j = 0; j < op.op->args.size(); ++j) {
        text += (j ? "," : "") + format_number(op.args[j]);
      }
      text += ")";
    }
    spec += (spec.empty() ? "" : ",") + text;
  }
  return spec;
}

std::string ParsedChain::description() const {
  std::string text = "Linear";
  if (ops.empty()) return text;
  const std::string spec = to_string();
  size_t depth = 0, start = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size() && spec[i] == '(') ++depth;
    if (i < spec.size() && spec[i] == ')') --depth;
    if (i == spec.size() || (spec[i] == ',' && depth == 0)) {
      text += " -> " + spec.substr(start, i - start);
      start = i + 1;
    }
  }
  return text;
}

act::Program program_of(const ParsedChain& chain) {
  act::Program program;
  const OpInfo* previous = nullptr;
  for (const ChainOp& op : chain.ops) {
    const act::AppendError error = act::append_op(program, op.op->code, op.args, op.op->takes_param,
                                                  previous && previous->output_in_unit_interval);
    const std::string what = "chain '" + chain.to_string() + "': ";
    switch (error) {
      case act::AppendError::kNone:
        break;
      case act::AppendError::kNotInVocabulary:
        throw ChainSpecError(what + "op '" + op.op->name +
                             "' is not in the vocabulary: it runs in compiled chains only");
      case act::AppendError::kTooManyOps:
        throw ChainSpecError(what + std::to_string(chain.ops.size()) +
                             " ops; a run-time chain takes at most " +
                             std::to_string(act::kMaxProgramOps));
      case act::AppendError::kTooManyTerms:
        throw ChainSpecError(what + "more than " + std::to_string(act::kMaxColumnTerms) +
                             " parameter terms");
    }
    previous = op.op;
  }
  return act::without_identity_clamps(program);
}

torch::Tensor eager_chain(const ParsedChain& chain, torch::Tensor x,
                          const std::vector<torch::Tensor>& slot_params) {
  size_t slot = 0;
  for (const ChainOp& op : chain.ops) {
    const torch::Tensor term = op.op->takes_param ? slot_params.at(slot++) : torch::Tensor();
    x = op.op->eager(op.args, x, term);
  }
  return x;
}

torch::Tensor reference_chain(const ParsedChain& chain, const torch::Tensor& y,
                              const std::vector<torch::Tensor>& slot_params) {
  const torch::Tensor in = y.to(torch::kFloat64).contiguous();
  torch::Tensor out = torch::empty_like(in);
  const int64_t numel = in.numel();
  if (numel == 0) return out;
  const int64_t cols = in.size(-1);
  std::vector<torch::Tensor> terms;
  std::vector<const double*> term_data;
  std::vector<bool> broadcast;
  for (const torch::Tensor& p : slot_params) {
    terms.push_back(p.to(torch::kCPU, torch::kFloat64).contiguous().view(-1));
    term_data.push_back(terms.back().data_ptr<double>());
    broadcast.push_back(terms.back().numel() == 1);
  }
  const double* y_data = in.data_ptr<double>();
  double* out_data = out.data_ptr<double>();
  at::parallel_for(0, numel, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t col = i % cols;
      double v = y_data[i];
      size_t slot = 0;
      for (const ChainOp& op : chain.ops) {
        double term = 0;
        if (op.op->takes_param) {
          term = term_data[slot][broadcast[slot] ? 0 : col];
          ++slot;
        }
        v = op.op->reference(op.args, v, term);
      }
      out_data[i] = v;
    }
  });
  return out;
}

}  // namespace fusedlinear
