"""Describe a PyTorch `Linear -> pointwise ops` model, or an MLP of such layers, as a spec and
save it for fusedlinear.

fusedlinear runs any model that is one nn.Linear followed by pointwise ops of a fixed
vocabulary; the model is described by a chain spec such as `gelu(tanh),silu,clamp(-2,2)`
(docs/CHAINS.md). It also runs layered models, described by a layered spec that names each
Linear by its attribute path:

    fc1:gelu|fc2                    fc2(gelu(fc1(x))); nn.Sequential's Linears are '0', '2', ...
    w1:silu*w3|w2                   w2(silu(w1(x)) * w3(x)): a gated pair (SwiGLU, GeGLU)
    w13[0]:silu*w13[1]|w2           a, b = w13(x).chunk(2, -1); w2(silu(a) * b)
    x+(fc1:gelu|fc2)                x + fc2(gelu(fc1(x))): the input added to the output

This module traces a model with torch.fx, writes its spec in canonical form and saves its state
dict with the spec inside:

    from fusedlinear import save_with_chain, chain_spec    # or: from fx_chain import ...
    linear_name, spec = chain_spec(model)          # ('fc', 'gelu(tanh),silu,clamp(-2,2)')
    chain_spec(mlp)                                # ('', 'fc1:gelu|fc2'): a layered model
    save_with_chain(model, "mynet.pt")             # or "mynet.safetensors"

A model of one Linear is written as before: its chain spec and the Linear's path (metadata
{"version": 1, "chain": spec, "linear": path}). A layered model (several Linears, a gated pair,
a Linear's two halves or a residual) is written with its layered spec as "chain" and "" as
"linear"; chain_spec returns ('', spec) for it. What is accepted, beside each layer's pointwise
ops: Linears one after another (nested modules, nn.Sequential), each called once; the product
of a chain on one Linear's output and another Linear's output (`F.silu(w1(x)) * w3(x)`, either
order), both Linears taking the same value; the product of a Linear's two halves
(`a, b = y.chunk(2, -1)`, `torch.chunk(y, 2, dim=-1)`), a chain on one of them; a gated layer
ends at its product. `x + f(x)` of the model's input as its last op (the widths equal); and
the patterns `y * torch.sigmoid(beta * y)` (swish(beta); QuickGELU is swish(1.702)) and
`y * y`, `y ** 2`, `torch.square(y)` (square). A parameter of a chain (add, sub, mul, div) has
the shape [its layer's width], [] or [1], and belongs to one layer; it may be a Linear's bias
(`torch.tanh(self.fc(x)) * self.fc.bias`). A layer's chain holds at most 16 ops, at most 4 of
them by a parameter: fusedlinear's interpreter takes no more.

Anything the spec cannot express is refused with a ChainError, one line naming the node.

Its command line and demo models are weights/fx_chain.py, which re-exports this module's names
(`python3 weights/fx_chain.py --spec FILE`); messages start with "fx_chain: " in both.

Runs with torch 1.13 (Debian's python3-torch) and torch 2.x; .safetensors files need the
safetensors package to be written (reading the spec back needs nothing).
"""
import decimal
import dis
import inspect
import json
import math
import operator
import os
import re
import secrets
import struct

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

METADATA_KEY = "fusedlinear"
FORMAT_VERSION = 1
# What fusedlinear's interpreter takes in one chain: ops (kMaxProgramOps, kernels/math/program.h)
# and per-feature parameter terms, one per add/sub/mul/div by a parameter (kMaxColumnTerms,
# kernels/math/chain.h). A file beyond either would be written but refused by `run`.
MAX_CHAIN_OPS = 16
MAX_PARAMETER_TERMS = 4
WHY = "fusedlinear runs Linear followed by pointwise ops of its vocabulary (docs/CHAINS.md)"


class ChainError(ValueError):
    """A model, spec or file that fusedlinear's chain cannot express; the message is one line."""


# ---------------------------------------------------------------------------------------------
# Numbers: the shortest decimal that reads back to the same float32 value.

def float32(value):
    """value rounded to the nearest float32 (infinite beyond float32's range), as a float."""
    return torch.tensor(float(value), dtype=torch.float64).float().item()


def _digits_needed(x):
    """The shortest '%e'-style string that reads back to float32 x (x finite, not zero)."""
    context = decimal.Context(prec=40)
    for digits in range(1, 10):
        nearest = "%.*e" % (digits - 1, x)
        exponent = int(nearest.split("e")[1]) - (digits - 1)
        step = decimal.Decimal(1).scaleb(exponent)
        centre = decimal.Decimal(nearest)
        candidates = [centre, context.subtract(centre, step), context.add(centre, step)]
        exact = decimal.Decimal(x)
        good = [c for c in candidates if c != 0 and float32(float(c)) == x]
        if good:
            best = min(good, key=lambda c: abs(context.subtract(c, exact)))
            return "%.*e" % (digits - 1, best)
    return "%.8e" % x


def format_number(value):
    """The canonical spec form of a number: float32's shortest round-trip decimal.

    Fixed notation for 1e-4 <= |x| < 1e16 (`0.2`, `-2`, `0.001`, `100000`), otherwise
    `1e-5`, `3.4028235e38`; no trailing `.0`, no `+` or leading zeros in the exponent;
    `inf` and `-inf` for infinities. NaN has no spec form (ChainError)."""
    x = float32(value)
    if math.isnan(x):
        raise ChainError("fx_chain: NaN cannot be written in a chain spec")
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    mantissa, exponent = _digits_needed(x).split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exponent = int(exponent)
    if -4 <= exponent < 16:
        if exponent >= 0:
            whole = digits[:exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1:]
        else:
            whole, fraction = "0", "0" * (-exponent - 1) + digits
        return sign + whole + ("." + fraction if fraction else "")
    return sign + digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + "e" + str(exponent)


# ---------------------------------------------------------------------------------------------
# The vocabulary and the spec grammar.

REQUIRED = object()
INF = float("inf")

# token -> its arguments in canonical order, (name, default); names are PyTorch's.
VOCABULARY = {
    "relu": (), "relu6": (),
    "leaky_relu": (("negative_slope", 0.01),),
    "elu": (("alpha", 1.0),),
    "selu": (),
    "celu": (("alpha", 1.0),),
    "gelu": (("approximate", "none"),),
    "silu": (), "swish": (("beta", 1.0),), "mish": (), "sigmoid": (), "tanh": (),
    "hardtanh": (("min_val", -1.0), ("max_val", 1.0)),
    "clamp": (("min", -INF), ("max", INF)),
    "hardsigmoid": (), "hardswish": (),
    "softplus": (("beta", 1.0), ("threshold", 20.0)),
    "softsign": (), "tanhshrink": (), "logsigmoid": (), "square": (),
    "add": (("other", REQUIRED),), "sub": (("other", REQUIRED),),
    "mul": (("other", REQUIRED),), "div": (("other", REQUIRED),),
}
BINARY = ("add", "sub", "mul", "div")
GELU_APPROXIMATIONS = ("none", "tanh")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*\Z")
NUMBER = re.compile(r"[+-]?(inf|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)\Z")


class Op:
    """One op of a chain: a vocabulary token and its arguments in canonical order (numbers as
    floats, identifiers as str)."""

    def __init__(self, token, args=()):
        self.token, self.args = token, tuple(args)

    def __str__(self):
        if self.token == "gelu":
            return "gelu" if self.args[0] == "none" else "gelu(%s)" % self.args[0]
        if self.token == "swish" and (not self.args or self.args[0] == 1):
            return "swish"  # beta written only when it is not 1, as specs were before it
        if not self.args:
            return self.token
        return "%s(%s)" % (self.token, ",".join(
            a if isinstance(a, str) else format_number(a) for a in self.args))

    def __repr__(self):
        return "Op(%r, %r)" % (self.token, self.args)

    def __eq__(self, other):
        return isinstance(other, Op) and str(self) == str(other)


# ASCII whitespace, C's isspace: the only whitespace a spec takes (between tokens, around it).
WHITESPACE = " \t\n\v\f\r"
# The vocabulary as fusedlinear's messages list it.
VOCABULARY_NAMES = ", ".join(name for token in VOCABULARY
                             for name in ((token, "gelu(tanh)") if token == "gelu" else (token,)))


def _utf8(text):
    return text.encode("utf-8", "surrogatepass")


def _escaped(data):
    """bytes for a message: printable ASCII as is, backslash, control bytes and bytes outside
    ASCII escaped (fusedlinear's rule, so that both write the same line)."""
    named = {0x5c: "\\\\", 0x09: "\\t", 0x0a: "\\n", 0x0d: "\\r"}
    return "".join(named[b] if b in named else chr(b) if 0x20 <= b < 0x7f else "\\x%02x" % b
                   for b in data)


def _quoted(text):
    """A token or a path quoted in a message: its first 40 bytes, '...' when there are more."""
    data = _utf8(text)
    return "'%s%s'" % (_escaped(data[:40]), "..." if len(data) > 40 else "")


def excerpt(text, position):
    """(text quoted for a one-line message, the byte offset of character `position`): the UTF-8
    bytes within 40 of it, '...' where cut, escaped; fusedlinear's spec_excerpt
    (kernels/ops/chain_spec.h), so that a message names the same place in both."""
    data = _utf8(text)
    at = len(_utf8(text[:position]))
    begin, end = max(at - 40, 0), min(len(data), at + 40)
    if begin >= end:
        return "''", at
    return "'%s%s%s'" % ("..." if begin else "", _escaped(data[begin:end]),
                         "..." if end < len(data) else ""), at


