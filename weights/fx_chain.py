#!/usr/bin/env python3
"""Describe a PyTorch `Linear -> pointwise ops` model as a chain spec and save it for fusedlinear.

fusedlinear runs any model that is one nn.Linear followed by pointwise ops of a fixed
vocabulary; the model is described by a chain spec such as `gelu(tanh),silu,clamp(-2,2)`
(docs/CHAINS.md). This module traces a model with torch.fx, writes its spec in canonical form
and saves its state dict with the spec inside:

    from fx_chain import save_with_chain, chain_spec
    linear_name, spec = chain_spec(model)          # ('fc', 'gelu(tanh),silu,clamp(-2,2)')
    save_with_chain(model, "mynet.pt")             # or "mynet.safetensors"

Anything the spec cannot express is refused with a ChainError, one line naming the node.

Command line:
    python3 weights/fx_chain.py --demo NAME|all --out DIR [--batch N --in-features I
        --out-features O --seed S --overwrite]     writes DIR/NAME.pt, NAME_input.pt, NAME_output.pt
    python3 weights/fx_chain.py --list-demos       the demo models and their specs
    python3 weights/fx_chain.py --spec FILE        the chain and Linear a saved file carries

Runs with torch 1.13 (Debian's python3-torch) and torch 2.x; .safetensors files need the
safetensors package to be written (reading the spec back needs nothing).
"""
import argparse
import decimal
import json
import math
import operator
import os
import re
import secrets
import struct
import sys

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

METADATA_KEY = "fusedlinear"
FORMAT_VERSION = 1
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
    "silu": (), "swish": (), "mish": (), "sigmoid": (), "tanh": (),
    "hardtanh": (("min_val", -1.0), ("max_val", 1.0)),
    "clamp": (("min", -INF), ("max", INF)),
    "hardsigmoid": (), "hardswish": (),
    "softplus": (("beta", 1.0), ("threshold", 20.0)),
    "softsign": (), "tanhshrink": (), "logsigmoid": (),
    "add": (("other", REQUIRED),), "sub": (("other", REQUIRED),),
    "mul": (("other", REQUIRED),), "div": (("other", REQUIRED),),
}
BINARY = ("add", "sub", "mul", "div")
GELU_APPROXIMATIONS = ("none", "tanh")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
NUMBER = re.compile(r"[+-]?(inf|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)\Z")


class Op:
    """One op of a chain: a vocabulary token and its arguments in canonical order (numbers as
    floats, identifiers as str)."""

    def __init__(self, token, args=()):
        self.token, self.args = token, tuple(args)

    def __str__(self):
        if self.token == "gelu":
            return "gelu" if self.args[0] == "none" else "gelu(%s)" % self.args[0]
        if not self.args:
            return self.token
        return "%s(%s)" % (self.token, ",".join(
            a if isinstance(a, str) else format_number(a) for a in self.args))

    def __repr__(self):
        return "Op(%r, %r)" % (self.token, self.args)

    def __eq__(self, other):
        return isinstance(other, Op) and str(self) == str(other)


def _spec_error(text, position, what):
    return ChainError("fx_chain: chain spec %r, at character %d: %s" % (text, position + 1, what))


def _tokens(text):
    """The spec's tokens (value, position): names/numbers, '(', ')', ',', '='."""
    tokens, i = [], 0
    pattern = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*|[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
                         r"|[+-]inf|[(),=])")
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return tokens
        match = pattern.match(text, i)
        if not match:
            raise _spec_error(text, i, "unexpected %r" % text[i])
        tokens.append((match.group(1), match.start(1)))
        i = match.end()


def _value(text, word, position):
    if NUMBER.match(word):
        return float(word)
    if IDENTIFIER.match(word):
        return word
    raise _spec_error(text, position, "%r is neither a number nor an identifier" % word)


