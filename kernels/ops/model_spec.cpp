// Model specs parsed and printed (model_spec.h).
#include "kernels/ops/model_spec.h"

#include <set>

#include "kernels/ops/chain_registry.h"

namespace fusedlinear {
namespace {

// The chain's whitespace: ASCII space, \t, \n, \v, \f and \r, whatever the locale.
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string trimmed(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

// A piece of the spec and where it starts (for messages).
struct Piece {
  std::string text;
  size_t at = 0;
};

// `piece` split at each `separator` (which no chain spec holds), each part trimmed.
std::vector<Piece> split(const Piece& piece, char separator) {
  std::vector<Piece> parts;
  size_t start = 0;
  while (true) {
    const size_t end = piece.text.find(separator, start);
    const std::string raw = piece.text.substr(start, end - start);
    size_t lead = 0;
    while (lead < raw.size() && is_space(raw[lead])) ++lead;
    parts.push_back({trimmed(raw), piece.at + start + lead});
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

class ModelParser {
 public:
  explicit ModelParser(const std::string& spec) : spec_(spec) {}

  ParsedModel parse() {
    ParsedModel model;
    Piece body{spec_, 0};
    const std::string text = trimmed(spec_);
    if (!text.empty() && text[0] == 'x') {
      // "x + ( ... )": the residual.
      size_t i = spec_.find('x') + 1;
      const auto skip = [&] {
        while (i < spec_.size() && is_space(spec_[i])) ++i;
      };
      skip();
      if (i < spec_.size() && spec_[i] == '+') {
        ++i;
        skip();
        if (i >= spec_.size() || spec_[i] != '(') fail(i, "'(' after 'x +'");
        const size_t close = spec_.rfind(')');
        if (close == std::string::npos || close < i || !trimmed(spec_.substr(close + 1)).empty()) {
          fail(spec_.size(), "the residual's closing ')' at the end");
        }
        model.residual = true;
        body = {spec_.substr(i + 1, close - i - 1), i + 1};
      }
    }
    std::set<std::string> used;
    for (const Piece& layer_text : split(body, '|')) {
      ParsedLayer layer = parse_layer(layer_text, model.layers.size() + 1);
      for (const LinearRef* ref : {&layer.linear, layer.gated ? &layer.gate : nullptr}) {
        if (!ref) continue;
        const bool same_linear_halves = ref == &layer.gate && layer.gate.path == layer.linear.path;
        if (!same_linear_halves && !used.insert(ref->path).second) {
          fail(layer_text.at, "a Linear used once; " + spec_excerpt(ref->path, 0) + " comes twice");
        }
      }
      model.layers.push_back(std::move(layer));
    }
    return model;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& expected) const {
    throw ChainSpecError("model " + spec_excerpt(spec_, at) + ": expected " + expected +
                         " (at character " + std::to_string(at + 1) + ")");
  }

  LinearRef parse_linear(const Piece& piece, const char* role) const {
    const std::string& t = piece.text;
    LinearRef ref;
    size_t end = t.size();
    if (!t.empty() && t.back() == ']') {
      const size_t open = t.rfind('[');
      const std::string index = open == std::string::npos ? "" : t.substr(open + 1);
      if (index != "0]" && index != "1]") {
        fail(piece.at + (open == std::string::npos ? 0 : open),
             std::string("[0] or [1] (a half of the ") + role + "'s output)");
      }
      ref.half = index[0] - '0';
      end = open;
    }
    ref.path = t.substr(0, end);
    if (!is_attribute_path(ref.path)) {
      fail(piece.at, std::string("the ") + role + "'s attribute path ([A-Za-z0-9_.], e.g. fc1 or " +
                         "block.0), got " + spec_excerpt(t, 0));
    }
    return ref;
  }

  ParsedLayer parse_layer(const Piece& piece, size_t index) const {
    if (piece.text.empty()) fail(piece.at, "a layer (a Linear's path)");
    ParsedLayer layer;
    const size_t colon = piece.text.find(':');
    const Piece linear{trimmed(piece.text.substr(0, colon)), piece.at};
    layer.linear = parse_linear(linear, "Linear");
    if (colon == std::string::npos) {
      if (layer.linear.half >= 0) fail(piece.at, "':' and a gate after a Linear's half");
      return layer;
    }
    const std::vector<Piece> parts =
        split({piece.text.substr(colon + 1), piece.at + colon + 1}, '*');
    if (parts.size() > 2) fail(parts[2].at - 1, "one '*' a layer");
    if (!parts[0].text.empty()) {
      try {
        layer.chain = parse_chain(parts[0].text);
      } catch (const ChainSpecError& e) {
        throw ChainSpecError("model " + spec_excerpt(spec_, parts[0].at) + ", layer " +
                             std::to_string(index) + " (" + layer.linear.to_string() +
                             "): " + e.what());
      }
    }
    if (parts.size() == 2) {
      layer.gated = true;
      layer.gate = parse_linear(parts[1], "gate");
      const bool halves = layer.linear.half >= 0 || layer.gate.half >= 0;
      if (halves &&
          (layer.gate.path != layer.linear.path || layer.gate.half + layer.linear.half != 1)) {
        fail(parts[1].at, "the other half of the same Linear (" + layer.linear.path + "[" +
                              std::to_string(1 - std::max(layer.linear.half, 0)) + "])");
      }
      if (!halves && layer.gate.path == layer.linear.path) {
        fail(parts[1].at, "a gate other than the Linear itself");
      }
    } else if (layer.linear.half >= 0) {
      fail(piece.at + piece.text.size(), "'* " + layer.linear.path + "[" +
                                             std::to_string(1 - layer.linear.half) +
                                             "]' (a Linear's half is gated by the other)");
    }
    return layer;
  }

  const std::string& spec_;
};

}  // namespace

std::string LinearRef::to_string() const {
  return half < 0 ? path : path + "[" + std::to_string(half) + "]";
}

std::string ParsedLayer::to_string() const {
  std::string text = linear.to_string();
  if (!chain.ops.empty() || gated) text += ":" + chain.to_string();
  if (gated) text += "*" + gate.to_string();
  return text;
}

std::string ParsedModel::to_string() const {
  std::string text;
  for (const ParsedLayer& layer : layers) text += (text.empty() ? "" : "|") + layer.to_string();
  return residual ? "x+(" + text + ")" : text;
}

std::string ParsedModel::description() const {
  std::string text;
  for (const ParsedLayer& layer : layers) {
    std::string one = layer.linear.to_string();
    const std::string chain = layer.chain.to_string();
    if (!chain.empty()) one += " -> " + chain;
    if (layer.gated) one = "(" + one + ") * " + layer.gate.to_string();
    text += (text.empty() ? "" : " | ") + one;
  }
  return residual ? "x + (" + text + ")" : text;
}

bool is_layered_spec(const std::string& spec) {
  if (spec.find_first_of(":|") != std::string::npos) return true;
  const std::string text = trimmed(spec);
  if (text.empty() || text[0] != 'x') return false;
  const std::string rest = trimmed(text.substr(1));
  return !rest.empty() && rest[0] == '+';
}

ParsedModel parse_model_spec(const std::string& spec) { return ModelParser(spec).parse(); }

ParsedChain ModelSpec::parsed_chain() const {
  return compiled ? find_chain(name).chain : parse_chain_or_empty(chain);
}

ParsedModel ModelSpec::parsed_model() const {
  ParsedModel model;
  model.residual = residual;
  for (const ModelSpec& one : layers) {
    ParsedLayer layer;
    layer.linear = {one.linear, one.half};
    layer.chain = one.parsed_chain();
    layer.gated = one.gated();
    if (layer.gated) layer.gate = {one.gate, one.half < 0 ? -1 : 1 - one.half};
    model.layers.push_back(layer);
  }
  return model;
}

std::string ModelSpec::description() const {
  return layered() ? parsed_model().description() : parsed_chain().description();
}

ModelSpec runtime_model(const std::string& spec, const std::string& linear, bool linear_bias) {
  const ParsedChain chain = parse_chain_or_empty(spec);
  program_of(chain);  // refuses what the interpreter cannot run, now rather than at the first call
  ModelSpec model;
  model.name = chain.to_string();
  model.linear = linear;
  model.linear_bias = linear_bias;
  model.chain = chain.to_string();
  return model;
}

ModelSpec layered_model(const std::string& spec, const std::map<std::string, bool>& biases) {
  const ParsedModel parsed = parse_model_spec(spec);
  const auto has_bias = [&](const std::string& path) {
    const auto it = biases.find(path);
    return it == biases.end() || it->second;
  };
  ModelSpec model;
  model.name = parsed.to_string();
  model.residual = parsed.residual;
  for (const ParsedLayer& layer : parsed.layers) {
    program_of(layer.chain);  // refuses what the interpreter cannot run, now
    ModelSpec one;
    one.name = one.chain = layer.chain.to_string();
    one.linear = layer.linear.path;
    one.linear_bias = has_bias(one.linear);
    if (layer.gated) {
      one.gate = layer.gate.path;
      one.gate_bias = has_bias(one.gate);
      one.half = layer.linear.half;
    }
    model.layers.push_back(one);
  }
  return model;
}

}  // namespace fusedlinear