def read_number(word):
    """A number of the grammar (NUMBER) as the float32 value nearest to it, rounded once, as
    C's strtof reads it (1e40 is inf)."""
    if not NUMBER.match(word):
        raise ChainError("fx_chain: %s is not a number" % _quoted(word))
    value = float(word)
    single = float32(value)
    if math.isinf(value) or single == value:
        return single
    # Rounding to float64 first differs from one rounding only where the float64 value is the
    # midpoint of two float32 values; the decimal itself says on which side it lies.
    bits = struct.unpack("<I", struct.pack("<f", abs(single)))[0]
    lower, upper = (bits, bits + 1) if abs(single) < abs(value) else (bits - 1, bits)

    def exact(b):
        if b == 0x7f800000:
            return decimal.Decimal(2 ** 128)  # where float32's rounding reaches inf
        return decimal.Decimal(struct.unpack("<f", struct.pack("<I", b))[0])

    context = decimal.Context(prec=400)
    middle = context.divide(context.add(exact(lower), exact(upper)), 2)
    written = decimal.Decimal(word).copy_abs()
    if decimal.Decimal(abs(value)) != middle or written == middle:
        return single
    nearest = upper if written > middle else lower
    result = INF if nearest == 0x7f800000 else struct.unpack("<f", struct.pack("<I", nearest))[0]
    return math.copysign(result, value)


def _spec_error(text, position, what):
    shown, at = excerpt(text, position)
    return ChainError("fx_chain: chain spec %s, at character %d: %s" % (shown, at + 1, what))


def _is_letter(c):
    return "A" <= c <= "Z" or "a" <= c <= "z" or c == "_"


def _is_word_char(c):
    return _is_letter(c) or "0" <= c <= "9" or c == "."


def _tokens(text):
    """The spec's tokens (kind, text, position), kind 'word', 'number', 'punct' or 'end' (last).
    The whole spec is read first, so that a character no token takes, or a run that starts a
    number and is not one (0x10, 1e5x), is the error wherever it is, as fusedlinear reads it."""
    tokens, i, n = [], 0, len(text)
    while True:
        while i < n and text[i] in WHITESPACE:
            i += 1
        if i == n:
            tokens.append(("end", "", n))
            return tokens
        c, end = text[i], i + 1
        if _is_letter(c):
            while end < n and _is_word_char(text[end]):
                end += 1
            if not IDENTIFIER.match(text[i:end]):
                raise _spec_error(text, i, "%s is no identifier: a part between dots is empty"
                                  % _quoted(text[i:end]))
            tokens.append(("number" if text[i:end] == "inf" else "word", text[i:end], i))
        elif c in "0123456789.+-":
            while end < n and (_is_word_char(text[end])
                               or (text[end] in "+-" and text[end - 1] in "eE")):
                end += 1
            if not NUMBER.match(text[i:end]):
                raise _spec_error(text, i, "%s is not a number (decimal: 2, -0.5, 1e-3, inf)"
                                  % _quoted(text[i:end]))
            tokens.append(("number", text[i:end], i))
        elif c in "(),=":
            tokens.append(("punct", c, i))
        else:
            raise _spec_error(text, i, "unexpected character '%s'" % _escaped(_utf8(c)[:1]))
        i = end


def _describe(token):
    return "the end" if token[0] == "end" else _quoted(token[1])


def _bind_spec_args(text, token, given, position):
    """given: [(name or None, value token, where the argument starts)] -> the op's arguments in
    canonical order; the checks in fusedlinear's order, so that both name the same error."""
    params = VOCABULARY[token]
    names = [name for name, _ in params]
    takes = "%s takes no arguments" % token if not names else "%s takes %d argument%s (%s)" % (
        token, len(names), "" if len(names) == 1 else "s", ", ".join(names))
    if len(given) > len(names):
        raise _spec_error(text, position, "%s, got %d argument%s"
                          % (takes, len(given), "" if len(given) == 1 else "s"))
    slots, named = {}, False
    for index, (name, value, start) in enumerate(given):
        if name is None:
            if named:
                raise _spec_error(text, start, "a positional argument after a keyword one")
            name = names[index]
        else:
            named = True
            if name not in names:
                raise _spec_error(text, start, "%s, not %s" % (takes, _quoted(name)))
        if name in slots:
            raise _spec_error(text, start, "%s's %s given twice" % (token, name))
        slots[name] = value
    if token in BINARY and "other" not in slots:
        raise _spec_error(text, position, "%s needs other (a number or a parameter's state-dict "
                          "key)" % token)
    if token == "clamp" and not slots:
        raise _spec_error(text, position, "clamp needs min or max")
    args = []
    for name, default in params:
        if name not in slots:
            args.append(default if isinstance(default, str) else float32(default))
            continue
        kind, word, where = slots[name]
        if token == "gelu":
            if kind != "word" or word not in GELU_APPROXIMATIONS:
                raise _spec_error(text, where, "gelu's approximate is none or tanh, not %s"
                                  % _quoted(word))
            args.append(word)
        elif kind == "word" and token in BINARY:
            args.append(word)
        elif kind == "word":
            raise _spec_error(text, where, "%s's %s is a number, not %s"
                              % (token, name, _quoted(word)))
        else:
            args.append(read_number(word))
            # PyTorch refuses a CELU of alpha 0 (it divides by alpha); so does the grammar.
            if token == "celu" and args[-1] == 0:
                raise _spec_error(text, where, "celu's alpha cannot be 0 (PyTorch's CELU "
                                  "divides by it)")
    return args


def parse_spec(text):
    """The ops of a chain spec (docs/CHAINS.md's grammar) as a list of Op; ChainError if it is
    not one. tests/spec_grammar.tsv is the grammar's test, shared with fusedlinear's parser."""
    tokens = _tokens(text)
    ops, i = [], 0
    while True:
        kind, word, position = tokens[i]
        if kind != "word":
            raise _spec_error(text, position, "expected an op (the vocabulary: %s), got %s"
                              % (VOCABULARY_NAMES, _describe(tokens[i])))
        if word not in VOCABULARY:
            raise _spec_error(text, position, "unknown op %s (the vocabulary: %s)"
                              % (_quoted(word), VOCABULARY_NAMES))
        i += 1
        given = []
        if tokens[i][:2] == ("punct", "("):
            i += 1
            while True:
                name, start = None, tokens[i][2]
                if tokens[i][0] == "word" and tokens[i + 1][:2] == ("punct", "="):
                    name, i = tokens[i][1], i + 2
                    if tokens[i][0] not in ("word", "number"):
                        raise _spec_error(text, tokens[i][2], "expected a value after %s, got %s"
                                          % (_quoted(name + "="), _describe(tokens[i])))
                elif tokens[i][0] not in ("word", "number"):
                    raise _spec_error(text, tokens[i][2], "expected an argument, got %s"
                                      % _describe(tokens[i]))
                given.append((name, tokens[i], start))
                i += 1
                if tokens[i][:2] == ("punct", ")"):
                    i += 1
                    break
                if tokens[i][:2] != ("punct", ","):
                    raise _spec_error(text, tokens[i][2], "expected ',' or ')' after an argument, "
                                      "got %s" % _describe(tokens[i]))
                i += 1
        ops.append(Op(word, _bind_spec_args(text, word, given, position)))
        if tokens[i][0] == "end":
            return ops
        if tokens[i][:2] != ("punct", ","):
            raise _spec_error(text, tokens[i][2], "expected ',' between ops or the end of the "
                              "spec, got %s" % _describe(tokens[i]))
        i += 1


def canonical_spec(text):
    """The canonical form of a chain spec (`leaky_relu(negative_slope=0.2)` -> `leaky_relu(0.2)`)
    or of a layered spec (`x + (w1: silu * w3 | w2)` -> `x+(w1:silu*w3|w2)`)."""
    if is_layered_spec(text):
        return str(parse_model_spec(text))
    return ",".join(str(op) for op in parse_spec(text))


# Layered specs (docs/CHAINS.md, "Layered models"; kernels/ops/model_spec.h on the C++ side):
#   fc1: gelu | fc2: relu | fc3        layers in order, each a Linear and its chain (maybe none)
#   w1: silu * w3 | w2                 a gated pair: silu(w1(x)) * w3(x)
#   w13[0]: silu * w13[1] | w2         the same from one Linear's two halves (chunk(2, -1))
#   x + (fc1: gelu | fc2)              the model's input added to its output (a residual)

LINEAR_PATH = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\Z")


class LinearRef:
    """A Linear by its attribute path ('fc1', '0', 'block.fc'), or one half of its output
    (half 0 or 1: chunk(2, -1)'s first or second part; -1 the whole output)."""

    def __init__(self, path, half=-1):
        self.path, self.half = path, half

    def __str__(self):
        return self.path if self.half < 0 else "%s[%d]" % (self.path, self.half)

    def __repr__(self):
        return "LinearRef(%r, %d)" % (self.path, self.half)

    def __eq__(self, other):
        return isinstance(other, LinearRef) and (self.path, self.half) == (other.path, other.half)