def _bind_spec_args(text, token, given, position):
    """given: [(name or None, value, position)] -> the op's arguments in canonical order."""
    params = VOCABULARY[token]
    if not params and given:
        raise _spec_error(text, position, "%s takes no arguments" % token)
    if len(given) > len(params):
        raise _spec_error(text, position, "%s takes at most %d arguments (%s)" % (
            token, len(params), ", ".join(name for name, _ in params)))
    values, places, named = {}, {}, False
    for index, (name, value, where) in enumerate(given):
        if name is None:
            if named:
                raise _spec_error(text, where, "a positional argument after a named one")
            name = params[index][0]
        else:
            named = True
            if name not in dict(params):
                raise _spec_error(text, where, "%s has no argument %r" % (token, name))
        if name in values:
            raise _spec_error(text, where, "%s's argument %r given twice" % (token, name))
        values[name], places[name] = value, where
    if token == "clamp" and not values:
        raise _spec_error(text, position, "clamp needs min or max")
    args = []
    for name, default in params:
        value = values.get(name, default)
        if value is REQUIRED:
            raise _spec_error(text, position, "%s needs its argument %r" % (token, name))
        args.append(_check_spec_arg(text, token, name, value, places.get(name, position)))
    return args


def _check_spec_arg(text, token, name, value, position):
    if token == "gelu":
        if value not in GELU_APPROXIMATIONS:
            raise _spec_error(text, position, "gelu's approximate is none or tanh, not %r" % value)
        return value
    if isinstance(value, str) and token not in BINARY:
        raise _spec_error(text, position, "%s's %s is a number, not %r" % (token, name, value))
    if isinstance(value, float) and math.isnan(value):
        raise _spec_error(text, position, "NaN is not a value")
    return value if isinstance(value, str) else float32(value)


def parse_spec(text):
    """The ops of a chain spec (docs/CHAINS.md's grammar) as a list of Op; ChainError if it is
    not one."""
    tokens = _tokens(text) + [("", len(text))]
    ops, i = [], 0
    while True:
        word, position = tokens[i]
        if word not in VOCABULARY:
            what = "expected an op" if word in ("", ",", "(", ")", "=") else "unknown op %r" % word
            raise _spec_error(text, position, what)
        i += 1
        given = []
        if tokens[i][0] == "(":
            i += 1
            while True:
                name, (word_v, where) = None, tokens[i]
                if tokens[i + 1][0] == "=" and IDENTIFIER.match(word_v):
                    name, i = word_v, i + 2
                    word_v, where = tokens[i]
                if word_v in ("", ",", "(", ")", "="):
                    raise _spec_error(text, where, "expected a value")
                given.append((name, _value(text, word_v, where), where))
                i += 1
                if tokens[i][0] == ")":
                    i += 1
                    break
                if tokens[i][0] != ",":
                    raise _spec_error(text, tokens[i][1], "expected ',' or ')'")
                i += 1
        ops.append(Op(word, _bind_spec_args(text, word, given, position)))
        if tokens[i][0] == "":
            return ops
        if tokens[i][0] != ",":
            raise _spec_error(text, tokens[i][1], "expected ',' between ops")
        i += 1


def canonical_spec(text):
    """The canonical form of a chain spec: `leaky_relu(negative_slope=0.2)` -> `leaky_relu(0.2)`."""
    return ",".join(str(op) for op in parse_spec(text))


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
    """What the translation of one node needs: the modules, the state dict's tensors, the
    Linear's out_features."""

    def __init__(self, model, modules):
        self.modules = modules
        self.state = model.state_dict(keep_vars=True)
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


