// Chain specs parsed and printed, and what a chain gives on the host (chain_spec.h).
#include "kernels/ops/chain_spec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fusedlinear {
namespace {

// ASCII space, \t, \n, \v, \f and \r whatever the locale, as weights/fx_chain.py reads them.
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The canonical number (docs/CHAINS.md): the fewest digits that read back to the same float, in
// fixed notation for 1e-4 <= |x| < 1e16, else scientific with no '+' and no leading zeros in the
// exponent ("0.2", "-2", "100000", "1e-5", "3.4028235e38", "inf", "-0"). The digits are laid out
// here: to_chars' fixed notation writes every digit of a large float (1e15 as 999999986991104).
std::string format_number(float value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0" : "0";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string text(buffer, result.ptr);  // "-1.25e+07"
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (is_digit(text[i])) digits += text[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const std::string sign = value < 0 ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    return sign + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" +
           std::to_string(exponent);
  }
  if (exponent < 0) return sign + "0." + std::string(size_t(-exponent - 1), '0') + digits;
  const size_t whole = size_t(exponent) + 1;
  if (digits.size() <= whole) return sign + digits + std::string(whole - digits.size(), '0');
  return sign + digits.substr(0, whole) + "." + digits.substr(whole);
}

bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_word_char(char c) { return is_letter(c) || is_digit(c) || c == '.'; }

// The bytes of `text` for a message: printable ASCII as is, the rest escaped.
std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", unsigned(byte));
      out += hex;
    }
  }
  return out;
}

// A token or a path quoted in a message: its first 40 bytes, "..." when there are more.
std::string shown_token(const std::string& text) {
  constexpr size_t kShown = 40;
  return "'" + escaped(text.substr(0, kShown)) + (text.size() > kShown ? "..." : "") + "'";
}

// The spec's tokens: identifiers, numbers, and the punctuation ( ) , =.
struct Token {
  enum Kind { kWord, kNumber, kPunct, kEnd } kind = kEnd;
  std::string text;
  size_t at = 0;  // where it starts in the spec, for messages
};

std::string describe(const Token& t) {
  return t.kind == Token::kEnd ? "the end" : shown_token(t.text);
}

struct RawArg {
  std::string key;  // empty when positional
  size_t at = 0;    // where the argument starts: its key, or its value
  Token value;
};

class Parser {
 public:
  explicit Parser(const std::string& spec) : spec_(spec) {}

  ParsedChain parse() {
    // The whole spec is read as tokens first, so that a character no token takes is the error
    // wherever it is, as weights/fx_chain.py reads it.
    tokenize();
    ParsedChain chain;
    while (true) {
      chain.ops.push_back(parse_op());
      const Token& next = take();
      if (next.kind == Token::kEnd) break;
      if (next.text != ",") {
        fail(next.at, "expected ',' between ops or the end of the spec, got " + describe(next));
      }
    }
    return chain;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw ChainSpecError("chain " + spec_excerpt(spec_, at) + ": " + what + " (at character " +
                         std::to_string(at + 1) + ")");
  }