class Layer:
    """One layer of a layered spec: chain(linear(x)), times gate(x) for a gated pair (gate a
    LinearRef, or None)."""

    def __init__(self, linear, ops=(), gate=None):
        self.linear, self.ops, self.gate = linear, list(ops), gate

    def __str__(self):
        text = str(self.linear)
        if self.ops or self.gate is not None:
            text += ":" + ",".join(str(op) for op in self.ops)
        if self.gate is not None:
            text += "*" + str(self.gate)
        return text

    def __repr__(self):
        return "Layer(%r, %r, %r)" % (self.linear, self.ops, self.gate)


class ModelSpec:
    """A model as layers (a list of Layer) and whether its input is added to its output.

    str() is the canonical layered spec (`x+(w1:silu*w3|w2)`); `single` says whether it is one
    Linear and its chain, which files carry as a chain spec and the Linear's path."""

    def __init__(self, layers, residual=False):
        self.layers, self.residual = list(layers), residual

    @property
    def single(self):
        layer = self.layers[0]
        return (len(self.layers) == 1 and not self.residual and layer.gate is None
                and layer.linear.half < 0)

    def linears(self):
        """The paths of the model's Linears, in order (a gate after its layer's Linear)."""
        paths = []
        for layer in self.layers:
            for ref in (layer.linear, layer.gate):
                if ref is not None and ref.path not in paths:
                    paths.append(ref.path)
        return paths

    def __str__(self):
        text = "|".join(str(layer) for layer in self.layers)
        return "x+(%s)" % text if self.residual else text

    def __repr__(self):
        return "ModelSpec(%r, residual=%r)" % (self.layers, self.residual)


def is_layered_spec(text):
    """Whether a spec is layered (it names Linears: ':' or '|', or a residual `x + (...)`)
    rather than a chain spec: the same test as fusedlinear's."""
    if ":" in text or "|" in text:
        return True
    stripped = text.strip(WHITESPACE)
    return stripped.startswith("x") and stripped[1:].lstrip(WHITESPACE).startswith("+")


def _model_error(text, position, what):
    shown, at = excerpt(text, position)
    return ChainError("fx_chain: model spec %s, at character %d: expected %s"
                      % (shown, at + 1, what))


def _split(piece, at, separator):
    """[(part stripped, where it starts)] of piece (which starts at `at`) split at separator."""
    parts, start = [], 0
    while True:
        end = piece.find(separator, start)
        raw = piece[start:] if end < 0 else piece[start:end]
        lead = len(raw) - len(raw.lstrip(WHITESPACE))
        parts.append((raw.strip(WHITESPACE), at + start + lead))
        if end < 0:
            return parts
        start = end + 1


def _parse_ref(text, piece, at, role):
    ref, path = LinearRef(piece), piece
    if piece.endswith("]"):
        open_ = piece.rfind("[")
        if piece[open_ + 1:] not in ("0]", "1]") or open_ < 0:
            raise _model_error(text, at + max(open_, 0), "[0] or [1] (a half of the %s's output)"
                               % role)
        path, ref.half = piece[:open_], int(piece[open_ + 1])
    if not LINEAR_PATH.match(path):
        raise _model_error(text, at, "the %s's attribute path ([A-Za-z0-9_.], e.g. fc1 or "
                           "block.0), got %s" % (role, excerpt(piece, 0)[0]))
    ref.path = path
    return ref


def _parse_layer(text, piece, at, index):
    if not piece:
        raise _model_error(text, at, "a layer (a Linear's path)")
    colon = piece.find(":")
    linear = _parse_ref(text, (piece if colon < 0 else piece[:colon]).strip(WHITESPACE), at,
                        "Linear")
    if colon < 0:
        if linear.half >= 0:
            raise _model_error(text, at, "':' and a gate after a Linear's half")
        return Layer(linear)
    parts = _split(piece[colon + 1:], at + colon + 1, "*")
    if len(parts) > 2:
        raise _model_error(text, parts[2][1] - 1, "one '*' a layer")
    ops = []
    if parts[0][0]:
        try:
            ops = parse_spec(parts[0][0])
        except ChainError as error:
            raise ChainError("fx_chain: model spec %s, layer %d (%s): %s" % (
                excerpt(text, parts[0][1])[0], index, linear,
                str(error)[len("fx_chain: "):])) from None
    gate = None
    if len(parts) == 2:
        gate = _parse_ref(text, parts[1][0], parts[1][1], "gate")
        if linear.half >= 0 or gate.half >= 0:
            if gate.path != linear.path or gate.half + linear.half != 1:
                raise _model_error(text, parts[1][1], "the other half of the same Linear (%s[%d])"
                                   % (linear.path, 1 - max(linear.half, 0)))
        elif gate.path == linear.path:
            raise _model_error(text, parts[1][1], "a gate other than the Linear itself")
    elif linear.half >= 0:
        raise _model_error(text, at + len(piece), "'* %s[%d]' (a Linear's half is gated by the "
                           "other)" % (linear.path, 1 - linear.half))
    return Layer(linear, ops, gate)


def parse_model_spec(text):
    """The ModelSpec of a layered spec; ChainError (one line, naming the character) if it is
    not one. The grammar is fusedlinear's (kernels/ops/model_spec.h)."""
    body, offset, residual = text, 0, False
    if text.strip(WHITESPACE).startswith("x"):
        i = text.index("x") + 1
        while i < len(text) and text[i] in WHITESPACE:
            i += 1
        if i < len(text) and text[i] == "+":
            i += 1
            while i < len(text) and text[i] in WHITESPACE:
                i += 1
            if i >= len(text) or text[i] != "(":
                raise _model_error(text, i, "'(' after 'x +'")
            close = text.rfind(")")
            if close < i or text[close + 1:].strip(WHITESPACE):
                raise _model_error(text, len(text), "the residual's closing ')' at the end")
            body, offset, residual = text[i + 1:close], i + 1, True
    layers, used = [], set()
    for piece, at in _split(body, offset, "|"):
        layer = _parse_layer(text, piece, at, len(layers) + 1)
        for ref in (layer.linear, layer.gate):
            if ref is None or (ref is layer.gate and ref.path == layer.linear.path):
                continue
            if ref.path in used:
                raise _model_error(text, at, "a Linear used once; %s comes twice"
                                   % excerpt(ref.path, 0)[0])
            used.add(ref.path)
        layers.append(layer)
    return ModelSpec(layers, residual)


# ---------------------------------------------------------------------------------------------
# What each PyTorch call is in the vocabulary: forms.

class Form:
    """A PyTorch function, method or module class and what it is in the vocabulary.

    params: the call's parameters in order, (name, default); `input` is the running value.
    inplace: True when the call always writes into its input; 'inplace' when an argument (or a
    module's attribute) of that name says."""

    def __init__(self, token, params, inplace=False):
        self.token, self.params, self.inplace = token, params, inplace


IN = ("input", REQUIRED)
INPLACE = ("inplace", False)
BINARY_PARAMS = {
    "add": (IN, ("other", REQUIRED), ("alpha", 1)),
    "sub": (IN, ("other", REQUIRED), ("alpha", 1)),
    "mul": (IN, ("other", REQUIRED)),
    "div": (IN, ("other", REQUIRED), ("rounding_mode", None)),
}