class _Walk:
    """The graph's nodes in order, one running value: `live` holds the nodes that hold it now
    (several after an in-place op or an identity), `consumed[n]` the node that replaced n."""

    def __init__(self, graph_module, ctx):
        self.nodes = [n for n in graph_module.graph.nodes if n.op not in ("get_attr",)]
        self.ctx, self.modules = ctx, ctx.modules
        self.live, self.consumed = set(), {}
        self.linear, self.ops = None, []

    def run(self):
        inputs = [n for n in self.nodes if n.op == "placeholder"]
        used = [n for n in inputs if n.users]
        if not inputs:
            raise ChainError("fx_chain: the model's forward takes no input: %s" % WHY)
        if len(used) > 1:
            raise ChainError("fx_chain: the model's forward uses %d inputs (%s); the chain takes "
                             "one: %s" % (len(used), ", ".join(n.name for n in used), WHY))
        if used and used[0] is not inputs[0]:
            raise ChainError("fx_chain: the model's forward uses its input '%s', not its first "
                             "one '%s': %s" % (used[0].name, inputs[0].name, WHY))
        self.live = {inputs[0]}
        calls = [n for n in self.nodes if n.op != "placeholder"]
        index = 0
        while index < len(calls):
            index += self.step(calls, index)
        return self.linear, self.ops

    def step(self, calls, index):
        """Handles calls[index]; returns how many nodes it took (2 for swish)."""
        node = calls[index]
        if node.op == "output":
            self.finish(node)
            return 1
        if self.linear is None:
            self.first(node, calls)
            return 1
        call = classify(node, self.modules)
        if call is None:
            raise _refuse(node, self.modules)
        if call.token == "linear":
            raise _refuse(node, self.modules, "a second Linear")
        running = self.running_input(node)
        if call.token == "sigmoid" and not call.inplace and self.is_swish(node, calls, index):
            self.advance(calls[index + 1], Op("swish"), self.mul_inplace(calls[index + 1]))
            return 2
        self.advance(node, to_op(node, self.ctx, call, running), call.inplace
                     or call.token in ("identity", "dropout"))
        return 1

    def first(self, node, calls):
        """The first op: an nn.Linear applied to the input."""
        call = classify(node, self.modules) if node.op != "output" else None
        if call is not None and call.token == "linear" and call.bound["input"] in self.live:
            self.linear = node
            self.ctx.out_features = self.modules[node.target].out_features
            self.live, self.consumed = {node}, {n: node for n in self.live}
            return
        later = [n for n in calls if n.op == "call_module" and isinstance(
            self.modules.get(n.target), nn.Linear)]
        where = ("; node '%s' comes later" % later[0].name) if later and later[0] is not node \
            else ""
        raise ChainError("fx_chain: the first op is %s, not an nn.Linear applied to the input%s: "
                         "%s" % (describe(node, self.modules), where, WHY))

    def running_input(self, node):
        """The one running value a node takes; ChainError for none, two, or a consumed one."""
        uses = _node_uses((node.args, node.kwargs))
        values = [n for n in uses if n.op != "get_attr"]
        for value in values:
            if value not in self.live:
                self.branch(node, value)
        if not values:
            raise _refuse(node, self.modules, "which computes on parameters or constants only")
        if len(values) > 1:
            raise _refuse(node, self.modules, "which takes the running value twice")
        return values[0]

    def branch(self, node, value):
        later = self.consumed.get(value)
        if later is None:
            raise _refuse(node, self.modules, "which takes node '%s', not the running value"
                          % value.name)
        raise ChainError("fx_chain: cannot express %s, which takes node '%s' again after node "
                         "'%s' took it (a branch): %s"
                         % (describe(node, self.modules), value.name, later.name, WHY))

    def is_swish(self, sigmoid, calls, index):
        """sigmoid(x) * x (either order, any mul form) with the mul right after the sigmoid."""
        if index + 1 >= len(calls) or set(sigmoid.users) != {calls[index + 1]}:
            return False
        mul = calls[index + 1]
        call = classify(mul, self.modules)
        if call is None or call.token != "mul" or set(call.bound) != {"input", "other"}:
            return False
        operands = [call.bound["input"], call.bound["other"]]
        return sigmoid in operands and any(o is not sigmoid and o in self.live for o in operands) \
            and sigmoid.args[0] in self.live and len(sigmoid.all_input_nodes) == 1

    def mul_inplace(self, mul):
        call = classify(mul, self.modules)
        return call.inplace and call.bound["input"] in self.live

    def advance(self, node, op, aliases):
        """The running value is now node's; with aliases (in-place op, identity) the nodes that
        held it before hold it still."""
        if op is not None:
            self.ops.append(op)
        if aliases:
            self.live.add(node)
        else:
            for old in self.live:
                self.consumed[old] = node
            self.live = {node}

    def finish(self, output):
        result = output.args[0]
        if not isinstance(result, torch.fx.Node):
            raise ChainError("fx_chain: the model returns a %s, not one tensor: %s"
                             % (type(result).__name__, WHY))
        if self.linear is None:
            raise ChainError("fx_chain: the model has no nn.Linear applied to its input: %s" % WHY)
        if result not in self.live:
            self.branch(output, result)
        if not self.ops:
            raise ChainError("fx_chain: the model is its Linear alone; a chain names at least "
                             "one op after it (docs/CHAINS.md)")