  void tokenize() {
    size_t at = 0;
    while (true) {
      while (at < spec_.size() && is_space(spec_[at])) ++at;
      Token token;
      token.at = at;
      if (at == spec_.size()) break;
      const char c = spec_[at];
      size_t end = at + 1;
      if (is_letter(c)) {
        while (end < spec_.size() && is_word_char(spec_[end])) ++end;
        token.text = spec_.substr(at, end - at);
        // A key's parts between dots are a state dict's names, never empty.
        if (!is_attribute_path(token.text)) {
          fail(at, shown_token(token.text) + " is no identifier: a part between dots is empty");
        }
        // inf is a number, never a key.
        token.kind = token.text == "inf" ? Token::kNumber : Token::kWord;
      } else if (is_digit(c) || c == '.' || c == '+' || c == '-') {
        // The run a number could span, so that "0x10" or "1e5x" is refused whole.
        while (end < spec_.size() &&
               (is_word_char(spec_[end]) || ((spec_[end] == '+' || spec_[end] == '-') &&
                                             (spec_[end - 1] == 'e' || spec_[end - 1] == 'E')))) {
          ++end;
        }
        token.text = spec_.substr(at, end - at);
        token.kind = Token::kNumber;
        if (!is_spec_number(token.text)) {
          fail(at, shown_token(token.text) + " is not a number (decimal: 2, -0.5, 1e-3, inf)");
        }
      } else if (c == '(' || c == ')' || c == ',' || c == '=') {
        token.text = std::string(1, c);
        token.kind = Token::kPunct;
      } else {
        fail(at, "unexpected character " + shown_token(std::string(1, c)));
      }
      tokens_.push_back(token);
      at = end;
    }
    Token end;
    end.at = spec_.size();
    tokens_.push_back(end);
  }

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(next_ + ahead, tokens_.size() - 1)];
  }
  const Token& take() {
    const Token& t = peek();
    if (next_ + 1 < tokens_.size()) ++next_;
    return t;
  }
  bool punct(const Token& t, char c) const { return t.kind == Token::kPunct && t.text[0] == c; }

  std::vector<RawArg> parse_args() {
    std::vector<RawArg> args;
    if (!punct(peek(), '(')) return args;
    take();
    while (true) {
      RawArg arg;
      arg.at = peek().at;
      if (peek().kind == Token::kWord && punct(peek(1), '=')) {
        arg.key = take().text;
        take();
        if (peek().kind != Token::kWord && peek().kind != Token::kNumber) {
          fail(peek().at, "expected a value after '" + arg.key + "=', got " + describe(peek()));
        }
      } else if (peek().kind != Token::kWord && peek().kind != Token::kNumber) {
        fail(peek().at, "expected an argument, got " + describe(peek()));
      }
      arg.value = take();
      args.push_back(arg);
      const Token& next = take();
      if (punct(next, ')')) break;
      if (!punct(next, ','))
        fail(next.at, "expected ',' or ')' after an argument, got " + describe(next));
    }
    return args;
  }

  float number(const Token& t, const std::string& op, const std::string& arg) const {
    if (t.kind != Token::kNumber)
      fail(t.at, op + "'s " + arg + " is a number, not " + shown_token(t.text));
    // The lexer took only the grammar's numbers; strtof rounds to nearest (1e40 is inf).
    return std::strtof(t.text.c_str(), nullptr);
  }

  ChainOp parse_op() {
    const Token name = take();
    if (name.kind != Token::kWord) {
      fail(name.at,
           "expected an op (the vocabulary: " + vocabulary_names() + "), got " + describe(name));
    }
    std::vector<const OpInfo*> candidates;
    for (const OpInfo& info : vocabulary()) {
      if (info.name == name.text) candidates.push_back(&info);
    }
    if (candidates.empty()) {
      fail(name.at, "unknown op " + shown_token(name.text) +
                        " (the vocabulary: " + vocabulary_names() + ")");
    }
    const std::vector<RawArg> args = parse_args();
    // gelu's entries differ by their approximation, add's (sub's, ...) by a number or a key: the
    // argument picks the entry, under the name PyTorch gives it.
    const bool gelu = name.text == "gelu";
    const bool arithmetic = !gelu && candidates.size() > 1;
    std::vector<std::string> names;
    if (gelu) {
      names = {"approximate"};
    } else if (arithmetic) {
      names = {"other"};
    } else {
      for (const act::Arg& a : candidates.front()->args) names.push_back(a.name);
    }
    const std::vector<const RawArg*> given = bind(name, names, args);
    if (gelu) return gelu_op(given[0], candidates);
    if (arithmetic) return arithmetic_op(name, given[0], candidates);
    ChainOp op;
    op.op = candidates.front();
    if (name.text == "clamp" && !given[0] && !given[1]) fail(name.at, "clamp needs min or max");
    for (size_t j = 0; j < names.size(); ++j) {
      op.args[j] =
          given[j] ? number(given[j]->value, name.text, names[j]) : op.op->args[j].default_value;
    }
    // PyTorch refuses a CELU of alpha 0 (it divides by alpha); so does the grammar.
    if (name.text == "celu" && op.args[0] == 0) {
      fail(given[0]->value.at, "celu's alpha cannot be 0 (PyTorch's CELU divides by it)");
    }
    return op;
  }

  // Each argument in its slot (by position, or by PyTorch's name), or a message naming what the
  // op takes.
  std::vector<const RawArg*> bind(const Token& name, const std::vector<std::string>& names,
                                  const std::vector<RawArg>& args) const {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string takes = names.empty() ? name.text + " takes no arguments"
                                            : name.text + " takes " + std::to_string(names.size()) +
                                                  " argument" + (names.size() == 1 ? "" : "s") +
                                                  " (" + list + ")";
    if (args.size() > names.size()) {
      fail(name.at, takes + ", got " + std::to_string(args.size()) + " argument" +
                        (args.size() == 1 ? "" : "s"));
    }
    std::vector<const RawArg*> given(std::max<size_t>(names.size(), 1), nullptr);
    bool keywords = false;
    for (size_t i = 0; i < args.size(); ++i) {
      size_t slot = i;
      if (!args[i].key.empty()) {
        keywords = true;
        slot = std::find(names.begin(), names.end(), args[i].key) - names.begin();
        if (slot == names.size()) fail(args[i].at, takes + ", not " + shown_token(args[i].key));
      } else if (keywords) {
        fail(args[i].at, "a positional argument after a keyword one");
      }
      if (given[slot]) fail(args[i].at, name.text + "'s " + names[slot] + " given twice");
      given[slot] = &args[i];
    }
    return given;
  }

  ChainOp gelu_op(const RawArg* arg, const std::vector<const OpInfo*>& candidates) const {
    // none and tanh are identifiers: a number is neither.
    const std::string choice = !arg ? "" : arg->value.text == "none" ? "" : arg->value.text;
    for (const OpInfo* info : candidates) {
      if (info->choice == choice && (!arg || arg->value.kind == Token::kWord)) {
        ChainOp op;
        op.op = info;
        return op;
      }
    }
    fail(arg->value.at, "gelu's approximate is none or tanh, not " + shown_token(arg->value.text));
  }

  ChainOp arithmetic_op(const Token& name, const RawArg* arg,
                        const std::vector<const OpInfo*>& candidates) const {
    if (!arg) fail(name.at, name.text + " needs other (a number or a parameter's state-dict key)");
    const bool is_param = arg->value.kind == Token::kWord;
    for (const OpInfo* info : candidates) {
      if (info->takes_param != is_param) continue;
      ChainOp op;
      op.op = info;
      if (is_param) {
        op.param = arg->value.text;
      } else {
        op.args[0] = number(arg->value, name.text, "other");
      }
      return op;
    }
    fail(name.at, "no form of " + name.text + " takes " + shown_token(arg->value.text));
  }

  const std::string& spec_;
  std::vector<Token> tokens_;
  size_t next_ = 0;
};

}  // namespace

bool is_spec_number(const std::string& text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  if (text.compare(i, std::string::npos, "inf") == 0) return true;
  const auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && is_digit(text[i])) ++i;
    return i - start;
  };
  size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

std::string spec_excerpt(const std::string& text, size_t at) {
  constexpr size_t kContext = 40;
  const size_t begin = at > kContext ? at - kContext : 0;
  const size_t end = std::min(text.size(), at + kContext);
  if (begin >= end) return "''";
  return "'" + std::string(begin > 0 ? "..." : "") + escaped(text.substr(begin, end - begin)) +
         (end < text.size() ? "..." : "") + "'";
}

bool is_attribute_path(const std::string& path) {
  if (path.empty() || path.front() == '.' || path.back() == '.') return false;
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (!(is_letter(c) || is_digit(c) || (c == '.' && path[i + 1] != '.'))) return false;
  }
  return true;
}

std::string spec_quoted(const std::string& text) { return "'" + escaped(text) + "'"; }

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
    // Excerpted as a parse error's spec is: a chain past the limits may be any length.
    const std::string what = "chain " + spec_excerpt(chain.to_string(), 0) + ": ";
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