# (token, params, inplace, names); a name not in this torch is left out.
_FUNCTION_TABLE = [
    ("relu", (IN, INPLACE), "inplace", ["F.relu"]),
    ("relu", (IN,), False, ["torch.relu"]),
    ("relu", (IN,), True, ["torch.relu_", "F.relu_"]),
    ("relu6", (IN, INPLACE), "inplace", ["F.relu6"]),
    ("leaky_relu", (IN, ("negative_slope", 0.01), INPLACE), "inplace", ["F.leaky_relu"]),
    ("leaky_relu", (IN, ("negative_slope", 0.01)), True, ["F.leaky_relu_"]),
    ("elu", (IN, ("alpha", 1.0), INPLACE), "inplace", ["F.elu"]),
    ("elu", (IN, ("alpha", 1.0)), True, ["F.elu_"]),
    ("selu", (IN, INPLACE), "inplace", ["F.selu"]),
    ("selu", (IN,), False, ["torch.selu"]),
    ("selu", (IN,), True, ["torch.selu_", "F.selu_"]),
    ("celu", (IN, ("alpha", 1.0), INPLACE), "inplace", ["F.celu"]),
    ("celu", (IN, ("alpha", 1.0)), False, ["torch.celu"]),
    ("celu", (IN, ("alpha", 1.0)), True, ["torch.celu_", "F.celu_"]),
    ("gelu", (IN, ("approximate", "none")), False, ["F.gelu"]),
    ("silu", (IN, INPLACE), "inplace", ["F.silu"]),
    ("mish", (IN, INPLACE), "inplace", ["F.mish"]),
    ("sigmoid", (IN,), False, ["torch.sigmoid", "F.sigmoid", "torch.special.expit"]),
    ("sigmoid", (IN,), True, ["torch.sigmoid_"]),
    ("tanh", (IN,), False, ["torch.tanh", "F.tanh"]),
    ("tanh", (IN,), True, ["torch.tanh_"]),
    ("hardtanh", (IN, ("min_val", -1.0), ("max_val", 1.0), INPLACE), "inplace", ["F.hardtanh"]),
    ("hardtanh", (IN, ("min_val", -1.0), ("max_val", 1.0)), True, ["F.hardtanh_"]),
    ("clamp", (IN, ("min", None), ("max", None)), False, ["torch.clamp", "torch.clip"]),
    ("clamp", (IN, ("min", None), ("max", None)), True, ["torch.clamp_", "torch.clip_"]),
    ("clamp", (IN, ("min", REQUIRED)), False, ["torch.clamp_min"]),
    ("clamp", (IN, ("min", REQUIRED)), True, ["torch.clamp_min_"]),
    ("clamp", (IN, ("max", REQUIRED)), False, ["torch.clamp_max"]),
    ("clamp", (IN, ("max", REQUIRED)), True, ["torch.clamp_max_"]),
    ("hardsigmoid", (IN, INPLACE), "inplace", ["F.hardsigmoid"]),
    ("hardswish", (IN, INPLACE), "inplace", ["F.hardswish"]),
    ("softplus", (IN, ("beta", 1.0), ("threshold", 20.0)), False, ["F.softplus"]),
    ("softsign", (IN,), False, ["F.softsign"]),
    ("tanhshrink", (IN,), False, ["F.tanhshrink"]),
    ("logsigmoid", (IN,), False, ["F.logsigmoid"]),
    ("square", (IN,), False, ["torch.square"]),
    ("square", (IN,), True, ["torch.square_"]),
    ("pow", (IN, ("exponent", REQUIRED)), False, ["torch.pow", "operator.pow"]),
    ("pow", (IN, ("exponent", REQUIRED)), True, ["operator.ipow"]),
    ("add", BINARY_PARAMS["add"], False, ["torch.add", "operator.add"]),
    ("add", BINARY_PARAMS["add"], True, ["operator.iadd"]),
    ("sub", BINARY_PARAMS["sub"], False, ["torch.sub", "torch.subtract", "operator.sub"]),
    ("sub", BINARY_PARAMS["sub"], True, ["operator.isub"]),
    ("mul", BINARY_PARAMS["mul"], False, ["torch.mul", "torch.multiply", "operator.mul"]),
    ("mul", BINARY_PARAMS["mul"], True, ["operator.imul"]),
    ("div", BINARY_PARAMS["div"], False, ["torch.div", "torch.divide", "torch.true_divide",
                                          "operator.truediv"]),
    ("div", BINARY_PARAMS["div"], True, ["operator.itruediv"]),
    ("dropout", (IN, ("p", 0.5), ("training", True), INPLACE), False, ["F.dropout"]),
    ("dropout", (IN, ("p", REQUIRED), ("train", REQUIRED)), False, ["torch.dropout"]),
]

# Tensor methods: (token, params after self, names); a trailing '_' is the in-place form.
_METHOD_TABLE = [
    ("relu", (), ["relu"]), ("sigmoid", (), ["sigmoid"]), ("tanh", (), ["tanh"]),
    ("square", (), ["square"]), ("pow", (("exponent", REQUIRED),), ["pow"]),
    ("clamp", (("min", None), ("max", None)), ["clamp", "clip"]),
    ("clamp", (("min", REQUIRED),), ["clamp_min"]),
    ("clamp", (("max", REQUIRED),), ["clamp_max"]),
    ("add", BINARY_PARAMS["add"][1:], ["add"]),
    ("sub", BINARY_PARAMS["sub"][1:], ["sub", "subtract"]),
    ("mul", BINARY_PARAMS["mul"][1:], ["mul", "multiply"]),
    ("div", BINARY_PARAMS["div"][1:], ["div", "divide", "true_divide"]),
    ("identity", (("memory_format", None),), ["contiguous"]),
]

# Module classes (exact type) -> (token, the attributes that are its arguments).
_MODULE_TABLE = [
    (nn.ReLU, "relu", ()), (nn.ReLU6, "relu6", ()),
    (nn.LeakyReLU, "leaky_relu", ("negative_slope",)),
    (nn.ELU, "elu", ("alpha",)), (nn.SELU, "selu", ()), (nn.CELU, "celu", ("alpha",)),
    (nn.GELU, "gelu", ("approximate",)),
    (nn.SiLU, "silu", ()), (nn.Mish, "mish", ()), (nn.Sigmoid, "sigmoid", ()),
    (nn.Tanh, "tanh", ()), (nn.Hardtanh, "hardtanh", ("min_val", "max_val")),
    (nn.Hardsigmoid, "hardsigmoid", ()), (nn.Hardswish, "hardswish", ()),
    (nn.Softplus, "softplus", ("beta", "threshold")),
    (nn.Softsign, "softsign", ()), (nn.Tanhshrink, "tanhshrink", ()),
    (nn.LogSigmoid, "logsigmoid", ()),
    (nn.Dropout, "identity", ()), (nn.Identity, "identity", ()),
]
MODULE_DEFAULTS = {"approximate": "none"}  # nn.GELU before approximate existed


def _lookup(dotted):
    """The object a name such as 'F.relu' or 'operator.iadd' refers to, or None."""
    roots = {"torch": torch, "F": F, "operator": operator}
    head, _, rest = dotted.partition(".")
    value = roots[head]
    for part in rest.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _function_forms():
    forms = {}
    for token, params, inplace, names in _FUNCTION_TABLE:
        for name in names:
            function = _lookup(name)
            if function is not None:
                forms.setdefault(function, Form(token, params, inplace))
    return forms


def _method_forms():
    forms = {}
    for token, params, names in _METHOD_TABLE:
        for name in names:
            for method, inplace in ((name, False), (name + "_", True)):
                if hasattr(torch.Tensor, method) and not (token == "identity" and inplace):
                    forms[method] = Form(token, (IN,) + tuple(params), inplace)
    return forms


FUNCTION_FORMS = _function_forms()
METHOD_FORMS = _method_forms()
MODULE_FORMS = {cls: (token, attributes) for cls, token, attributes in _MODULE_TABLE}


# ---------------------------------------------------------------------------------------------
# Describing nodes in PyTorch's words.

def _function_name(function):
    """'torch.matmul', 'torch.nn.functional.gelu', 'operator.add' for a traced function."""
    name = getattr(function, "__name__", None)
    for prefix, namespace in (("torch", torch), ("torch.nn.functional", F),
                              ("operator", operator), ("torch.special", torch.special),
                              ("torch.linalg", torch.linalg), ("math", math)):
        if name and getattr(namespace, name, None) is function:
            return prefix + "." + name
    module = getattr(function, "__module__", None) or "?"
    return module.replace("_operator", "operator") + "." + (
        getattr(function, "__qualname__", None) or name or repr(function))


def _class_name(cls):
    if cls.__module__.startswith("torch.nn.modules."):
        return "torch.nn." + cls.__name__
    return cls.__module__ + "." + cls.__qualname__


def describe(node, modules):
    """A node's op and target as torch.fx prints them: `call_function torch.matmul (node
    'matmul')`, `call_module norm (torch.nn.LayerNorm) (node 'norm')`."""
    if node.op == "call_function":
        what = "call_function " + _function_name(node.target)
    elif node.op == "call_module":
        module = modules.get(node.target)
        what = "call_module %s (%s)" % (node.target, _class_name(type(module)))
    elif node.op == "output":
        what = "the output"
    else:
        what = "%s %s" % (node.op, node.target)
    return "%s (node '%s')" % (what, node.name)


def _refuse(node, modules, detail=None):
    what = describe(node, modules) + (", " + detail if detail else "")
    return ChainError("fx_chain: cannot express %s: %s" % (what, WHY))


# ---------------------------------------------------------------------------------------------
# Tracing: the graph's nodes -> the Linear's name and the ops.

def _node_uses(value):
    """Every fx.Node inside an argument (tuples, lists, dicts), in order, repeats kept."""
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (tuple, list)):
        return [node for item in value for node in _node_uses(item)]
    if isinstance(value, dict):
        return [node for item in value.values() for node in _node_uses(item)]
    return []


def _bind(node, params, modules):
    """A call's arguments by parameter name, defaults filled in."""
    args, kwargs = node.args, node.kwargs
    if len(args) > len(params):
        raise _refuse(node, modules, "with %d positional arguments" % len(args))
    bound = {name: value for (name, _), value in zip(params, args)}
    for name, value in kwargs.items():
        if name not in dict(params) or name in bound:
            raise _refuse(node, modules, "with the argument %r" % name)
        bound[name] = value
    for name, default in params:
        if name not in bound:
            if default is REQUIRED:
                raise _refuse(node, modules, "without its argument %r" % name)
            bound[name] = default
    return bound


class Call:
    """A traced call in the vocabulary's terms: its token ('identity', 'dropout', 'linear' or
    a vocabulary token), its arguments by name, and whether it writes into its input."""

    def __init__(self, token, bound, inplace):
        self.token, self.bound, self.inplace = token, bound, inplace


def classify(node, modules):
    """The Call a node is, or None when it is nothing the vocabulary knows."""
    if node.op == "call_function":
        form = FUNCTION_FORMS.get(node.target)
    elif node.op == "call_method":
        form = METHOD_FORMS.get(node.target)
    elif node.op == "call_module":
        return _classify_module(node, modules)
    else:
        return None
    if form is None:
        return None
    bound = _bind(node, form.params, modules)
    inplace = bool(bound.get("inplace")) if form.inplace == "inplace" else form.inplace
    return Call(form.token, bound, inplace)