def _trace(model):
    """torch.fx.symbolic_trace of the model in eval mode; every module's mode is restored."""
    if not isinstance(model, nn.Module):
        raise ChainError("fx_chain: %s is not an nn.Module" % type(model).__name__)
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as error:  # torch.fx raises many kinds; the first line says why
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ChainError("fx_chain: torch.fx cannot trace the model (%s: %s); the chain needs a "
                         "forward without data-dependent control flow (docs/CHAINS.md)"
                         % (type(error).__name__, reason)) from error
    finally:
        for module, training in modes:
            module.training = training


def chain_ops(model):
    """(linear_name, [Op]) for a model that is nn.Linear followed by the vocabulary's ops."""
    graph_module = _trace(model)
    modules = dict(model.named_modules())
    linear, ops = _Walk(graph_module, _Context(model, modules)).run()
    return linear.target, ops


def chain_spec(model):
    """(linear_name, spec): the module path of the model's nn.Linear and its chain spec in
    canonical form, e.g. ('fc', 'gelu(tanh),silu,clamp(-2,2)'). ChainError when the model is
    not nn.Linear followed by pointwise ops of the vocabulary (docs/CHAINS.md)."""
    linear, ops = chain_ops(model)
    return linear, ",".join(str(op) for op in ops)


# ---------------------------------------------------------------------------------------------
# Files.

def _check_target(path, overwrite):
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