def _classify_module(node, modules):
    module = modules[node.target]
    if isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward:
        return Call("linear", _bind(node, (IN,), modules), False)
    entry = MODULE_FORMS.get(type(module))
    if entry is None:
        return None
    token, attributes = entry
    bound = _bind(node, (IN,), modules)
    for name in attributes:
        bound[name] = getattr(module, name, MODULE_DEFAULTS.get(name))
    return Call(token, bound, bool(getattr(module, "inplace", False)))


class _Context:
    """What the translation of one node needs: the modules by path, the state dict's tensors
    (keep_vars), the Linear's out_features."""

    def __init__(self, modules, state):
        self.modules, self.state = modules, state
        self.out_features = None


def _number(node, ctx, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        what = "a tensor" if isinstance(value, torch.fx.Node) else type(value).__name__
        raise _refuse(node, ctx.modules, "whose %s is %s, not a number" % (name, what))
    if isinstance(value, float) and math.isnan(value):
        raise _refuse(node, ctx.modules, "whose %s is NaN" % name)
    return float32(value)


def _parameter(node, ctx, attr):
    """The state-dict key of a get_attr node used by add/sub/mul/div, checked."""
    key = attr.target
    tensor = ctx.state.get(key)
    if tensor is None:
        raise _refuse(node, ctx.modules, "with the tensor '%s', which is not in the state dict "
                      "(make it an nn.Parameter or a persistent buffer)" % key)
    shape = list(tensor.shape)
    if shape not in ([], [1], [ctx.out_features]):
        raise _refuse(node, ctx.modules, "with the parameter '%s' of shape %s (add, sub, mul and "
                      "div take a number or a parameter of shape [%d], [] or [1])"
                      % (key, shape, ctx.out_features))
    if not tensor.is_floating_point():
        raise _refuse(node, ctx.modules, "with the parameter '%s' of dtype %s (a floating-point "
                      "one is needed)" % (key, str(tensor.dtype).replace("torch.", "")))
    if not IDENTIFIER.match(key) or NUMBER.match(key):
        raise _refuse(node, ctx.modules, "with the parameter '%s', a key the spec cannot name "
                      "([A-Za-z_][A-Za-z0-9_.]*)" % key)
    return key


def _operand(node, ctx, value):
    if isinstance(value, torch.fx.Node):
        if value.op != "get_attr":
            raise _refuse(node, ctx.modules, "with the result of node '%s' as its operand"
                          % value.name)
        return _parameter(node, ctx, value)
    return _number(node, ctx, "operand", value)


def _binary_op(node, ctx, call, running):
    bound = call.bound
    if running is bound["input"]:
        other = bound["other"]
    else:
        if call.token in ("sub", "div"):
            symbol = "-" if call.token == "sub" else "/"
            raise _refuse(node, ctx.modules, "the running value on the right of %s (v %s x)"
                          % (symbol, symbol))
        other = bound["input"]
    if bound.get("alpha", 1) != 1:
        raise _refuse(node, ctx.modules, "with alpha=%r (only alpha=1)" % (bound["alpha"],))
    if bound.get("rounding_mode") is not None:
        raise _refuse(node, ctx.modules, "with rounding_mode=%r" % bound["rounding_mode"])
    if call.inplace and running is not bound["input"]:
        raise _refuse(node, ctx.modules, "which writes into its first operand, not the "
                      "running value")
    return Op(call.token, [_operand(node, ctx, other)])


def _unary_op(node, ctx, call):
    bound, token = call.bound, call.token
    if token == "pow":
        exponent = _number(node, ctx, "exponent", bound["exponent"])
        if exponent != 2:
            raise _refuse(node, ctx.modules, "with the exponent %s (only 2: square)"
                          % format_number(exponent))
        return Op("square")
    if token == "gelu":
        approximate = bound["approximate"]
        if approximate not in GELU_APPROXIMATIONS:
            raise _refuse(node, ctx.modules, "with approximate=%r" % (approximate,))
        return Op("gelu", [approximate])
    if token == "clamp":
        low, high = bound.get("min"), bound.get("max")
        if low is None and high is None:
            raise _refuse(node, ctx.modules, "with neither min nor max")
        return Op("clamp", [-INF if low is None else _number(node, ctx, "min", low),
                            INF if high is None else _number(node, ctx, "max", high)])
    names = [name for name, _ in VOCABULARY[token]]
    return Op(token, [_number(node, ctx, name, bound[name]) for name in names])


def _dropout(node, ctx, call):
    """None (an identity) for dropout that does not drop; ChainError otherwise."""
    training = call.bound.get("training", call.bound.get("train"))
    p = call.bound["p"]
    if training is False or (isinstance(p, (int, float)) and p == 0):
        return None
    raise _refuse(node, ctx.modules, "dropout with training=%r (p=%r), which drops values at "
                  "random; pass training=self.training" % (training, p))


def to_op(node, ctx, call, running):
    """The Op a classified node adds to the chain (None for an identity)."""
    if call.token == "identity":
        return None
    if call.token == "dropout":
        return _dropout(node, ctx, call)
    if call.token in BINARY:
        return _binary_op(node, ctx, call, running)
    if call.bound["input"] is not running:
        raise _refuse(node, ctx.modules, "which does not take the running value as its input")
    return _unary_op(node, ctx, call)


class _Layer:
    """A layer as the trace builds it: its Linear (ref, the node that called it, the width of
    its output or half), the value that Linear took, its chain's ops (each with its node), and
    once multiplied, its gate (ref) and the product's node."""

    def __init__(self, ref, node, width, source, ops=(), gate=None, product=None):
        self.ref, self.node, self.width, self.source = ref, node, width, source
        self.ops, self.gate, self.product = tuple(ops), gate, product

    def with_op(self, op, node):
        return _Layer(self.ref, self.node, self.width, self.source, self.ops + ((op, node),))

    def gated(self, gate, product):
        return _Layer(self.ref, self.node, self.width, self.source, self.ops, gate, product)

    def params(self):
        return {op.args[0] for op, _ in self.ops
                if op.token in BINARY and isinstance(op.args[0], str)}

    def spec(self):
        return Layer(self.ref, [op for op, _ in self.ops], self.gate)


class _Value:
    """What a node computes, abstractly: the model's input (kind 'input'); the layers done and
    the open one (kind 'layer'); a Linear's output in two halves (kind 'chunk'); or the input
    added to the layers (kind 'residual'). A 'layer' value made by appending `op` to another
    keeps that one as `parent` (for the patterns x * sigmoid(x) and x * x). `users`: the nodes
    that took it; nodes that alias one value (an identity, an in-place op) share it."""

    def __init__(self, kind, node, layers=(), open_layer=None, parent=None, op=None):
        self.kind, self.node, self.layers, self.open = kind, node, tuple(layers), open_layer
        self.parent, self.op = parent, op
        self.users, self.halves = [], {}

    def append(self, node, op):
        return _Value("layer", node, self.layers, self.open.with_op(op, node), self, op)

    def all_layers(self):
        return self.layers + ((self.open,) if self.open is not None else ())


def _is_add(node):
    return (node.op == "call_function" and node.target in (operator.add, operator.iadd,
                                                             torch.add)) or \
        (node.op == "call_method" and node.target in ("add", "add_"))


class _Trace:
    """An abstract evaluation of the traced graph, node by node, into layers.

    Each node's value says what it computes from the model's input (_Value). An nn.Linear
    applied to a value closes its open layer and opens a new one; a pointwise op appends to the
    open layer's chain; a product of two values forms a gated layer (two Linears of one input,
    or one Linear's two halves), `x * sigmoid(beta * x)` (swish) or `x * x` (square); the input
    added to the last layer's output is the residual. A value is taken by one node, except
    where it becomes a gate (two Linears take it), a swish pattern, or the residual's input;
    anything else is a branch the spec cannot express."""

    def __init__(self, graph, ctx):
        self.graph = graph
        self.ctx, self.modules = ctx, ctx.modules
        self.values = {}    # node -> its _Value (aliasing nodes share one)
        self.linears = {}   # a Linear's path -> the node that called it
        self.forks = {}     # frozenset of two Linear nodes -> (the node they both took, first,
        #                     second), until a gated product joins them

    # -- the walk --

    def run(self):
        nodes = [n for n in self.graph.nodes if n.op != "get_attr"]
        inputs = [n for n in nodes if n.op == "placeholder"]
        used = [n for n in inputs if n.users]
        if not inputs:
            raise ChainError("fx_chain: the model's forward takes no input: %s" % WHY)
        if len(used) > 1:
            raise ChainError("fx_chain: the model's forward uses %d inputs (%s); the chain takes "
                             "one: %s" % (len(used), ", ".join(n.name for n in used), WHY))
        if used and used[0] is not inputs[0]:
            raise ChainError("fx_chain: the model's forward uses its input '%s', not its first "
                             "one '%s': %s" % (used[0].name, inputs[0].name, WHY))
        self.values[inputs[0]] = _Value("input", inputs[0])
        for node in nodes:
            if node.op == "output":
                return self.finish(node)
            if node.op != "placeholder":
                self.step(node)
        raise ChainError("fx_chain: the traced graph has no output: %s" % WHY)

    def step(self, node):
        call = classify(node, self.modules)
        if call is None:
            if not (self.chunk(node) or self.getitem(node)):
                self.unknown(node)
            return
        if call.token == "linear":
            return self.linear(node, call)
        if call.token in ("identity", "dropout"):
            return self.identity(node, call)
        operands = self.operands(node)
        if not operands:
            raise _refuse(node, self.modules, "which computes on parameters or constants only")
        if call.token in BINARY and len(operands) == 2:
            return self.two_values(node, call, operands)
        if len(operands) > 1:
            raise _refuse(node, self.modules, "which takes the running value twice")
        (source, value), = operands
        if call.token not in BINARY and call.bound["input"] is not source:
            self.check_open(node, source, value)
            raise _refuse(node, self.modules, "which does not take the running value as its "
                          "input")
        self.check_open(node, source, value)
        self.use(node, operands)
        self.ctx.out_features = value.open.width
        op = to_op(node, self.ctx, call, source)
        if op.token in BINARY and isinstance(op.args[0], str):
            self.check_own_param(node, value, op.args[0])
        self.assign(node, value, value.append(node, op), call.inplace)

    def operands(self, node):
        """[(node, value)] for each node among the arguments that is not a parameter."""
        found = []
        for used in _node_uses((node.args, node.kwargs)):
            if used.op == "get_attr":
                continue
            value = self.values.get(used)
            if value is None:
                raise _refuse(node, self.modules, "which takes node '%s', not a value computed "
                              "from the input" % used.name)
            found.append((used, value))
        return found

    def assign(self, node, old, new, inplace):
        """node's value is new; an in-place op gives it to every node that held old too."""
        self.values[node] = new
        if inplace:
            for other, value in list(self.values.items()):
                if value is old:
                    self.values[other] = new

    # -- who takes what --

    def use(self, node, operands, allowed=()):
        """Records that node takes each value; a value already taken is a branch, unless it is
        one of `allowed`."""
        done = []
        for source, value in operands:
            if any(value is seen for seen in done):
                continue
            done.append(value)
            if value.users and not any(value is ok for ok in allowed):
                raise self.branch(node, source, value.users[0])
            value.users.append(node)

    def branch(self, node, source, first):
        hint = "; the one sum fusedlinear runs adds the model's input to its output (a residual)" \
            if _is_add(node) else ""
        if node.op == "call_module" and isinstance(self.modules.get(node.target), nn.Linear) \
                and first.op == "call_module":
            hint = "; two Linears take one value only as a gated pair, act(w1(x)) * w3(x)"
        return ChainError("fx_chain: cannot express %s, which takes node '%s' again after node "
                          "'%s' took it (a branch)%s: %s"
                          % (describe(node, self.modules), source.name, first.name, hint, WHY))

    def first_op(self, node):
        later = [n for n in self.graph.nodes if n.op == "call_module"
                 and isinstance(self.modules.get(n.target), nn.Linear)]
        where = ("; node '%s' comes later" % later[0].name) if later and later[0] is not node \
            else ""
        return ChainError("fx_chain: the first op is %s, not an nn.Linear applied to the input%s: "
                          "%s" % (describe(node, self.modules), where, WHY))

    def check_open(self, node, source, value):
        """ChainError unless an op may append to value's open layer."""
        if value.kind == "input":
            if not self.linears:
                raise self.first_op(node)
            raise self.branch(node, source, value.users[0])
        if value.kind == "residual":
            raise _refuse(node, self.modules, "an op after the residual (node '%s'): the input "
                          "added to the output is the model's last op" % value.node.name)
        if value.kind == "chunk":
            raise _refuse(node, self.modules, "which takes the two halves of node '%s' "
                          "(chunk) as one value" % value.node.name)
        if value.open.gate is not None:
            raise _refuse(node, self.modules, "an op after the gated product (node '%s'): a "
                          "gated layer ends at its product, and the next Linear starts a new "
                          "layer" % value.open.product.name)

    def check_own_param(self, node, value, key):
        for index, layer in enumerate(value.layers):
            if key in layer.params():
                raise _refuse(node, self.modules, "with the parameter '%s', which layer %d (%s) "
                              "uses too: each layer's chain takes its own parameters"
                              % (key, index + 1, layer.ref))

    def check_limits(self, layer):
        """ChainError where a layer's chain holds more ops or parameter terms than fusedlinear's
        interpreter takes (the reasons `run` would give)."""
        spec = ",".join(str(op) for op, _ in layer.ops)
        if len(layer.ops) > MAX_CHAIN_OPS:
            raise ChainError("fx_chain: cannot express the chain of %s (node '%s' is op %d): "
                             "chain %s: %d ops; a run-time chain takes at most %d: %s"
                             % (layer.ref, layer.ops[MAX_CHAIN_OPS][1].name, MAX_CHAIN_OPS + 1,
                                excerpt(spec, 0)[0], len(layer.ops), MAX_CHAIN_OPS, WHY))
        terms = [node for op, node in layer.ops
                 if op.token in BINARY and isinstance(op.args[0], str)]
        if len(terms) > MAX_PARAMETER_TERMS:
            raise ChainError("fx_chain: cannot express the chain of %s (node '%s' is parameter "
                             "term %d): chain %s: more than %d parameter terms (add, sub, mul "
                             "or div by a parameter): %s"
                             % (layer.ref, terms[MAX_PARAMETER_TERMS].name,
                                MAX_PARAMETER_TERMS + 1, excerpt(spec, 0)[0], MAX_PARAMETER_TERMS,
                                WHY))

    # -- the kinds of node --

    def unknown(self, node):
        if self.linears:
            raise _refuse(node, self.modules)
        uses = [n for n in _node_uses((node.args, node.kwargs)) if n.op != "get_attr"]
        if any(self.values.get(n) is not None and self.values[n].kind == "input" for n in uses):
            raise self.first_op(node)
        raise _refuse(node, self.modules)

    def linear(self, node, call):
        source = call.bound["input"]
        path = node.target
        if path in self.linears:
            raise _refuse(node, self.modules, "a Linear used twice (node '%s' called it first): "
                          "each Linear of a model is called once" % self.linears[path].name)
        if not isinstance(source, torch.fx.Node) or source.op == "get_attr":
            raise _refuse(node, self.modules, "which takes no value computed from the input")
        value = self.operands(node)[0][1]
        if value.kind in ("residual", "chunk"):
            self.check_open(node, source, value)
        if value.kind == "layer" and value.open.ref.half >= 0 and value.open.gate is None:
            raise self.lone_half(node, value)
        if not LINEAR_PATH.match(path):
            raise _refuse(node, self.modules, "an nn.Linear at '%s', a path the spec cannot name "
                          "([A-Za-z0-9_.])" % path)
        if value.users:
            first = value.users[0]
            if len(value.users) > 1 or first not in self.linears.values():
                raise self.branch(node, source, first)
            self.forks[frozenset((first, node))] = (source, first, node)
        value.users.append(node)
        self.linears[path] = node
        width = self.modules[path].out_features
        opened = _Layer(LinearRef(path), node, width, value)
        self.values[node] = _Value("layer", node, value.layers + ((value.open,) if value.kind
                                                                  == "layer" else ()), opened)

    def lone_half(self, node, value):
        return _refuse(node, self.modules, "which takes half %d of node '%s' (chunk) without "
                       "multiplying it by the other half (a gated pair: act(a) * b)"
                       % (value.open.ref.half, value.open.node.name))

    def identity(self, node, call):
        if call.token == "dropout":
            _dropout(node, self.ctx, call)
        source = call.bound["input"]
        if not isinstance(source, torch.fx.Node) or source.op == "get_attr":
            raise _refuse(node, self.modules, "which computes on parameters or constants only")
        self.values[node] = self.operands(node)[0][1]

    def chunk(self, node):
        """a, b = y.chunk(2, -1) of a Linear's output y: its two halves."""
        if not ((node.op == "call_function" and node.target is torch.chunk)
                or (node.op == "call_method" and node.target == "chunk")):
            return False
        bound = _bind(node, (IN, ("chunks", REQUIRED), ("dim", 0)), self.modules)
        source = bound["input"]
        if not isinstance(source, torch.fx.Node) or source.op == "get_attr":
            raise _refuse(node, self.modules, "which splits a parameter")
        value = self.operands(node)[0][1]
        if value.kind == "input":
            self.check_open(node, source, value)
        if bound["chunks"] != 2 or bound["dim"] != -1 or isinstance(bound["dim"], bool):
            raise _refuse(node, self.modules, "with chunks=%r, dim=%r (only chunk(2, -1): a "
                          "Linear's output in two halves)" % (bound["chunks"], bound["dim"]))
        if value.kind != "layer" or value.open.ops or value.open.gate is not None \
                or value.open.ref.half >= 0:
            raise _refuse(node, self.modules, "which splits node '%s', not a Linear's output as "
                          "it is (chunk(2, -1) comes right after the Linear)" % source.name)
        if value.open.width % 2:
            raise _refuse(node, self.modules, "which splits node '%s' of width %d in two halves"
                          % (source.name, value.open.width))
        self.use(node, [(source, value)])
        self.values[node] = _Value("chunk", node, value.layers, value.open)
        return True

    def getitem(self, node):
        """One half of a chunk: a layer of its own, the Linear's half."""
        if not (node.op == "call_function" and node.target is operator.getitem):
            return False
        source, index = (tuple(node.args) + (None, None))[:2]
        value = self.values.get(source) if isinstance(source, torch.fx.Node) else None
        if value is None or value.kind != "chunk" or node.kwargs:
            return False
        if isinstance(index, bool) or index not in (0, 1, -1, -2):
            raise _refuse(node, self.modules, "with the index %r (chunk(2, -1) gives halves 0 "
                          "and 1)" % (index,))
        half = index % 2
        if half not in value.halves:
            linear = value.open
            opened = _Layer(LinearRef(linear.ref.path, half), linear.node, linear.width // 2,
                            linear.source)
            value.halves[half] = _Value("layer", node, value.layers, opened)
        self.values[node] = value.halves[half]
        return True

    def two_values(self, node, call, operands):
        (a, first), (b, second) = operands
        if a is not call.bound["input"]:
            (a, first), (b, second) = (b, second), (a, first)
        if call.token == "mul":
            return self.product(node, call, (a, first), (b, second))
        if call.token == "add" and (first.kind == "input") != (second.kind == "input"):
            return self.residual(node, call, (a, first), (b, second))
        if first is second:
            raise _refuse(node, self.modules, "which takes the running value twice")
        self.use(node, operands)
        raise _refuse(node, self.modules, "which takes two values computed from the input (node "
                      "'%s' and node '%s'); only a product may join two (a gated pair), and a "
                      "sum only the model's input and its output (a residual)" % (a.name, b.name))

    def residual(self, node, call, left, right):
        """x + f(x): the model's input added to the last layer's output."""
        (x, _), (h, value) = (left, right) if left[1].kind == "input" else (right, left)
        if value.kind != "layer":
            self.check_open(node, h, value)
        if value.open.ref.half >= 0 and value.open.gate is None:
            raise self.lone_half(node, value)
        if call.bound.get("alpha", 1) != 1:
            raise _refuse(node, self.modules, "with alpha=%r (only alpha=1)"
                          % (call.bound["alpha"],))
        layers = value.all_layers()
        width_in = self.modules[layers[0].ref.path].in_features
        if width_in != value.open.width:
            raise _refuse(node, self.modules, "which adds the model's input (%d wide) to node "
                          "'%s' (%d wide): a residual needs the same widths"
                          % (width_in, h.name, value.open.width))
        self.use(node, [(h, value)])
        self.values[x].users.append(node)
        result = _Value("residual", node, layers)
        self.assign(node, left[1], result, call.inplace)

    def product(self, node, call, left, right):
        (a, first), (b, second) = left, right
        if first is second:  # x * x
            self.check_open(node, a, first)
            self.use(node, [left])
            return self.assign(node, first, first.append(node, Op("square")), call.inplace)
        for (_, value), (_, other) in ((left, right), (right, left)):
            beta = self.swish_beta(other, value)
            if beta is not None:  # x * sigmoid(beta * x)
                self.use(node, [left, right], allowed=(value,))
                swish = value.append(node, Op("swish", [beta]))
                return self.assign(node, first, swish, call.inplace)
        gated = self.gate(node, left, right)
        if gated is not None:
            return self.assign(node, first, gated, call.inplace)
        self.use(node, [left, right])
        for source, value in (left, right):
            self.check_open(node, source, value)
        raise _refuse(node, self.modules, "which multiplies node '%s' by node '%s', neither a "
                      "gated pair (act(w1(x)) * w3(x), two Linears of one value, or act(a) * b "
                      "of a, b = w13(x).chunk(2, -1)) nor x * sigmoid(x) or x * x"
                      % (a.name, b.name))

    @staticmethod
    def swish_beta(other, value):
        """beta where other is sigmoid(value) (1) or sigmoid(beta * value), else None."""
        if other.kind != "layer" or other.op is None or other.op.token != "sigmoid":
            return None
        parent = other.parent
        if parent is value:
            return 1.0
        if parent.op is not None and parent.op.token == "mul" and parent.parent is value \
                and not isinstance(parent.op.args[0], str):
            return parent.op.args[0]
        return None

    def gate(self, node, left, right):
        """The gated layer act(w1(x)) * w3(x) (or act(a) * b of a Linear's halves), or None."""
        (_, first), (_, second) = left, right
        if first.kind != "layer" or second.kind != "layer":
            return None
        one, two = first.open, second.open
        if one.source is not two.source or one.gate is not None or two.gate is not None:
            return None
        halves = one.node is two.node
        if halves and {one.ref.half, two.ref.half} != {0, 1}:
            return None
        if not halves and (one.ref.half >= 0 or two.ref.half >= 0):
            return None
        if one.ops and two.ops:
            raise _refuse(node, self.modules, "a gated product of two values with ops (%s and "
                          "%s): the gate, one of the two, is a Linear's output as it is"
                          % (one.spec(), two.spec()))
        main, gate = (two, one) if two.ops else (one, two)
        if not halves:
            widths = [self.modules[layer.ref.path].out_features for layer in (one, two)]
            if widths[0] != widths[1]:
                raise _refuse(node, self.modules, "which multiplies node '%s' (%d wide) by node "
                              "'%s' (%d wide): a gated pair's Linears take the same shape"
                              % (one.node.name, widths[0], two.node.name, widths[1]))
        self.use(node, [left, right])
        self.forks.pop(frozenset((one.node, two.node)), None)
        return _Value("layer", node, first.layers, main.gated(gate.ref, node))

    def finish(self, output):
        result = output.args[0]
        if not isinstance(result, torch.fx.Node):
            raise ChainError("fx_chain: the model returns a %s, not one tensor: %s"
                             % (type(result).__name__, WHY))
        value = self.values.get(result)
        if not self.linears:
            raise ChainError("fx_chain: the model has no nn.Linear applied to its input: %s" % WHY)
        if value is None:
            raise _refuse(output, self.modules, "which returns node '%s', not a value computed "
                          "from the input" % result.name)
        if value.kind == "chunk":
            raise _refuse(output, self.modules, "which returns the two halves of node '%s' (a "
                          "tuple), not one tensor" % value.node.name)
        if value.kind == "input":
            raise self.branch(output, result, value.users[0])
        self.use(output, [(result, value)])
        if value.open is not None and value.open.ref.half >= 0 and value.open.gate is None:
            raise self.lone_half(output, value)
        for source, first, second in self.forks.values():
            raise self.branch(second, source, first)
        layers = value.all_layers()
        for layer in layers:
            self.check_limits(layer)
        model = ModelSpec([layer.spec() for layer in layers], value.kind == "residual")
        if model.single and not model.layers[0].ops:
            raise ChainError("fx_chain: the model is its Linear alone; a chain names at least "
                             "one op after it (docs/CHAINS.md)")
        return model


class _Proxy(torch.fx.Proxy):
    """torch.fx's Proxy, which unpacks `a, b = proxy` (`a, b = self.w13(x).chunk(2, -1)`) by
    the caller's instruction at its offset, as torch 2 does: torch 1.13 looks it up by index
    (f_lasti // 2), which Python 3.11's inline caches put off, so that it fails there."""

    def __iter__(self):
        frame = inspect.currentframe().f_back
        for instruction in dis.get_instructions(frame.f_code):
            if instruction.offset == frame.f_lasti:
                if instruction.opname == "UNPACK_SEQUENCE":
                    return (self[i] for i in range(instruction.argval))
                break
        return self.tracer.iter(self)


class _Tracer(torch.fx.Tracer):
    def proxy(self, node):
        return _Proxy(node, self)


def symbolic_trace(model):
    """torch.fx.symbolic_trace of the model in eval mode (its proxies unpack as _Proxy says);
    every module's mode is restored."""
    if not isinstance(model, nn.Module):
        raise ChainError("fx_chain: %s is not an nn.Module" % type(model).__name__)
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        tracer = _Tracer()
        graph = tracer.trace(model)
        return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)
    except Exception as error:  # torch.fx raises many kinds; the first line says why
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ChainError("fx_chain: torch.fx cannot trace the model (%s: %s); the chain needs a "
                         "forward without data-dependent control flow (docs/CHAINS.md)"
                         % (type(error).__name__, reason)) from error
    finally:
        for module, training in modes:
            module.training = training


def trace_model(model):
    """The ModelSpec of a model: its layers (each an nn.Linear and the pointwise ops after it,
    a gated pair, or a Linear's two halves) and whether it adds its input to its output.
    ChainError, one line naming the node, for anything fusedlinear cannot run."""
    graph_module = symbolic_trace(model)
    return graph_spec(graph_module.graph, dict(model.named_modules()),
                      model.state_dict(keep_vars=True))


def graph_spec(graph, modules, state):
    """The ModelSpec of a torch.fx graph traced from a model whose modules by path and state dict
    (keep_vars=True) are `modules` and `state`: trace_model's recogniser, for a graph of one
    input; fusedlinear.fuse runs it on the stretches of a larger model's graph. ChainError as
    trace_model."""
    return _Trace(graph, _Context(modules, state)).run()


def chain_ops(model):
    """(linear_name, [Op]) for a model that is one nn.Linear followed by the vocabulary's ops;
    ChainError for a layered model (trace_model describes those)."""
    model_spec = trace_model(model)
    if not model_spec.single:
        raise ChainError("fx_chain: the model is layered (%s), not one Linear and its chain; "
                         "trace_model describes it" % model_spec)
    layer = model_spec.layers[0]
    return layer.linear.path, layer.ops


def chain_spec(model):
    """(linear_name, spec) in canonical form.

    For one nn.Linear followed by pointwise ops: the Linear's module path and its chain spec,
    e.g. ('fc', 'gelu(tanh),silu,clamp(-2,2)'), exactly as before layered models existed. For a
    layered model (several Linears, a gated pair, a Linear's halves or a residual): '' and the
    layered spec, e.g. ('', 'fc1:gelu|fc2'), ('', 'x+(w1:silu*w3|w2)'): the spec names its
    Linears itself. ChainError when the model is neither (docs/CHAINS.md)."""
    model_spec = trace_model(model)
    if model_spec.single:
        layer = model_spec.layers[0]
        return layer.linear.path, ",".join(str(op) for op in layer.ops)
    return "", str(model_spec)