def _write(path, overwrite, write):
    """Calls write(file) on a new temporary file beside path, then renames it over path, so
    that path is either as it was or complete."""
    _check_target(path, overwrite)
    folder, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(folder, ".%s.tmp-%s" % (name, secrets.token_hex(6)))
    try:
        with open(temporary, "xb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        _check_target(path, overwrite)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _metadata(linear, spec):
    return {"version": FORMAT_VERSION, "chain": spec, "linear": linear}


def save_with_chain(model, path, overwrite=False):
    """Writes model.state_dict() to path with the chain spec inside; returns (linear, spec).

    A path ending in .safetensors is written with safetensors.torch (metadata keys
    fusedlinear.version, fusedlinear.chain, fusedlinear.linear); any other with torch.save,
    the spec in state_dict._metadata["fusedlinear"], so torch.load returns the same state dict
    and model.load_state_dict(torch.load(path)) works as before. An existing file is kept
    unless overwrite=True. ChainError (nothing written) when the model cannot be expressed."""
    linear, spec = chain_spec(model)
    state = model.state_dict()
    if str(path).endswith(".safetensors"):
        _save_safetensors(state, str(path), linear, spec, overwrite)
    else:
        _save_torch(state, str(path), linear, spec, overwrite)
    return linear, spec


def _save_torch(state, path, linear, spec, overwrite):
    metadata = getattr(state, "_metadata", None)
    if metadata is None:
        raise ChainError("fx_chain: the state dict has no _metadata to carry the chain")
    if METADATA_KEY in metadata:
        raise ChainError("fx_chain: the model has a submodule named '%s', whose entry in the "
                         "state dict's _metadata the chain would replace; rename it" % METADATA_KEY)
    metadata[METADATA_KEY] = _metadata(linear, spec)
    _write(path, overwrite, lambda file: torch.save(state, file))


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
    _write(path, overwrite, lambda file: file.write(data))


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
    ChainError when the file carries no chain."""
    with open(path, "rb") as file:
        is_zip = file.read(4) == b"PK\x03\x04"
    if is_zip:
        found = _torch_metadata(path)
    else:
        raw = _safetensors_metadata(path)
        found = {key[len(METADATA_KEY) + 1:]: value for key, value in raw.items()
                 if key.startswith(METADATA_KEY + ".")}
    if "chain" not in found or "linear" not in found:
        raise ChainError("fx_chain: %s carries no chain (save it with save_with_chain)" % path)
    version = int(found.get("version", 0))
    if version != FORMAT_VERSION:
        raise ChainError("fx_chain: %s carries a chain of version %s; this reads version %d"
                         % (path, found.get("version"), FORMAT_VERSION))
    return {"version": version, "chain": str(found["chain"]), "linear": str(found["linear"])}


# ---------------------------------------------------------------------------------------------
# The demo models.

class GeluDropoutSilu(nn.Module):
    """Linear -> GELU -> Dropout(0.1) -> SiLU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.gelu = nn.GELU()
        self.dropout = nn.Dropout(0.1)
        self.silu = nn.SiLU()

    def forward(self, x):
        return self.silu(self.dropout(self.gelu(self.fc(x))))


class LeakySigmoid(nn.Module):
    """Linear -> LeakyReLU(0.2) -> Sigmoid, as an nn.Sequential (the Linear is 'block.0')."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(in_features, out_features), nn.LeakyReLU(0.2),
                                   nn.Sigmoid())

    def forward(self, x):
        return self.block(x)


class HardswishClamp(nn.Module):
    """Linear -> Hardswish -> clamp(-1, 2)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.clamp(F.hardswish(self.fc(x)), -1, 2)


class MyNet(nn.Module):
    """Linear -> GELU(approximate='tanh') -> SiLU -> clamp(-2, 2)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        x = self.act(self.fc(x))
        x = F.silu(x)
        return x.clamp(-2, 2)


def reference_model(name):
    """The reference model class NAME (SwishChain, MishMish) of weights/export.py, beside this
    file: imported when a demo needs it, so that this module alone still needs only torch."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export

    return getattr(export, name)


class ScaledSoftplus(nn.Module):
    """Linear -> + shift (per feature) -> softplus(beta=2, threshold=10) -> * scale (a scalar
    parameter of shape []) -> ELU(0.5)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(out_features))
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        x = self.fc(x) + self.shift
        x = F.softplus(x, beta=2, threshold=10)
        x = x * self.scale
        return F.elu(x, alpha=0.5)


class ClampDiv(nn.Module):
    """Linear -> clamp(min=0) -> / 3 -> + 0.5 -> clamp(max=1): one-sided clamps, numbers."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = torch.clamp(self.fc(x), min=0.0)
        x = x / 3
        x = x + 0.5
        return torch.clamp(x, max=1.0)


class SeluCeluSoftsign(nn.Module):
    """Linear -> SELU -> CELU(0.7) -> / temperature (shape [1]) -> Softsign -> - 0.25."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.temperature = nn.Parameter(torch.tensor([0.8]))

    def forward(self, x):
        x = torch.selu(self.fc(x))
        x = F.celu(x, 0.7)
        x = x / self.temperature
        x = F.softsign(x)
        return x - 0.25


class Relu6Tanhshrink(nn.Module):
    """Linear -> * gain (per feature) -> ReLU6 -> - offset (a per-feature buffer) -> Tanhshrink
    -> LogSigmoid -> Hardsigmoid -> ReLU (in place)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.gain = nn.Parameter(torch.randn(out_features) * 4)
        self.register_buffer("offset", torch.rand(out_features) * 3)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.fc(x) * self.gain
        x = F.relu6(x)
        x = x - self.offset
        x = F.tanhshrink(x)
        x = F.logsigmoid(x)
        x = F.hardsigmoid(x)
        return self.relu(x)


class Demo:
    """A demo model: how to build it and its default shape."""

    def __init__(self, build, in_features=64, out_features=48):
        self.build, self.in_features, self.out_features = build, in_features, out_features


DEMOS = {
    "gelu_dropout_silu": Demo(GeluDropoutSilu),
    "leaky_sigmoid": Demo(LeakySigmoid),
    "hardswish_clamp": Demo(HardswishClamp),
    "mynet": Demo(MyNet, 512, 256),
    "swish_chain": Demo(lambda i, o: reference_model("SwishChain")(i, o, (o,))),
    "mish_mish": Demo(lambda i, o: reference_model("MishMish")(i, o)),
    "scaled_softplus": Demo(ScaledSoftplus),
    "clamp_div": Demo(ClampDiv),
    "selu_celu_softsign": Demo(SeluCeluSoftsign),
    "relu6_tanhshrink": Demo(Relu6Tanhshrink),
}


def build_demo(name, in_features=None, out_features=None):
    """The demo model NAME, at its default shape unless one is given."""
    demo = DEMOS[name]
    return demo.build(in_features or demo.in_features, out_features or demo.out_features)


def export_demo(name, out, batch=5, in_features=None, out_features=None, seed=0,
                overwrite=False):
    """Writes out/NAME.pt (weights and chain), NAME_input.pt (torch.rand(batch, in_features))
    and NAME_output.pt (the model's output); returns (linear, spec, paths). Seeded as
    weights/export.py is: the model first, then the input."""
    torch.manual_seed(seed)
    model = build_demo(name, in_features, out_features).eval()
    x = torch.rand(batch, model_in_features(model))
    with torch.no_grad():
        y = model(x)
    paths = [os.path.join(out, name + suffix) for suffix in (".pt", "_input.pt", "_output.pt")]
    for path in paths:
        _check_target(path, overwrite)
    linear, spec = save_with_chain(model, paths[0], overwrite=overwrite)
    _write(paths[1], overwrite, lambda file: torch.save(x, file))
    _write(paths[2], overwrite, lambda file: torch.save(y, file))
    return linear, spec, paths


def model_in_features(model):
    return next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features


# ---------------------------------------------------------------------------------------------
# Command line.

def _arguments(argv):
    parser = argparse.ArgumentParser(
        description="Save Linear -> pointwise models with their chain spec for fusedlinear.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--demo", choices=tuple(DEMOS) + ("all",), help="export a demo model")
    what.add_argument("--list-demos", action="store_true", help="print each demo and its spec")
    what.add_argument("--spec", metavar="FILE", help="print the chain and Linear FILE carries")
    parser.add_argument("--out", help="folder for --demo's files (created if missing)")
    parser.add_argument("--batch", type=int, default=5, help="rows of the input (default 5)")
    parser.add_argument("--in-features", type=int, help="default: the demo's (64; mynet 512)")
    parser.add_argument("--out-features", type=int, help="default: the demo's (48; mynet 256)")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing files")
    args = parser.parse_args(argv)
    if args.demo and not args.out:
        parser.error("--demo needs --out")
    if not args.demo and (args.out or args.overwrite or args.in_features or args.out_features):
        parser.error("--out, --overwrite and the shape options go with --demo")
    for name in ("batch", "in_features", "out_features"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            parser.error("--%s must be positive" % name.replace("_", "-"))
    return args


def _list_demos():
    for name in DEMOS:
        linear, spec = chain_spec(build_demo(name, 4, 3))
        demo = DEMOS[name]
        print("%-20s %s (linear '%s', %d -> %d)" % (name, spec, linear, demo.in_features,
                                                      demo.out_features))


def _export_demos(args):
    os.makedirs(args.out, exist_ok=True)
    for name in DEMOS if args.demo == "all" else (args.demo,):
        linear, spec, paths = export_demo(name, args.out, args.batch, args.in_features,
                                          args.out_features, args.seed, args.overwrite)
        print("%s: %s (linear '%s') -> %s" % (name, spec, linear, ", ".join(paths)))


def main(argv=None):
    args = _arguments(argv)
    try:
        if args.list_demos:
            _list_demos()
        elif args.spec:
            found = read_chain(args.spec)
            print("chain: %s\nlinear: %s" % (found["chain"], found["linear"]))
        else:
            _export_demos(args)
    except ChainError as error:
        print(error, file=sys.stderr)
        return 2
    except OSError as error:
        where = "%s: " % error.filename if error.filename else ""
        print("fx_chain: %s%s" % (where, error.strerror or error), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