# ---------------------------------------------------------------------------------------------
# Files.

def check_target(path, overwrite):
    """ChainError unless path may be written: absent, or a regular file with overwrite."""
    if os.path.islink(path):
        raise ChainError("fx_chain: %s is a symbolic link; give the path of the file itself" % path)
    if os.path.exists(path):
        if not os.path.isfile(path):
            raise ChainError("fx_chain: %s exists and is not a regular file" % path)
        if not overwrite:
            raise ChainError("fx_chain: %s exists; pass overwrite=True (--overwrite) to replace "
                             "it" % path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ChainError("fx_chain: the folder %s does not exist" % folder)


def write_file(path, overwrite, write):
    """Calls write(file) on a new temporary file beside path, then renames it over path, so
    that path is either as it was or complete."""
    check_target(path, overwrite)
    folder, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(folder, ".%s.tmp-%s" % (name, secrets.token_hex(6)))
    try:
        with open(temporary, "xb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        check_target(path, overwrite)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _metadata(linear, spec):
    return {"version": FORMAT_VERSION, "chain": spec, "linear": linear}


def save_with_chain(model, path, overwrite=False):
    """Writes model.state_dict() to path with the chain spec inside; returns (linear, spec) as
    chain_spec does: for a layered model ('', the layered spec), written as the chain with ''
    as the Linear.

    A path ending in .safetensors is written with safetensors.torch (metadata keys
    fusedlinear.version, fusedlinear.chain, fusedlinear.linear); any other with torch.save,
    the spec in state_dict._metadata["fusedlinear"], so torch.load returns the same state dict
    and model.load_state_dict(torch.load(path)) works as before. An existing file is kept
    unless overwrite=True. ChainError (nothing written) when the model cannot be expressed."""
    linear, spec = chain_spec(model)
    state = model.state_dict()
    _check_runnable(state, linear, spec)
    if str(path).endswith(".safetensors"):
        _save_safetensors(state, str(path), linear, spec, overwrite)
    else:
        _save_torch(state, str(path), linear, spec, overwrite)
    return linear, spec


def _check_runnable(state, linear, spec):
    """ChainError where `fusedlinear run` would refuse the file (app/model_setup.cpp, the
    loader), in its words: a Linear of no features, widths from layer to layer that do not
    chain, keys the spec does not use, float64 values beyond float32's range."""
    model = parse_model_spec(spec) if is_layered_spec(spec) else ModelSpec(
        [Layer(LinearRef(linear), parse_spec(spec))])
    widths = []
    for i, layer in enumerate(model.layers):
        key = layer.linear.path + ".weight"
        out, width_in = state[key].shape
        for size, what in ((out, "output"), (width_in, "input")):
            if size == 0:
                raise ChainError("fx_chain: %s has shape %s: a Linear of 0 %s features; "
                                 "fusedlinear runs Linears of at least 1 of each"
                                 % (key, list(state[key].shape), what))
        if layer.gate is not None and layer.gate.path != layer.linear.path:
            gate = layer.gate.path + ".weight"
            if state[gate].shape != state[key].shape:
                raise ChainError("fx_chain: %s is %s and its gate's %s is %s: a gated pair's "
                                 "Linears take the same shape" % (
                                     key, list(state[key].shape), gate, list(state[gate].shape)))
        if i > 0 and width_in != widths[-1]:
            raise ChainError("fx_chain: %s takes %d inputs, but the layer before (%s) gives %d"
                             % (key, width_in, model.layers[i - 1].linear.path, widths[-1]))
        widths.append(out // 2 if layer.linear.half >= 0 else out)
    used = set()
    for layer in model.layers:
        for ref in (layer.linear, layer.gate):
            if ref is not None:
                used.update((ref.path + ".weight", ref.path + ".bias"))
        used.update(arg for op in layer.ops if op.token in BINARY
                    for arg in op.args if isinstance(arg, str))
    unexpected = [key for key in state if key not in used]
    if unexpected:
        raise ChainError("fx_chain: unexpected key(s) %s; the model expects %s, and fusedlinear "
                         "refuses others (unless --no-strict): remove them from the model, or "
                         "save a module of the Linears and their chains alone"
                         % (", ".join(unexpected), ", ".join(k for k in state if k in used)))
    for key, tensor in state.items():
        if tensor.dtype == torch.float64:
            beyond = int((torch.isfinite(tensor) & (tensor.abs() > torch.finfo(torch.float32).max))
                         .sum())
            if beyond:
                raise ChainError("fx_chain: %s: cannot convert Double to the model's Float: %d "
                                 "finite values beyond its range would become infinite"
                                 % (key, beyond))


def _save_torch(state, path, linear, spec, overwrite):
    metadata = getattr(state, "_metadata", None)
    if metadata is None:
        raise ChainError("fx_chain: the state dict has no _metadata to carry the chain")
    if METADATA_KEY in metadata:
        raise ChainError("fx_chain: the model has a submodule named '%s', whose entry in the "
                         "state dict's _metadata the chain would replace; rename it" % METADATA_KEY)
    metadata[METADATA_KEY] = _metadata(linear, spec)
    write_file(path, overwrite, lambda file: torch.save(state, file))


def _save_safetensors(state, path, linear, spec, overwrite):
    try:
        import safetensors.torch
    except ImportError:
        raise ChainError("fx_chain: writing %s needs the safetensors package (pip install "
                         "safetensors); or save to a .pt file" % path) from None
    tensors = {key: value.detach().cpu().contiguous() for key, value in state.items()}
    metadata = {METADATA_KEY + "." + key: str(value)
                for key, value in _metadata(linear, spec).items()}
    try:
        data = safetensors.torch.save(tensors, metadata=metadata)
    except Exception as error:  # e.g. tensors sharing memory
        raise ChainError("fx_chain: safetensors cannot write %s: %s"
                         % (path, str(error).strip().splitlines()[0])) from error
    write_file(path, overwrite, lambda file: file.write(data))


def _safetensors_metadata(path):
    """The __metadata__ of a .safetensors file, read from its header (no package needed)."""
    with open(path, "rb") as file:
        size = file.read(8)
        if len(size) != 8:
            raise ChainError("fx_chain: %s is neither a torch.save file nor a .safetensors file"
                             % path)
        length = struct.unpack("<Q", size)[0]
        if length > min(100 << 20, os.path.getsize(path) - 8):
            raise ChainError("fx_chain: %s is neither a torch.save file nor a .safetensors file"
                             % path)
        try:
            header = json.loads(file.read(length).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ChainError("fx_chain: %s: the safetensors header is not JSON" % path) from None
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _torch_metadata(path):
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # a torch without weights_only
        state = torch.load(path, map_location="cpu")
    except Exception as error:
        raise ChainError("fx_chain: torch.load cannot read %s (%s)" % (
            path, str(error).strip().splitlines()[0] if str(error).strip() else
            type(error).__name__)) from error
    metadata = getattr(state, "_metadata", None) or {}
    return metadata.get(METADATA_KEY) or {}


def read_chain(path):
    """{'version', 'chain', 'linear'} from a file save_with_chain wrote (.pt or .safetensors);
    ChainError when the file carries no chain. For a layered spec 'linear' is '' (the spec names
    its Linears; fusedlinear ignores the entry), also where the file has none."""
    with open(path, "rb") as file:
        is_zip = file.read(4) == b"PK\x03\x04"
    if is_zip:
        found = _torch_metadata(path)
    else:
        raw = _safetensors_metadata(path)
        found = {key[len(METADATA_KEY) + 1:]: value for key, value in raw.items()
                 if key.startswith(METADATA_KEY + ".")}
    if "chain" in found and "linear" not in found and is_layered_spec(str(found["chain"])):
        found["linear"] = ""
    if "chain" not in found or "linear" not in found:
        raise ChainError("fx_chain: %s carries no chain (save it with save_with_chain)" % path)
    # Exactly the version written (an int in .pt files, its decimal text in .safetensors), as
    # fusedlinear reads it: "01" or " 1" is no version it knows.
    version = found.get("version")
    if isinstance(version, bool) or str(version) != str(FORMAT_VERSION):
        raise ChainError("fx_chain: %s carries a chain of version %s; this reads version %d"
                         % (path, repr(version) if isinstance(version, str) else version,
                            FORMAT_VERSION))
    return {"version": FORMAT_VERSION, "chain": str(found["chain"]),
            "linear": str(found["linear"])}
