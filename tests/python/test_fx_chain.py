"""Tests of weights/fx_chain.py: chain specs of models, refusals, numbers, files, command line.

    /usr/bin/python3 tests/python/test_fx_chain.py --exporter weights/fx_chain.py [-k PATTERN]

Checks the canonical spec of every demo model (and that each spec, evaluated with the formulas
of docs/CHAINS.md, gives the model's output), every PyTorch form of every vocabulary op, the
layered models (MLPs, gated pairs, chunked Linears, residuals: their specs, each evaluated
against the model's output, and their refusals), the refusals and their messages, the canonical
numbers and the spec grammar (chain and layered specs), the .pt and .safetensors files
(skipped, with a message, where the safetensors package is missing) and the command line.
Exits non-zero on any failure.
"""
import argparse
import importlib.util
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXPORTER = os.path.join(REPO, "weights", "fx_chain.py")
fx = None  # the module under test, loaded from --exporter in main()

# name -> (linear, canonical spec)
EXPECTED = {
    "gelu_dropout_silu": ("fc", "gelu,silu"),
    "leaky_sigmoid": ("block.0", "leaky_relu(0.2),sigmoid"),
    "hardswish_clamp": ("fc", "hardswish,clamp(-1,2)"),
    "mynet": ("fc", "gelu(tanh),silu,clamp(-2,2)"),
    "swish_chain": ("matmul", "add(add_value),swish,tanh,gelu,hardtanh(-1,1)"),
    "mish_mish": ("linear", "mish,mish"),
    "scaled_softplus": ("fc", "add(shift),softplus(2,10),mul(scale),elu(0.5)"),
    "clamp_div": ("fc", "clamp(0,inf),div(3),add(0.5),clamp(-inf,1)"),
    "selu_celu_softsign": ("fc", "selu,celu(0.7),div(temperature),softsign,sub(0.25)"),
    "relu6_tanhshrink": ("fc", "mul(gain),relu6,sub(offset),tanhshrink,logsigmoid,"
                               "hardsigmoid,relu"),
}

# layered demo name -> its canonical spec (chain_spec gives ('', spec))
LAYERED_EXPECTED = {
    "mlp_sequential": "0:gelu|2",
    "mlp_nested": "block.0:relu|block.2.0:silu|head",
    "mlp_functional": "fc1:gelu(tanh)|fc2",
    "policy_tanh": "net.0:tanh|net.2:tanh|net.4:relu|net.6",
    "swiglu": "w1:silu*w3|w2",
    "swiglu_swapped": "w1:silu*w3|w2",
    "geglu": "wi_0:gelu(tanh)*wi_1|wo",
    "swiglu_chunk": "w13[0]:silu*w13[1]|w2",
    "geglu_chunk": "proj[1]:gelu*proj[0]|out",
    "residual_mlp": "x+(fc1:gelu|fc2)",
    "residual_swiglu": "x+(ffn.w1:silu*ffn.w3|ffn.w2)",
    "quickgelu_mlp": "mlp.c_fc:swish(1.702)|mlp.c_proj",
    "relu_squared_mlp": "fc1:relu,square|fc2",
    "mlp_dropout_identity": "0:relu|4",
    "mlp_with_params": "fc1:add(shift),silu|fc2:mul(scale)",
    "mlp_mixed": "fc1:relu|fc2:leaky_relu(0.1)|fc3:hardswish,clamp(-1,1)|fc4:softplus(1,20)",
}


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# The ops as docs/CHAINS.md defines them, in float64, independent of torch.nn.functional.

def _softplus(x, beta, threshold):
    return torch.where(beta * x > threshold, x, torch.log1p(torch.exp(beta * x)) / beta)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
FORMULAS = {
    "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
    "relu6": lambda x: torch.clamp(x, 0, 6),
    "leaky_relu": lambda x, s: torch.where(x > 0, x, s * x),
    "elu": lambda x, a: torch.where(x > 0, x, a * (torch.exp(x) - 1)),
    "selu": lambda x: SELU_SCALE * torch.where(x > 0, x, SELU_ALPHA * (torch.exp(x) - 1)),
    "celu": lambda x, a: torch.clamp(x, min=0) + torch.clamp(a * (torch.exp(x / a) - 1), max=0),
    "gelu": lambda x, approximate: (
        0.5 * x * (1 + torch.erf(x / math.sqrt(2))) if approximate == "none" else
        0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "silu": lambda x: x / (1 + torch.exp(-x)),
    "swish": lambda x, beta: (1 / (1 + torch.exp(-beta * x))) * x,
    "mish": lambda x: x * torch.tanh(torch.log1p(torch.exp(x))),
    "sigmoid": lambda x: 1 / (1 + torch.exp(-x)),
    "tanh": torch.tanh,
    "hardtanh": lambda x, low, high: torch.clamp(x, low, high),
    "clamp": lambda x, low, high: torch.minimum(torch.maximum(x, torch.tensor(low).double()),
                                                torch.tensor(high).double()),
    "hardsigmoid": lambda x: torch.clamp(x / 6 + 0.5, 0, 1),
    "hardswish": lambda x: x * torch.clamp(x + 3, 0, 6) / 6,
    "softplus": _softplus,
    "softsign": lambda x: x / (1 + x.abs()),
    "tanhshrink": lambda x: x - torch.tanh(x),
    "logsigmoid": lambda x: torch.clamp(x, max=0) - torch.log1p(torch.exp(-x.abs())),
    "square": lambda x: x * x,
    "add": lambda x, v: x + v, "sub": lambda x, v: x - v,
    "mul": lambda x, v: x * v, "div": lambda x, v: x / v,
}


def run_chain(ops, state, y):
    """Each op of a chain by its formula, in float64."""
    for op in ops:
        args = [state[a].double() if isinstance(a, str) and op.token in fx.BINARY else a
                for a in op.args]
        y = FORMULAS[op.token](y, *args)
    return y


def run_linear(state, path, x):
    bias = state.get(path + ".bias")
    return F.linear(x, state[path + ".weight"].double(),
                    None if bias is None else bias.double())


def evaluate(spec, state, linear, x):
    """The chain's output, in float64: Linear, then each op of the spec by its formula."""
    return run_chain(fx.parse_spec(spec), state, run_linear(state, linear, x.double()))


def evaluate_model(spec, state, x):
    """A layered spec's output, in float64, as the grammar says: each layer chain(linear(h)),
    times gate(h) for a gated pair, or the chain on one half of the Linear's output times the
    other half; the input added at the end for a residual."""
    model = fx.parse_model_spec(spec)
    h = x.double()
    for layer in model.layers:
        y = run_linear(state, layer.linear.path, h)
        if layer.linear.half >= 0:
            width = y.shape[-1] // 2
            halves = y[..., :width], y[..., width:]
            h = run_chain(layer.ops, state, halves[layer.linear.half]) * \
                halves[1 - layer.linear.half]
        elif layer.gate is not None:
            h = run_chain(layer.ops, state, y) * run_linear(state, layer.gate.path, h)
        else:
            h = run_chain(layer.ops, state, y)
    return x.double() + h if model.residual else h


def max_difference(a, b):
    return (a.double() - b.double()).abs().max().item()


# ---------------------------------------------------------------------------------------------
# Small models for the forms and the refusals.

class Probe(nn.Module):
    """nn.Linear(4, 3) as fc, parameters of several shapes, and a forward given as a function
    (symbolic_trace traces through it)."""

    def __init__(self, forward, **modules):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.p = nn.Parameter(torch.randn(3))
        self.scalar = nn.Parameter(torch.tensor(2.0))
        self.one = nn.Parameter(torch.tensor([0.5]))
        self.row = nn.Parameter(torch.randn(1, 3))
        self.register_buffer("steps", torch.arange(3))
        self.register_buffer("scratch", torch.ones(3), persistent=False)
        self.plain = torch.ones(3)
        for name, module in modules.items():
            setattr(self, name, module)
        self._forward = forward

    def forward(self, x):
        return self._forward(self, x)


def spec_of(forward, **modules):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # F.sigmoid and F.tanh are deprecated
        return fx.chain_spec(Probe(forward, **modules))[1]


def _branch(y):
    return torch.relu(y) + y


def _square(y):
    return y * y


def _pow_in_place(y):
    y **= 2
    return y


def _sigmoid_in_place_then_square(y):
    torch.sigmoid_(y)
    return y * y


def _swish_apart(y):
    s = torch.sigmoid(1.5 * y)
    return y * s


def _relu_in_place_then_return(y):
    y.relu_()
    return y


def _add_one_augmented(y):
    y += 1
    return y


def _discard_relu(y):
    torch.relu(y)
    return y


# (what, forward, modules, spec)
FORMS = [
    ("F.relu", lambda s, x: F.relu(s.fc(x)), {}, "relu"),
    ("torch.relu", lambda s, x: torch.relu(s.fc(x)), {}, "relu"),
    ("x.relu()", lambda s, x: s.fc(x).relu(), {}, "relu"),
    ("nn.ReLU", lambda s, x: s.act(s.fc(x)), {"act": nn.ReLU()}, "relu"),
    ("nn.ReLU(inplace)", lambda s, x: s.act(s.fc(x)), {"act": nn.ReLU(inplace=True)}, "relu"),
    ("F.relu(inplace)", lambda s, x: F.relu(s.fc(x), inplace=True), {}, "relu"),
    ("torch.relu_", lambda s, x: torch.relu_(s.fc(x)), {}, "relu"),
    ("x.relu_() then x", lambda s, x: _relu_in_place_then_return(s.fc(x)), {}, "relu"),
    ("F.relu6", lambda s, x: F.relu6(s.fc(x)), {}, "relu6"),
    ("nn.ReLU6", lambda s, x: s.act(s.fc(x)), {"act": nn.ReLU6()}, "relu6"),
    ("F.leaky_relu default", lambda s, x: F.leaky_relu(s.fc(x)), {}, "leaky_relu(0.01)"),
    ("F.leaky_relu positional", lambda s, x: F.leaky_relu(s.fc(x), 0.2), {}, "leaky_relu(0.2)"),
    ("F.leaky_relu keyword", lambda s, x: F.leaky_relu(s.fc(x), negative_slope=0.3), {},
     "leaky_relu(0.3)"),
    ("nn.LeakyReLU", lambda s, x: s.act(s.fc(x)), {"act": nn.LeakyReLU(0.2)}, "leaky_relu(0.2)"),
    ("F.elu", lambda s, x: F.elu(s.fc(x)), {}, "elu(1)"),
    ("nn.ELU", lambda s, x: s.act(s.fc(x)), {"act": nn.ELU(alpha=0.5)}, "elu(0.5)"),
    ("F.selu", lambda s, x: F.selu(s.fc(x)), {}, "selu"),
    ("torch.selu", lambda s, x: torch.selu(s.fc(x)), {}, "selu"),
    ("nn.SELU", lambda s, x: s.act(s.fc(x)), {"act": nn.SELU()}, "selu"),
    ("F.celu", lambda s, x: F.celu(s.fc(x), alpha=2.0), {}, "celu(2)"),
    ("nn.CELU", lambda s, x: s.act(s.fc(x)), {"act": nn.CELU()}, "celu(1)"),
    ("F.gelu", lambda s, x: F.gelu(s.fc(x)), {}, "gelu"),
    ("F.gelu tanh", lambda s, x: F.gelu(s.fc(x), approximate="tanh"), {}, "gelu(tanh)"),
    ("nn.GELU", lambda s, x: s.act(s.fc(x)), {"act": nn.GELU()}, "gelu"),
    ("nn.GELU tanh", lambda s, x: s.act(s.fc(x)), {"act": nn.GELU(approximate="tanh")},
     "gelu(tanh)"),
    ("F.silu", lambda s, x: F.silu(s.fc(x)), {}, "silu"),
    ("nn.SiLU", lambda s, x: s.act(s.fc(x)), {"act": nn.SiLU()}, "silu"),
    ("sigmoid(x) * x", lambda s, x: (lambda y: torch.sigmoid(y) * y)(s.fc(x)), {}, "swish"),
    ("x * sigmoid(x)", lambda s, x: (lambda y: y * torch.sigmoid(y))(s.fc(x)), {}, "swish"),
    ("x.sigmoid() * x", lambda s, x: (lambda y: y.sigmoid() * y)(s.fc(x)), {}, "swish"),
    ("torch.mul(x, sigmoid(x))", lambda s, x: (lambda y: torch.mul(y, torch.sigmoid(y)))(
        s.fc(x)), {}, "swish"),
    ("F.mish", lambda s, x: F.mish(s.fc(x)), {}, "mish"),
    ("nn.Mish", lambda s, x: s.act(s.fc(x)), {"act": nn.Mish()}, "mish"),
    ("torch.sigmoid", lambda s, x: torch.sigmoid(s.fc(x)), {}, "sigmoid"),
    ("F.sigmoid", lambda s, x: F.sigmoid(s.fc(x)), {}, "sigmoid"),
    ("nn.Sigmoid", lambda s, x: s.act(s.fc(x)), {"act": nn.Sigmoid()}, "sigmoid"),
    ("x.sigmoid()", lambda s, x: s.fc(x).sigmoid(), {}, "sigmoid"),
    ("sigmoid(x) * 2", lambda s, x: torch.sigmoid(s.fc(x)) * 2, {}, "sigmoid,mul(2)"),
    ("torch.tanh", lambda s, x: torch.tanh(s.fc(x)), {}, "tanh"),
    ("F.tanh", lambda s, x: F.tanh(s.fc(x)), {}, "tanh"),
    ("nn.Tanh", lambda s, x: s.act(s.fc(x)), {"act": nn.Tanh()}, "tanh"),
    ("x.tanh()", lambda s, x: s.fc(x).tanh(), {}, "tanh"),
    ("F.hardtanh", lambda s, x: F.hardtanh(s.fc(x)), {}, "hardtanh(-1,1)"),
    ("F.hardtanh args", lambda s, x: F.hardtanh(s.fc(x), -2, max_val=0.5), {},
     "hardtanh(-2,0.5)"),
    ("nn.Hardtanh", lambda s, x: s.act(s.fc(x)), {"act": nn.Hardtanh(0, 3)}, "hardtanh(0,3)"),
    ("torch.clamp both", lambda s, x: torch.clamp(s.fc(x), -2, 2), {}, "clamp(-2,2)"),
    ("torch.clamp min", lambda s, x: torch.clamp(s.fc(x), min=0.0), {}, "clamp(0,inf)"),
    ("torch.clip max", lambda s, x: torch.clip(s.fc(x), max=1), {}, "clamp(-inf,1)"),
    ("x.clamp", lambda s, x: s.fc(x).clamp(-0.5, 0.25), {}, "clamp(-0.5,0.25)"),
    ("x.clip", lambda s, x: s.fc(x).clip(min=-1), {}, "clamp(-1,inf)"),
    ("torch.clamp_min", lambda s, x: torch.clamp_min(s.fc(x), 0.1), {}, "clamp(0.1,inf)"),
    ("torch.clamp_max", lambda s, x: torch.clamp_max(s.fc(x), 3), {}, "clamp(-inf,3)"),
    ("x.clamp_", lambda s, x: s.fc(x).clamp_(0, 1), {}, "clamp(0,1)"),
    ("F.hardsigmoid", lambda s, x: F.hardsigmoid(s.fc(x)), {}, "hardsigmoid"),
    ("nn.Hardsigmoid", lambda s, x: s.act(s.fc(x)), {"act": nn.Hardsigmoid()}, "hardsigmoid"),
    ("F.hardswish", lambda s, x: F.hardswish(s.fc(x)), {}, "hardswish"),
    ("nn.Hardswish", lambda s, x: s.act(s.fc(x)), {"act": nn.Hardswish()}, "hardswish"),
    ("F.softplus", lambda s, x: F.softplus(s.fc(x)), {}, "softplus(1,20)"),
    ("F.softplus args", lambda s, x: F.softplus(s.fc(x), 2, threshold=10), {}, "softplus(2,10)"),
    ("nn.Softplus", lambda s, x: s.act(s.fc(x)), {"act": nn.Softplus(beta=0.5)},
     "softplus(0.5,20)"),
    ("F.softsign", lambda s, x: F.softsign(s.fc(x)), {}, "softsign"),
    ("nn.Softsign", lambda s, x: s.act(s.fc(x)), {"act": nn.Softsign()}, "softsign"),
    ("F.tanhshrink", lambda s, x: F.tanhshrink(s.fc(x)), {}, "tanhshrink"),
    ("nn.Tanhshrink", lambda s, x: s.act(s.fc(x)), {"act": nn.Tanhshrink()}, "tanhshrink"),
    ("F.logsigmoid", lambda s, x: F.logsigmoid(s.fc(x)), {}, "logsigmoid"),
    ("nn.LogSigmoid", lambda s, x: s.act(s.fc(x)), {"act": nn.LogSigmoid()}, "logsigmoid"),
    ("x + p", lambda s, x: s.fc(x) + s.p, {}, "add(p)"),
    ("p + x", lambda s, x: s.p + s.fc(x), {}, "add(p)"),
    ("torch.add(x, scalar)", lambda s, x: torch.add(s.fc(x), s.scalar), {}, "add(scalar)"),
    ("x.add(1, alpha=1)", lambda s, x: s.fc(x).add(1, alpha=1), {}, "add(1)"),
    ("x.add_(one)", lambda s, x: s.fc(x).add_(s.one), {}, "add(one)"),
    ("x - 0.5", lambda s, x: s.fc(x) - 0.5, {}, "sub(0.5)"),
    ("torch.sub(x, p)", lambda s, x: torch.sub(s.fc(x), s.p), {}, "sub(p)"),
    ("x * 3", lambda s, x: s.fc(x) * 3, {}, "mul(3)"),
    ("2 * x", lambda s, x: 2 * s.fc(x), {}, "mul(2)"),
    ("scalar * x", lambda s, x: s.scalar * s.fc(x), {}, "mul(scalar)"),
    ("x.mul(p)", lambda s, x: s.fc(x).mul(s.p), {}, "mul(p)"),
    ("x / 3", lambda s, x: s.fc(x) / 3, {}, "div(3)"),
    ("torch.div(x, one)", lambda s, x: torch.div(s.fc(x), s.one), {}, "div(one)"),
    ("x.div(p)", lambda s, x: s.fc(x).div(s.p), {}, "div(p)"),
    ("x += 1", lambda s, x: _add_one_augmented(s.fc(x)), {}, "add(1)"),
    ("nn.Dropout, nn.Identity, contiguous", lambda s, x: s.d(s.i(s.fc(x).contiguous())).tanh(),
     {"d": nn.Dropout(0.3), "i": nn.Identity()}, "tanh"),
    ("F.dropout(training=False)", lambda s, x: F.dropout(s.fc(x), 0.5, training=False).tanh(),
     {}, "tanh"),
    ("F.dropout(training=self.training)", lambda s, x: F.dropout(
        s.fc(x), 0.5, training=s.training).tanh(), {}, "tanh"),
    ("fc(input=x)", lambda s, x: s.fc(input=x).relu(), {}, "relu"),
    ("y * sigmoid(1.702 * y)", lambda s, x: (lambda y: y * torch.sigmoid(1.702 * y))(s.fc(x)),
     {}, "swish(1.702)"),
    ("sigmoid(1.702 * y) * y", lambda s, x: (lambda y: torch.sigmoid(1.702 * y) * y)(s.fc(x)),
     {}, "swish(1.702)"),
    ("y * (1.702 * y).sigmoid()", lambda s, x: (lambda y: y * (1.702 * y).sigmoid())(s.fc(x)),
     {}, "swish(1.702)"),
    ("y * sigmoid(y * 1.702)", lambda s, x: (lambda y: y * torch.sigmoid(y * 1.702))(s.fc(x)),
     {}, "swish(1.702)"),
    ("torch.mul(y, nn.Sigmoid()(0.25 * y))", lambda s, x: (lambda y: torch.mul(
        y, s.act(0.25 * y)))(s.fc(x)), {"act": nn.Sigmoid()}, "swish(0.25)"),
    ("y * sigmoid(1.0 * y)", lambda s, x: (lambda y: y * torch.sigmoid(1.0 * y))(s.fc(x)), {},
     "swish"),
    ("swish(beta), then ops", lambda s, x: _swish_apart(s.fc(x)).tanh(), {}, "swish(1.5),tanh"),
    ("torch.square", lambda s, x: torch.square(s.fc(x)), {}, "square"),
    ("y.square()", lambda s, x: s.fc(x).square(), {}, "square"),
    ("y.square_()", lambda s, x: s.fc(x).square_(), {}, "square"),
    ("y ** 2", lambda s, x: s.fc(x) ** 2, {}, "square"),
    ("y ** 2.0", lambda s, x: s.fc(x) ** 2.0, {}, "square"),
    ("y **= 2", lambda s, x: _pow_in_place(s.fc(x)), {}, "square"),
    ("torch.pow(y, 2)", lambda s, x: torch.pow(s.fc(x), 2), {}, "square"),
    ("y.pow(2)", lambda s, x: s.fc(x).pow(2), {}, "square"),
    ("y.pow_(2)", lambda s, x: s.fc(x).pow_(2), {}, "square"),
    ("y * y", lambda s, x: _square(s.fc(x)), {}, "square"),
    ("torch.mul(y, y)", lambda s, x: (lambda y: torch.mul(y, y))(s.fc(x)), {}, "square"),
    ("relu, square, sub", lambda s, x: F.relu(s.fc(x)).square() - 1, {}, "relu,square,sub(1)"),
    ("sigmoid in place, then y * y", lambda s, x: _sigmoid_in_place_then_square(s.fc(x)), {},
     "sigmoid,square"),
    ("nn.Dropout on the input", lambda s, x: torch.tanh(s.fc(s.d(x))), {"d": nn.Dropout(0.2)},
     "tanh"),
    ("in-place functions", lambda s, x: torch.tanh_(torch.sigmoid_(F.hardtanh_(F.elu_(
        F.leaky_relu_(s.fc(x), 0.5)), -2, 2))), {},
     "leaky_relu(0.5),elu(1),hardtanh(-2,2),sigmoid,tanh"),
    ("more in-place functions", lambda s, x: torch.clamp_min_(torch.celu_(torch.selu_(
        s.fc(x))), 0.5), {}, "selu,celu(1),clamp(0.5,inf)"),
    ("torch.special.expit, torch.celu", lambda s, x: torch.celu(torch.special.expit(s.fc(x)),
                                                                0.25), {}, "sigmoid,celu(0.25)"),
]

# (what, forward, modules, strings the message must hold)
REFUSALS = [
    ("an op outside the vocabulary", lambda s, x: torch.matmul(s.fc(x), s.fc.weight), {},
     ["cannot express call_function torch.matmul (node 'matmul')"]),
    ("no Linear", lambda s, x: torch.relu(x), {},
     ["the first op is call_function torch.relu (node 'relu'), not an nn.Linear"]),
    ("a Linear that is not first", lambda s, x: s.fc(torch.relu(x)), {},
     ["the first op is call_function torch.relu (node 'relu')", "node 'fc' comes later"]),
    ("a functional linear", lambda s, x: F.linear(x, s.fc.weight, s.fc.bias).relu(), {},
     ["call_function torch.nn.functional.linear (node 'linear')"]),
    ("a Linear used twice", lambda s, x: s.fc(s.fc(x)).relu(), {},
     ["call_module fc (torch.nn.Linear) (node 'fc_1'), a Linear used twice (node 'fc' called it "
      "first)"]),
    ("a branch", lambda s, x: _branch(s.fc(x)), {},
     ["call_function operator.add (node 'add')", "takes node 'fc' again after node 'relu'",
      "(a branch)"]),
    ("a residual of other widths", lambda s, x: s.fc(x) + x, {},
     ["(node 'add')", "adds the model's input (4 wide) to node 'fc' (3 wide)", "same widths"]),
    ("the input subtracted", lambda s, x: s.fc(x) - x, {},
     ["call_function operator.sub (node 'sub')", "takes node 'x' again after node 'fc'"]),
    ("an op left unused", lambda s, x: _discard_relu(s.fc(x)), {},
     ["the output (node 'output')", "takes node 'fc' again after node 'relu'"]),
    ("x + x", lambda s, x: (lambda y: y + y)(s.fc(x)), {},
     ["call_function operator.add (node 'add')", "takes the running value twice"]),
    ("relu(x) * x", lambda s, x: (lambda y: torch.relu(y) * y)(s.fc(x)), {},
     ["call_function operator.mul (node 'mul')", "takes node 'fc' again after node 'relu'",
      "(a branch)"]),
    ("x * sigmoid(p * x)", lambda s, x: (lambda y: y * torch.sigmoid(s.p * y))(s.fc(x)), {},
     ["(node 'mul_1')", "takes node 'fc' again after node 'mul' took it (a branch)"]),
    ("x * sigmoid(x / 2)", lambda s, x: (lambda y: y * torch.sigmoid(y / 2))(s.fc(x)), {},
     ["(node 'mul')", "takes node 'fc' again after node 'truediv' took it (a branch)"]),
    ("x ** 3", lambda s, x: s.fc(x) ** 3, {},
     ["call_function operator.pow (node 'pow_1')", "with the exponent 3 (only 2: square)"]),
    ("torch.pow(x, p)", lambda s, x: torch.pow(s.fc(x), s.scalar), {},
     ["call_function torch.pow (node 'pow_1')", "whose exponent is a tensor, not a number"]),
    ("2 ** x", lambda s, x: 2 ** s.fc(x), {},
     ["(node 'pow_1')", "which does not take the running value as its input"]),
    ("a parameter of the wrong shape", lambda s, x: s.fc(x) + s.row, {},
     ["(node 'add')", "parameter 'row' of shape [1, 3]", "[3], [] or [1]"]),
    ("an integer buffer", lambda s, x: s.fc(x) * s.steps, {},
     ["(node 'mul')", "parameter 'steps' of dtype int64"]),
    ("a tensor outside the state dict", lambda s, x: s.fc(x) * s.scratch, {},
     ["(node 'mul')", "tensor 'scratch', which is not in the state dict"]),
    ("a plain tensor attribute", lambda s, x: s.fc(x) * s.plain, {},
     ["tensor 'plain', which is not in the state dict"]),
    ("a tensor made in forward", lambda s, x: s.fc(x) * torch.tensor(2.0), {},
     ["tensor '_tensor_constant0', which is not in the state dict"]),
    ("arithmetic on parameters", lambda s, x: s.fc(x) * (s.p * 2), {},
     ["(node 'mul')", "computes on parameters or constants only"]),
    ("v - x", lambda s, x: 1 - s.fc(x), {},
     ["call_function operator.sub (node 'sub')", "(v - x)"]),
    ("v / x", lambda s, x: s.p / s.fc(x), {},
     ["call_function operator.truediv (node 'truediv')", "(v / x)"]),
    ("torch.add with alpha", lambda s, x: torch.add(s.fc(x), s.p, alpha=2), {},
     ["call_function torch.add (node 'add')", "alpha=2"]),
    ("floor division", lambda s, x: torch.div(s.fc(x), 2, rounding_mode="floor"), {},
     ["call_function torch.div (node 'div')", "rounding_mode='floor'"]),
    ("an in-place op on a parameter", lambda s, x: s.p.add_(s.fc(x)), {},
     ["call_method add_ (node 'add_')", "writes into its first operand"]),
    ("training-mode dropout", lambda s, x: F.dropout(s.fc(x), 0.1).tanh(), {},
     ["call_function torch.nn.functional.dropout (node 'dropout')", "training=True"]),
    ("an unknown module", lambda s, x: s.norm(s.fc(x)), {"norm": nn.LayerNorm(3)},
     ["cannot express call_module norm (torch.nn.LayerNorm) (node 'norm')"]),
    ("a module outside the vocabulary", lambda s, x: s.act(s.fc(x)), {"act": nn.Softmax(-1)},
     ["call_module act (torch.nn.Softmax) (node 'act')"]),
    ("a method outside the vocabulary", lambda s, x: s.fc(x).exp(), {},
     ["cannot express call_method exp (node 'exp')"]),
    ("negation", lambda s, x: -s.fc(x), {}, ["call_function operator.neg (node 'neg')"]),
    ("a tensor clamp bound", lambda s, x: torch.clamp(s.fc(x), min=s.p), {},
     ["call_function torch.clamp (node 'clamp')", "min is a tensor"]),
    ("a NaN argument", lambda s, x: F.leaky_relu(s.fc(x), float("nan")), {},
     ["(node 'leaky_relu')", "negative_slope is NaN"]),
    ("an unknown argument", lambda s, x: torch.add(s.fc(x), 1, out=None), {},
     ["call_function torch.add (node 'add')", "argument 'out'"]),
    ("a tuple output", lambda s, x: (s.fc(x).relu(), x), {}, ["returns a tuple, not one tensor"]),
    ("a Linear alone", lambda s, x: s.fc(x), {}, ["its Linear alone"]),
    ("data-dependent control flow", lambda s, x: s.fc(x).relu() if x.sum() > 0 else x, {},
     ["torch.fx cannot trace the model"]),
]


# ---------------------------------------------------------------------------------------------
# Layered models: a module of the given members (Linears, other modules, parameters) and a
# forward given as a function.

class Net(nn.Module):
    def __init__(self, forward, **members):
        super().__init__()
        for name, member in members.items():
            setattr(self, name, member)
        self._forward = forward

    def forward(self, x):
        return self._forward(self, x)


IN, HID, OUT = 6, 10, 4


def lin(i, o, bias=True):
    return nn.Linear(i, o, bias=bias)


def mlp(**members):
    """fc1: IN -> HID, fc2: HID -> OUT, and the members given."""
    return dict(dict(fc1=lin(IN, HID), fc2=lin(HID, OUT)), **members)


def glu(i=IN, **members):
    """w1, w3: i -> HID, w2: HID -> OUT (LLaMA's names), and the members given."""
    return dict(dict(w1=lin(i, HID), w2=lin(HID, OUT), w3=lin(i, HID)), **members)


def chunked(out=OUT, **members):
    """w13: IN -> 2 HID, w2: HID -> out."""
    return dict(dict(w13=lin(IN, 2 * HID), w2=lin(HID, out)), **members)


def _chunk_method(s, x):
    a, b = s.w13(x).chunk(2, -1)
    return s.w2(F.silu(a) * b)


def _chunk_method_keyword(s, x):
    a, b = s.w13(x).chunk(2, dim=-1)
    return s.w2(a * F.silu(b))


def _chunk_function(s, x):
    a, b = torch.chunk(s.w13(x), 2, dim=-1)
    return s.w2(F.gelu(a) * b)


def _chunk_indexed(s, x):
    halves = s.w13(x).chunk(2, -1)
    return s.w2(halves[1] * torch.tanh(halves[0]))


def _chunk_bilinear(s, x):
    a, b = s.w13(x).chunk(2, -1)
    return s.w2(a * b)


def _chunk_half_param(s, x):
    a, b = s.w13(x).chunk(2, -1)
    return s.w2(F.silu(a + s.hp).square() * b)


def _chunk_residual(s, x):
    a, b = s.w13(x).chunk(2, -1)
    return x + s.w2(F.silu(a) * b)


def _chunk_last(s, x):
    a, b = s.w13(x).chunk(2, -1)
    return F.silu(a) * b


def _chunk_in_place(s, x):
    a, b = s.w13(x).chunk(2, -1)
    F.silu(a, inplace=True)
    return s.w2(a.mul_(b))


def _gate_in_place(s, x):
    g = F.silu(s.w1(x))
    g.mul_(s.w3(x))
    return s.w2(g)


def _residual_augmented(s, x):
    h = s.fc2(F.gelu(s.fc1(x)))
    h += x
    return h


def _residual_into_input(s, x):
    x += s.fc2(F.gelu(s.fc1(x)))
    return x


def _quickgelu(y):
    return y * torch.sigmoid(1.702 * y)


def _three_layers(s, x):
    h = F.relu(s.fc1(x), inplace=True)
    h = torch.clamp(s.fc2(h), -1, 1) + 0.5
    return torch.sigmoid(s.fc3(h))


def _params(s, x):
    h = F.silu(s.fc1(x) + s.shift)
    h = s.fc2(h) * s.scale
    return s.fc3(torch.tanh(h)) - s.one


# (what, forward, members (a function, called after torch.manual_seed), canonical spec)
LAYERED = [
    ("nn.Sequential(Linear, GELU, Linear)", None,
     lambda: nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10)), "0:gelu|2"),
    ("Linears one after another", lambda s, x: s.fc2(s.fc1(x)), mlp, "fc1|fc2"),
    ("a second Linear after one op", lambda s, x: s.fc2(torch.tanh(s.fc1(x))), mlp, "fc1:tanh|fc2"),
    ("fc2(gelu(fc1(x)))", lambda s, x: s.fc2(F.gelu(s.fc1(x))), mlp, "fc1:gelu|fc2"),
    ("nested Sequentials", lambda s, x: s.head(s.block(x)), lambda: dict(
        block=nn.Sequential(lin(IN, HID), nn.Tanh(), nn.Sequential(lin(HID, HID), nn.ReLU())),
        head=lin(HID, OUT)), "block.0:tanh|block.2.0:relu|head"),
    ("a Sequential inside a Sequential", None, lambda: nn.Sequential(
        nn.Sequential(lin(IN, HID), nn.SiLU()), nn.Sequential(lin(HID, OUT)), nn.Sigmoid()),
     "0.0:silu|1.0:sigmoid"),
    ("three layers, chains of several forms", _three_layers, lambda: mlp(fc2=lin(HID, HID),
                                                                          fc3=lin(HID, OUT)),
     "fc1:relu|fc2:clamp(-1,1),add(0.5)|fc3:sigmoid"),
    ("Linears without bias", None, lambda: nn.Sequential(lin(IN, HID, False), nn.ReLU(),
                                                         lin(HID, OUT, False)), "0:relu|2"),
    ("Dropout and Identity dropped", None, lambda: nn.Sequential(
        lin(IN, HID), nn.ReLU(), nn.Dropout(0.5), nn.Identity(), lin(HID, OUT), nn.Dropout()),
     "0:relu|4"),
    ("dropout on the input, F.dropout(training=self.training)", lambda s, x: s.fc2(F.dropout(
        F.elu(s.fc1(s.drop(x))), 0.3, training=s.training)), lambda: mlp(drop=nn.Dropout(0.1)),
     "fc1:elu(1)|fc2"),
    ("parameters of each layer: [width], [] and [1]", _params, lambda: mlp(
        fc2=lin(HID, HID), fc3=lin(HID, OUT), shift=nn.Parameter(torch.randn(HID)),
        scale=nn.Parameter(torch.tensor(0.5)), one=nn.Parameter(torch.tensor([0.25]))),
     "fc1:add(shift),silu|fc2:mul(scale),tanh|fc3:sub(one)"),
    ("LLaMA's SwiGLU", lambda s, x: s.w2(F.silu(s.w1(x)) * s.w3(x)),
     lambda: dict(w1=lin(IN, HID, False), w2=lin(HID, OUT, False), w3=lin(IN, HID, False)),
     "w1:silu*w3|w2"),
    ("SwiGLU, the product the other way round", lambda s, x: s.w2(s.w3(x) * F.silu(s.w1(x))),
     glu, "w1:silu*w3|w2"),
    ("GeGLU", lambda s, x: s.w2(F.gelu(s.w1(x)) * s.w3(x)), glu, "w1:gelu*w3|w2"),
    ("a gate of nn modules, torch.mul", lambda s, x: s.w2(torch.mul(s.w3(x), s.act(s.w1(x)))),
     lambda: glu(act=nn.Tanh()), "w1:tanh*w3|w2"),
    ("a chain on the activated operand", lambda s, x: s.w2(
        torch.clamp(F.silu(s.w1(x) + s.shift), max=3) * s.w3(x)),
     lambda: glu(shift=nn.Parameter(torch.randn(HID))), "w1:add(shift),silu,clamp(-inf,3)*w3|w2"),
    ("swish on the activated operand", lambda s, x: s.w2(
        (lambda y: y * torch.sigmoid(y))(s.w1(x)) * s.w3(x)), glu, "w1:swish*w3|w2"),
    ("a bilinear gate (no ops)", lambda s, x: s.w2(s.w1(x) * s.w3(x)), glu, "w1:*w3|w2"),
    ("a gate in place", _gate_in_place, glu, "w1:silu*w3|w2"),
    ("a gated layer last", lambda s, x: F.silu(s.w1(x)) * s.w3(x), glu, "w1:silu*w3"),
    ("a gated layer after a layer", lambda s, x: (lambda h: s.w2(F.silu(s.w1(h)) * s.w3(h)))(
        torch.relu(s.fc(x))),
     lambda: glu(i=HID, fc=lin(IN, HID)), "fc:relu|w1:silu*w3|w2"),
    ("two gated layers", lambda s, x: (lambda h: s.o(F.gelu(s.a(h)) * s.b(h)))(
        F.silu(s.w1(x)) * s.w3(x)),
     lambda: dict(w1=lin(IN, HID), w3=lin(IN, HID), a=lin(HID, HID), b=lin(HID, HID),
                  o=lin(HID, OUT)), "w1:silu*w3|a:gelu*b|o"),
    ("a, b = w13(x).chunk(2, -1); silu(a) * b", _chunk_method, chunked, "w13[0]:silu*w13[1]|w2"),
    ("chunk(2, dim=-1); a * silu(b)", _chunk_method_keyword, chunked, "w13[1]:silu*w13[0]|w2"),
    ("torch.chunk(y, 2, dim=-1)", _chunk_function, chunked, "w13[0]:gelu*w13[1]|w2"),
    ("the halves indexed", _chunk_indexed, chunked, "w13[0]:tanh*w13[1]|w2"),
    ("the halves alone (no ops)", _chunk_bilinear, chunked, "w13[0]:*w13[1]|w2"),
    ("a half's chain with a parameter of the half's width", _chunk_half_param,
     lambda: chunked(hp=nn.Parameter(torch.randn(HID))), "w13[0]:add(hp),silu,square*w13[1]|w2"),
    ("a chunked layer last", _chunk_last, chunked, "w13[0]:silu*w13[1]"),
    ("a chunked layer in place", _chunk_in_place, chunked, "w13[0]:silu*w13[1]|w2"),
    ("x + f(x)", lambda s, x: x + s.fc2(F.gelu(s.fc1(x))), lambda: mlp(fc2=lin(HID, IN)),
     "x+(fc1:gelu|fc2)"),
    ("f(x) + x", lambda s, x: s.fc2(F.gelu(s.fc1(x))) + x, lambda: mlp(fc2=lin(HID, IN)),
     "x+(fc1:gelu|fc2)"),
    ("torch.add(x, f(x))", lambda s, x: torch.add(x, s.fc2(F.gelu(s.fc1(x)))),
     lambda: mlp(fc2=lin(HID, IN)), "x+(fc1:gelu|fc2)"),
    ("h += x", _residual_augmented, lambda: mlp(fc2=lin(HID, IN)), "x+(fc1:gelu|fc2)"),
    ("x += f(x)", _residual_into_input, lambda: mlp(fc2=lin(HID, IN)), "x+(fc1:gelu|fc2)"),
    ("a residual of one Linear", lambda s, x: x + torch.tanh(s.fc(x)),
     lambda: dict(fc=lin(IN, IN)), "x+(fc:tanh)"),
    ("a residual of a Linear alone", lambda s, x: s.fc(x) + x, lambda: dict(fc=lin(IN, IN)),
     "x+(fc)"),
    ("a residual around SwiGLU", lambda s, x: x + s.w2(F.silu(s.w1(x)) * s.w3(x)),
     lambda: glu(w2=lin(HID, IN)), "x+(w1:silu*w3|w2)"),
    ("a residual around a chunked SwiGLU", _chunk_residual, lambda: chunked(out=IN),
     "x+(w13[0]:silu*w13[1]|w2)"),
    ("QuickGELU, y * sigmoid(1.702 * y)", lambda s, x: s.fc2(_quickgelu(s.fc1(x))), mlp,
     "fc1:swish(1.702)|fc2"),
    ("QuickGELU as CLIP's module", lambda s, x: s.fc2(s.act(s.fc1(x))),
     lambda: mlp(act=Net(lambda m, y: y * torch.sigmoid(1.702 * y))), "fc1:swish(1.702)|fc2"),
    ("squared ReLU", lambda s, x: s.fc2(torch.square(F.relu(s.fc1(x)))), mlp,
     "fc1:relu,square|fc2"),
    ("relu(y) ** 2", lambda s, x: s.fc2(F.relu(s.fc1(x)) ** 2), mlp, "fc1:relu,square|fc2"),
]

# (what, forward, members, strings the message must hold)
LAYERED_REFUSALS = [
    ("a LayerNorm between layers", lambda s, x: s.fc2(s.norm(s.fc1(x))),
     lambda: mlp(norm=nn.LayerNorm(HID)),
     ["cannot express call_module norm (torch.nn.LayerNorm) (node 'norm')"]),
    ("a LayerNorm first", lambda s, x: s.fc2(s.fc1(s.norm(x))), lambda: mlp(norm=nn.LayerNorm(IN)),
     ["the first op is call_module norm (torch.nn.LayerNorm) (node 'norm'), not an nn.Linear "
      "applied to the input", "node 'fc1' comes later"]),
    ("attention scores", lambda s, x: torch.matmul(s.q(x), s.k(x).transpose(-1, -2)),
     lambda: dict(q=lin(IN, HID), k=lin(IN, HID)),
     ["cannot express call_method transpose (node 'transpose')"]),
    ("a matmul of two values", lambda s, x: torch.matmul(s.q(x), s.k(x)),
     lambda: dict(q=lin(IN, HID), k=lin(IN, HID)),
     ["cannot express call_function torch.matmul (node 'matmul')"]),
    ("a Linear used twice", lambda s, x: s.fc(torch.relu(s.fc(x))), lambda: dict(fc=lin(IN, IN)),
     ["call_module fc (torch.nn.Linear) (node 'fc_1'), a Linear used twice (node 'fc' called "
      "it first)"]),
    ("one Linear gating itself", lambda s, x: F.silu(s.fc(x)) * s.fc(x),
     lambda: dict(fc=lin(IN, IN)), ["(node 'fc_1'), a Linear used twice"]),
    ("a parameter of two layers", lambda s, x: s.fc2(s.fc1(x) * s.g) * s.g,
     lambda: mlp(g=nn.Parameter(torch.tensor(2.0))),
     ["call_function operator.mul (node 'mul_1')", "the parameter 'g', which layer 1 (fc1) "
      "uses too"]),
    ("a parameter of another layer's width", lambda s, x: s.fc2(s.fc1(x) + s.p),
     lambda: mlp(p=nn.Parameter(torch.randn(OUT))),
     ["(node 'add')", "parameter 'p' of shape [4]", "[10], [] or [1]"]),
    ("a chunked half's parameter of the Linear's width", _chunk_half_param,
     lambda: chunked(hp=nn.Parameter(torch.randn(2 * HID))),
     ["(node 'add')", "parameter 'hp' of shape [20]", "[10], [] or [1]"]),
    ("ops on both operands of a product",
     lambda s, x: s.w2(F.silu(s.w1(x)) * torch.tanh(s.w3(x))), glu,
     ["call_function operator.mul (node 'mul')", "a gated product of two values with ops "
      "(w1:silu and w3:tanh)"]),
    ("ops on both halves", lambda s, x: (lambda t: s.w2(F.silu(t[0]) * F.silu(t[1])))(
        s.w13(x).chunk(2, -1)), chunked,
     ["(node 'mul')", "two values with ops (w13[0]:silu and w13[1]:silu)"]),
    ("an op after the gated product", lambda s, x: s.w2(torch.tanh(F.silu(s.w1(x)) * s.w3(x))),
     glu, ["call_function torch.tanh (node 'tanh'), an op after the gated product (node 'mul')",
           "the next Linear starts a new layer"]),
    ("a square of the gated product", lambda s, x: _square(F.silu(s.w1(x)) * s.w3(x)), glu,
     ["(node 'mul_1'), an op after the gated product (node 'mul')"]),
    ("a gated pair of other widths", lambda s, x: F.silu(s.w1(x)) * s.w3(x),
     lambda: glu(w3=lin(IN, 1)),
     ["(node 'mul')", "node 'w1' (10 wide) by node 'w3' (1 wide)"]),
    ("a gate of another input", lambda s, x: (lambda h: s.w2(F.silu(s.w1(h)) * s.w3(x)))(
        s.fc(x)), lambda: glu(fc=lin(IN, IN)),
     ["call_function operator.mul (node 'mul')", "neither a gated pair"]),
    ("a product of a Linear and the input", lambda s, x: s.fc(x) * x,
     lambda: dict(fc=lin(IN, IN)), ["(node 'mul')", "takes node 'x' again after node 'fc'"]),
    ("three Linears of one value", lambda s, x: s.w1(x) * s.w3(x) * s.w4(x),
     lambda: glu(w4=lin(IN, HID)),
     ["call_module w4 (torch.nn.Linear) (node 'w4'), which takes node 'x' again after node "
      "'w1' took it (a branch)"]),
    ("a Linear whose output is left unused", lambda s, x: [s.w3(x), s.w2(F.silu(s.w1(x)))][1],
     glu, ["(node 'w1'), which takes node 'x' again after node 'w3' took it (a branch)",
           "gated pair"]),
    ("a sum of two Linears", lambda s, x: s.w1(x) + s.w3(x), glu,
     ["call_function operator.add (node 'add')", "two values computed from the input"]),
    ("a branch between layers", lambda s, x: (lambda h: s.fc2(torch.relu(h) + h))(s.fc1(x)), mlp,
     ["call_function operator.add (node 'add')", "takes node 'fc1' again after node 'relu'",
      "(a branch)", "adds the model's input to its output"]),
    ("a residual of a hidden value", lambda s, x: (lambda h: s.fc2(h) + h)(torch.relu(s.fc1(x))),
     lambda: mlp(fc2=lin(HID, HID)),
     ["(node 'add')", "takes node 'relu' again after node 'fc2' took it (a branch)"]),
    ("a residual before a Linear", lambda s, x: s.fc2(x + s.fc1(x)),
     lambda: mlp(fc1=lin(IN, IN), fc2=lin(IN, OUT)),
     ["call_module fc2 (torch.nn.Linear) (node 'fc2'), an op after the residual (node 'add')"]),
    ("an op after the residual", lambda s, x: torch.tanh(x + s.fc1(x)),
     lambda: dict(fc1=lin(IN, IN)),
     ["call_function torch.tanh (node 'tanh'), an op after the residual (node 'add')"]),
    ("a residual of other widths", lambda s, x: x + s.fc2(s.fc1(x)), mlp,
     ["(node 'add')", "adds the model's input (6 wide) to node 'fc2' (4 wide)"]),
    ("a residual scaled by alpha", lambda s, x: torch.add(x, s.fc(x), alpha=0.5),
     lambda: dict(fc=lin(IN, IN)), ["call_function torch.add (node 'add')", "alpha=0.5"]),
    ("the input added twice", lambda s, x: x + s.fc(x) + x, lambda: dict(fc=lin(IN, IN)),
     ["(node 'add_1'), an op after the residual (node 'add')"]),
    ("chunk(2) (dim 0)", lambda s, x: (lambda t: s.w2(F.silu(t[0]) * t[1]))(s.w13(x).chunk(2)),
     chunked, ["call_method chunk (node 'chunk'), with chunks=2, dim=0 (only chunk(2, -1)"]),
    ("chunk(3, -1)", lambda s, x: (lambda t: t[0] * t[1])(s.w13(x).chunk(3, -1)),
     lambda: chunked(w13=lin(IN, 3 * HID)), ["(node 'chunk'), with chunks=3, dim=-1"]),
    ("chunk after an op", lambda s, x: (lambda t: s.w2(t[0] * t[1]))(
        F.relu(s.w13(x)).chunk(2, -1)), chunked,
     ["(node 'chunk'), which splits node 'relu', not a Linear's output as it is"]),
    ("a half left ungated", lambda s, x: s.w2(F.silu(s.w13(x).chunk(2, -1)[0])), chunked,
     ["call_module w2 (torch.nn.Linear) (node 'w2'), which takes half 0 of node 'w13' (chunk) "
      "without multiplying it by the other half"]),
    ("a half returned", lambda s, x: F.silu(s.w13(x).chunk(2, -1)[1]), chunked,
     ["the output (node 'output'), which takes half 1 of node 'w13'"]),
    ("the halves returned", lambda s, x: s.w13(x).chunk(2, -1), chunked,
     ["the output (node 'output'), which returns the two halves of node 'chunk'"]),
    ("a half of one Linear times another Linear", lambda s, x: s.w13(x).chunk(2, -1)[0] * s.w3(x),
     lambda: chunked(w3=lin(IN, HID)), ["(node 'mul'), which multiplies node 'getitem' by "
                                         "node 'w3', neither a gated pair"]),
]


class DemoSpecs(unittest.TestCase):
    def test_the_demos_are_those_expected(self):
        self.assertEqual(list(fx.DEMOS), list(EXPECTED) + list(LAYERED_EXPECTED))

    def test_each_layered_demo_has_its_canonical_spec(self):
        for name, want in LAYERED_EXPECTED.items():
            with self.subTest(demo=name):
                self.assertEqual(fx.chain_spec(fx.build_demo(name)), ("", want))

    def test_each_layered_spec_gives_the_models_output(self):
        for name, spec in LAYERED_EXPECTED.items():
            with self.subTest(demo=name):
                torch.manual_seed(1)
                model = fx.build_demo(name).eval()
                x = torch.randn(7, fx.model_in_features(model))
                with torch.no_grad():
                    want = evaluate_model(spec, model.state_dict(), x)
                    self.assertLess(max_difference(model(x), want), 1e-5)

    def test_ten_layered_demos_or_more_run_fast(self):
        self.assertGreaterEqual(len(LAYERED_EXPECTED), 10)
        for name in LAYERED_EXPECTED:
            parameters = sum(p.numel() for p in fx.build_demo(name).parameters())
            self.assertLess(parameters, 200000, name)

    def test_each_demo_has_its_canonical_spec(self):
        for name, want in EXPECTED.items():
            with self.subTest(demo=name):
                self.assertEqual(fx.chain_spec(fx.build_demo(name)), want)

    def test_each_spec_gives_the_models_output(self):
        for name, (linear, spec) in EXPECTED.items():
            with self.subTest(demo=name):
                torch.manual_seed(1)
                model = fx.build_demo(name).eval()
                x = torch.randn(7, fx.model_in_features(model)) * 3
                with torch.no_grad():
                    difference = max_difference(model(x), evaluate(spec, model.state_dict(),
                                                                   linear, x))
                self.assertLess(difference, 1e-5)

    def test_the_demos_use_every_op_of_the_vocabulary(self):
        used = {str(op).split("(")[0] for _, spec in EXPECTED.values()
                for op in fx.parse_spec(spec)}
        used |= {str(op).split("(")[0] for spec in LAYERED_EXPECTED.values()
                 for layer in fx.parse_model_spec(spec).layers for op in layer.ops}
        self.assertEqual(used, set(fx.VOCABULARY))
        self.assertIn("gelu(tanh)", EXPECTED["mynet"][1])
        self.assertIn("swish(1.702)", LAYERED_EXPECTED["quickgelu_mlp"])

    def test_the_reference_models_are_those_of_export_py(self):
        export = load_module(os.path.join(REPO, "weights", "export.py"), "export_reference")
        for name in ("swish_chain", "mish_mish"):
            with self.subTest(demo=name):
                torch.manual_seed(3)
                want = export.build(name, 64, 48)
                torch.manual_seed(3)
                got = fx.build_demo(name, 64, 48)
                self.assertEqual(list(got.state_dict()), list(want.state_dict()))
                for key, tensor in want.state_dict().items():
                    self.assertTrue(torch.equal(got.state_dict()[key], tensor), key)
                x = torch.randn(5, 64)
                with torch.no_grad():
                    self.assertTrue(torch.equal(got(x), want(x)))

    def test_tracing_restores_every_modules_mode(self):
        model = fx.build_demo("gelu_dropout_silu")
        model.train()
        model.dropout.eval()
        fx.chain_spec(model)
        self.assertTrue(model.training and model.fc.training and model.silu.training)
        self.assertFalse(model.dropout.training)
        fx.chain_spec(model.eval())
        self.assertFalse(any(m.training for m in model.modules()))

    def test_a_model_in_training_mode_is_described_as_in_eval_mode(self):
        self.assertEqual(fx.chain_spec(fx.build_demo("gelu_dropout_silu").train())[1],
                         "gelu,silu")


class Forms(unittest.TestCase):
    def test_every_pytorch_form_of_every_op(self):
        for what, forward, modules, want in FORMS:
            with self.subTest(form=what):
                self.assertEqual(spec_of(forward, **modules), want)

    def test_a_long_chain_of_mixed_forms(self):
        def forward(s, x):
            x = s.fc(x)
            x = F.relu(x, inplace=True)
            x = s.act(x) + s.p
            x = torch.sigmoid(x) * x
            x = x.clamp(max=2) / s.scalar
            return F.gelu(x, approximate="tanh")
        self.assertEqual(spec_of(forward, act=nn.LeakyReLU(0.125)),
                         "relu,leaky_relu(0.125),add(p),swish,clamp(-inf,2),div(scalar),"
                         "gelu(tanh)")

    def test_a_linear_without_bias(self):
        model = nn.Sequential(nn.Linear(4, 3, bias=False), nn.Tanh())
        self.assertEqual(fx.chain_spec(model), ("0", "tanh"))

    def test_a_nested_sequential_names_its_linear_by_path(self):
        model = nn.Sequential(nn.Sequential(nn.Linear(4, 3), nn.GELU()), nn.Tanh())
        self.assertEqual(fx.chain_spec(model), ("0.0", "gelu,tanh"))

    def test_a_parameter_in_a_submodule_is_named_by_its_key(self):
        class Shift(nn.Module):
            def __init__(self):
                super().__init__()
                self.bias = nn.Parameter(torch.zeros(3))

            def forward(self, x):
                return x - self.bias

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.shift = nn.Linear(4, 3), Shift()

            def forward(self, x):
                return self.shift(self.fc(x))
        self.assertEqual(fx.chain_spec(Net()), ("fc", "sub(shift.bias)"))


class Refusals(unittest.TestCase):
    def check_refused(self, what, model, strings):
        with self.assertRaises(fx.ChainError, msg=what) as caught:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fx.chain_spec(model)
        message = str(caught.exception)
        self.assertTrue(message.startswith("fx_chain: "), message)
        self.assertNotIn("\n", message)
        self.assertIn("docs/CHAINS.md", message)
        for string in strings:
            self.assertIn(string, message)
        return message

    def test_each_kind_of_refusal_names_the_node(self):
        for what, forward, modules, strings in REFUSALS:
            with self.subTest(refusal=what):
                self.check_refused(what, Probe(forward, **modules), strings)

    def test_a_chain_error_is_a_value_error(self):
        self.assertTrue(issubclass(fx.ChainError, ValueError))

    def test_two_inputs(self):
        class TwoInputs(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 3)

            def forward(self, x, y):
                return self.fc(x) + y
        self.check_refused("two inputs", TwoInputs(), ["uses 2 inputs (x, y)"])

    def test_an_unused_second_input_is_fine(self):
        class Optional(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 3)

            def forward(self, x, unused=None):
                return torch.tanh(self.fc(x))
        self.assertEqual(fx.chain_spec(Optional()), ("fc", "tanh"))

    def test_a_key_the_grammar_cannot_name(self):
        class Shift(nn.Module):
            def __init__(self):
                super().__init__()
                self.v = nn.Parameter(torch.zeros(3))

            def forward(self, x):
                return x + self.v
        model = nn.Sequential(nn.Linear(4, 3), Shift())
        self.check_refused("a key starting with a digit", model,
                           ["(node 'add')", "parameter '1.v', a key the spec cannot name"])

    def test_not_a_module(self):
        with self.assertRaises(fx.ChainError):
            fx.chain_spec(lambda x: x)

    def test_a_refused_model_writes_nothing(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "w.pt")
            with self.assertRaises(fx.ChainError):
                fx.save_with_chain(Probe(lambda s, x: torch.matmul(s.fc(x), s.fc.weight)), path)
            self.assertEqual(os.listdir(folder), [])

    def test_what_run_refuses_is_refused_first(self):
        """A model that traces but whose file `fusedlinear run` would refuse: refused with run's
        reason (test_cli's Cli.ExporterRefusalsAreRunsOwn holds run to the same words)."""
        class Two(nn.Module):
            def __init__(self, one, two, gate=None):
                super().__init__()
                self.fc1, self.fc2, self.gate = one, two, gate

            def forward(self, x):
                h = F.gelu(self.fc1(x))
                return self.fc2(h * self.gate(x) if self.gate is not None else h)

        class Unused(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 4)
                self.register_buffer("steps", torch.tensor(3))

            def forward(self, x):
                return torch.tanh(self.fc(x))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's on initialising zero-element tensors
            cases = [
                (nn.Sequential(nn.Linear(0, 4), nn.GELU()),
                 "0.weight has shape [4, 0]: a Linear of 0 input features; fusedlinear runs "
                 "Linears of at least 1 of each"),
                (Two(nn.Linear(8, 0), nn.Linear(0, 3)),
                 "fc1.weight has shape [0, 8]: a Linear of 0 output features"),
                (Two(nn.Linear(8, 16), nn.Linear(12, 4)),
                 "fc2.weight takes 12 inputs, but the layer before (fc1) gives 16"),
                (Two(nn.Linear(8, 16), nn.Linear(16, 4), nn.Linear(6, 16)),
                 "fc1.weight is [16, 8] and its gate's gate.weight is [16, 6]: a gated pair's "
                 "Linears take the same shape"),
                (Unused(), "unexpected key(s) steps; the model expects fc.weight, fc.bias"),
                (nn.Sequential(nn.Linear(8, 4), nn.Tanh()).double().requires_grad_(False),
                 "0.bias: cannot convert Double to the model's Float: 2 finite values beyond "
                 "its range would become infinite"),
            ]
        cases[-1][0][0].bias[1:3] = 1e39
        for model, reason in cases:
            with self.subTest(reason=reason), tempfile.TemporaryDirectory() as folder:
                with self.assertRaises(fx.ChainError) as caught:
                    fx.save_with_chain(model, os.path.join(folder, "w.pt"))
                self.assertIn(reason, str(caught.exception))
                self.assertEqual(os.listdir(folder), [])


class Limits(unittest.TestCase):
    """What fusedlinear's interpreter takes in one chain, refused here with its reason."""

    def test_the_limits_are_the_interpreters(self):
        with open(os.path.join(REPO, "kernels", "math", "program.h")) as file:
            ops = re.search(r"constexpr int kMaxProgramOps = (\d+);", file.read())
        with open(os.path.join(REPO, "kernels", "math", "chain.h")) as file:
            terms = re.search(r"constexpr int kMaxColumnTerms = (\d+);", file.read())
        self.assertEqual(fx.MAX_CHAIN_OPS, int(ops.group(1)))
        self.assertEqual(fx.MAX_PARAMETER_TERMS, int(terms.group(1)))

    def test_sixteen_ops_and_four_terms_pass(self):
        def forward(s, x):
            x = s.fc(x)
            for i in range(4):
                x = x + getattr(s, "p%d" % i)
            for _ in range(12):
                x = torch.tanh(x)
            return x
        params = {"p%d" % i: nn.Parameter(torch.randn(3)) for i in range(4)}
        spec = spec_of(forward, **params)
        self.assertEqual(len(fx.parse_spec(spec)), 16)

    def test_a_seventeenth_op_is_refused(self):
        def forward(s, x):
            x = s.fc(x)
            for _ in range(17):
                x = torch.tanh(x)
            return x
        Refusals.check_refused(self, "17 ops", Probe(forward),
                               ["the chain of fc (node 'tanh_16' is op 17)",
                                ": 17 ops; a run-time chain takes at most 16"])

    def test_a_fifth_parameter_term_is_refused(self):
        def forward(s, x):
            x = s.fc(x)
            for i in range(5):
                x = x * getattr(s, "p%d" % i)
            return x
        params = {"p%d" % i: nn.Parameter(torch.randn(3)) for i in range(5)}
        Refusals.check_refused(self, "5 terms", Probe(forward, **params),
                               ["(node 'mul_4' is parameter term 5)",
                                "more than 4 parameter terms"])

    def test_a_layers_chain_past_the_limit_is_refused(self):
        def forward(s, x):
            x = s.fc1(x)
            for _ in range(17):
                x = F.relu(x)
            return s.fc2(x)
        torch.manual_seed(0)
        Refusals.check_refused(self, "17 ops in a layer", Net(forward, **mlp()),
                               ["the chain of fc1", "17 ops"])

    def test_a_linears_own_bias_is_a_parameter(self):
        model = Probe(lambda s, x: torch.tanh(s.fc(x)) * s.fc.bias)
        self.assertEqual(fx.chain_spec(model)[1], "tanh,mul(fc.bias)")
        Refusals.check_refused(self, "the weight", Probe(lambda s, x: s.fc(x) * s.fc.weight),
                               ["parameter 'fc.weight' of shape [3, 4]", "[3], [] or [1]"])


class Layered(unittest.TestCase):
    def build(self, forward, members):
        torch.manual_seed(0)
        built = members()
        return built if forward is None else Net(forward, **built)

    def test_each_layered_model_has_its_canonical_spec(self):
        for what, forward, members, want in LAYERED:
            with self.subTest(model=what):
                self.assertEqual(fx.chain_spec(self.build(forward, members)), ("", want))

    def test_each_layered_spec_gives_the_models_output(self):
        for what, forward, members, spec in LAYERED:
            with self.subTest(model=what):
                model = self.build(forward, members).eval()
                first = fx.parse_model_spec(spec).layers[0].linear.path
                x = torch.randn(5, model.get_submodule(first).in_features)
                with torch.no_grad():
                    want = evaluate_model(spec, model.state_dict(), x)
                    got = model(x.clone())  # x += ... writes into its input
                self.assertEqual(got.shape, want.shape)
                self.assertLess(max_difference(got, want), 1e-5)

    def test_layered_specs_are_canonical_fixed_points(self):
        for _, _, _, spec in LAYERED:
            with self.subTest(spec=spec):
                self.assertTrue(fx.is_layered_spec(spec))
                self.assertEqual(fx.canonical_spec(spec), spec)

    def test_one_linear_models_are_chain_specs(self):
        """One Linear and its chain exports as before: the Linear's path and a chain spec, also
        for the new ops; a gated or chunked Linear, or a residual, is layered."""
        one = Net(lambda s, x: F.relu(s.fc(x)).square(), fc=lin(IN, HID))
        self.assertEqual(fx.chain_spec(one), ("fc", "relu,square"))
        self.assertEqual(fx.chain_ops(one), ("fc", [fx.Op("relu"), fx.Op("square")]))
        chunk = Net(_chunk_last, **chunked())
        self.assertEqual(fx.chain_spec(chunk), ("", "w13[0]:silu*w13[1]"))
        with self.assertRaises(fx.ChainError) as caught:
            fx.chain_ops(chunk)
        self.assertIn("layered (w13[0]:silu*w13[1])", str(caught.exception))

    def test_trace_model_gives_the_layers(self):
        model = Net(lambda s, x: x + s.w2(F.silu(s.w1(x) * 2) * s.w3(x)),
                    **glu(w2=lin(HID, IN)))
        traced = fx.trace_model(model)
        self.assertTrue(traced.residual)
        self.assertFalse(traced.single)
        self.assertEqual([str(layer) for layer in traced.layers], ["w1:mul(2),silu*w3", "w2"])
        self.assertEqual(traced.layers[0].gate, fx.LinearRef("w3"))
        self.assertEqual(traced.linears(), ["w1", "w3", "w2"])

    def test_tracing_does_not_run_or_change_the_model(self):
        model = Net(_residual_into_input, **mlp(fc2=lin(HID, IN))).train()
        state = {key: value.clone() for key, value in model.state_dict().items()}
        fx.chain_spec(model)
        self.assertTrue(model.training)
        for key, value in model.state_dict().items():
            self.assertTrue(torch.equal(value, state[key]), key)


class LayeredRefusals(unittest.TestCase):
    def test_each_kind_of_layered_refusal_names_the_node(self):
        for what, forward, members, strings in LAYERED_REFUSALS:
            with self.subTest(refusal=what):
                torch.manual_seed(0)
                Refusals.check_refused(self, what, Net(forward, **members()), strings)

    def test_a_refused_layered_model_writes_nothing(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "w.pt")
            what, forward, members, _ = LAYERED_REFUSALS[0]
            with self.assertRaises(fx.ChainError):
                fx.save_with_chain(Net(forward, **members()), path)
            self.assertEqual(os.listdir(folder), [])


class Numbers(unittest.TestCase):
    def test_canonical_numbers(self):
        cases = [(0.2, "0.2"), (1e-3, "0.001"), (1e-4, "0.0001"), (1e-5, "1e-5"),
                 (float("-inf"), "-inf"), (float("inf"), "inf"), (1 / 3, "0.33333334"),
                 (0.01, "0.01"), (1.0, "1"), (-2, "-2"), (20, "20"), (0.5, "0.5"),
                 (100000, "100000"), (1e16, "1e16"), (3.4028235e38, "3.4028235e38"),
                 (1e40, "inf"), (-1e-45, "-1e-45"), (0.1 + 0.2, "0.3"), (0.0, "0"),
                 (-0.0, "-0"), (123456789, "123456790"), (2.5e-7, "2.5e-7")]
        for value, want in cases:
            with self.subTest(value=value):
                self.assertEqual(fx.format_number(value), want)

    def test_nan_has_no_spec_form(self):
        with self.assertRaises(fx.ChainError):
            fx.format_number(float("nan"))

    def test_numbers_read_back_to_the_same_float32(self):
        generator = torch.Generator().manual_seed(0)
        bits = torch.randint(0, 2 ** 31 - 1, (4000,), generator=generator, dtype=torch.int64)
        values = torch.cat([bits, -bits]).to(torch.int32).view(torch.float32)
        for value in values.tolist():
            if math.isfinite(value):
                text = fx.format_number(value)
                self.assertEqual(fx.float32(float(text)), value, text)
                self.assertLessEqual(len(text.lstrip("-").split("e")[0].replace(".", "")
                                         .strip("0")), 9, text)

    def test_a_models_float_arguments_are_written_as_float32(self):
        self.assertEqual(spec_of(lambda s, x: F.leaky_relu(s.fc(x), 0.20000000298023224)),
                         "leaky_relu(0.2)")
        self.assertEqual(spec_of(lambda s, x: torch.clamp(s.fc(x), -1e-3, 1 / 3)),
                         "clamp(-0.001,0.33333334)")


class Grammar(unittest.TestCase):
    def test_canonical_form_of_written_specs(self):
        cases = [
            (" leaky_relu( negative_slope = 0.2 ) ", "leaky_relu(0.2)"),
            ("gelu(approximate=tanh), gelu(none), gelu", "gelu(tanh),gelu,gelu"),
            ("clamp(min=0)", "clamp(0,inf)"), ("clamp(max=1e-3)", "clamp(-inf,0.001)"),
            ("clamp(-inf, +inf)", "clamp(-inf,inf)"),
            ("softplus(beta=2)", "softplus(2,20)"), ("softplus", "softplus(1,20)"),
            ("hardtanh", "hardtanh(-1,1)"), ("elu,celu(alpha=.5)", "elu(1),celu(0.5)"),
            ("add(add_value),swish,tanh,gelu,hardtanh(-1,1)",
             "add(add_value),swish,tanh,gelu,hardtanh(-1,1)"),
            ("mul(block.0.scale), div(other=2.50)", "mul(block.0.scale),div(2.5)"),
            ("sub(-0.20000000298023224)", "sub(-0.2)"),
            ("swish(beta=1.702)", "swish(1.702)"), ("swish(1)", "swish"),
            ("swish(beta=1.0)", "swish"), ("swish", "swish"),
            ("swish(0.5), square", "swish(0.5),square"),
        ]
        for text, want in cases:
            with self.subTest(spec=text):
                self.assertEqual(fx.canonical_spec(text), want)

    def test_swish_and_square_in_the_vocabulary(self):
        self.assertEqual(fx.VOCABULARY["swish"], (("beta", 1.0),))
        self.assertEqual(fx.VOCABULARY["square"], ())
        self.assertEqual(fx.parse_spec("swish(1.702)")[0].args, (fx.float32(1.702),))
        self.assertEqual(str(fx.Op("swish", [1.0])), "swish")
        self.assertEqual(str(fx.Op("swish", [1.702])), "swish(1.702)")
        self.assertEqual(fx.Op("swish"), fx.Op("swish", [1.0]))

    def test_canonical_form_of_written_layered_specs(self):
        cases = [
            ("x + (w1: silu * w3 | w2)", "x+(w1:silu*w3|w2)"),
            (" fc1 : gelu | fc2 : relu | fc3 ", "fc1:gelu|fc2:relu|fc3"),
            ("fc1: leaky_relu(negative_slope=0.2) | fc2", "fc1:leaky_relu(0.2)|fc2"),
            ("fc1:|fc2", "fc1|fc2"), ("w13[0] : silu * w13[1] | w2", "w13[0]:silu*w13[1]|w2"),
            ("w13[1]:swish(beta=1.702)*w13[0]", "w13[1]:swish(1.702)*w13[0]"),
            ("x+( fc )", "x+(fc)"), ("w1: * w3", "w1:*w3"),
            ("block.0: add(block.1.v), swish(1) | head", "block.0:add(block.1.v),swish|head"),
            ("x + (fc1: clamp(min=0), square | fc2)", "x+(fc1:clamp(0,inf),square|fc2)"),
        ]
        for text, want in cases:
            with self.subTest(spec=text):
                self.assertEqual(fx.canonical_spec(text), want)
                self.assertEqual(fx.canonical_spec(want), want)

    def test_layered_specs_parse_to_layers(self):
        model = fx.parse_model_spec("x + (w13[1]: gelu, mul(2) * w13[0] | out: tanh | last)")
        self.assertTrue(model.residual)
        self.assertEqual(len(model.layers), 3)
        first = model.layers[0]
        self.assertEqual((first.linear, first.gate), (fx.LinearRef("w13", 1),
                                                      fx.LinearRef("w13", 0)))
        self.assertEqual([str(op) for op in first.ops], ["gelu", "mul(2)"])
        self.assertEqual(model.linears(), ["w13", "out", "last"])

    def test_which_specs_are_layered(self):
        for text in ("fc1|fc2", "fc:gelu", "x+(fc)", " x + (fc)"):
            self.assertTrue(fx.is_layered_spec(text), text)
        for text in ("gelu,silu", "swish(1.702)", "square", "add(x)"):
            self.assertFalse(fx.is_layered_spec(text), text)

    def test_malformed_layered_specs(self):
        cases = [("fc1:gelu|", "expected a layer"), ("|fc2", "expected a layer"),
                 ("fc1:gelu|fc1", "'fc1' comes twice"), ("w1:silu*w1", "a gate other than"),
                 ("w13[0]:silu*w13[0]", "the other half of the same Linear (w13[1])"),
                 ("w13[0]:silu*w3", "the other half of the same Linear"),
                 ("w13[2]:silu*w13[1]", "[0] or [1]"), ("w13[0]:silu", "'* w13[1]'"),
                 ("w13[0]|w2", "':' and a gate"), ("w1:silu*w3*w4", "one '*' a layer"),
                 ("fc-1:gelu", "attribute path"), ("x+fc:gelu", "'(' after 'x +'"),
                 ("x+(fc:gelu", "closing ')'"), ("fc1:foo|fc2", "layer 1 (fc1): chain spec"),
                 ("fc1:square(2)|fc2", "square takes no arguments")]
        for text, want in cases:
            with self.subTest(spec=text):
                with self.assertRaises(fx.ChainError) as caught:
                    fx.canonical_spec(text)
                self.assertIn(want, str(caught.exception))
                self.assertNotIn("\n", str(caught.exception))

    def test_canonical_specs_are_fixed_points(self):
        for _, spec in EXPECTED.values():
            self.assertEqual(fx.canonical_spec(spec), spec)

    def test_the_grammar_table(self):
        """Each case of tests/spec_grammar.tsv (fusedlinear's tests read the same): the canonical
        form, which reads back as itself, or the refusal, one line of printable ASCII naming the
        character and holding the phrase."""
        cases = grammar_cases()
        self.assertGreater(len(cases), 150)
        for line, columns in cases:
            spec = columns[0]
            with self.subTest(line="tests/spec_grammar.tsv:%d" % line, spec=spec):
                try:
                    got = fx.canonical_spec(spec)
                except fx.ChainError as error:
                    got = "refused: " + str(error)
                if columns[1] != "refused":
                    self.assertEqual(got, columns[1])
                    self.assertEqual(fx.canonical_spec(columns[1]), columns[1])
                    continue
                self.assertEqual(len(columns), 4)
                self.assertTrue(got.startswith("refused: fx_chain: "), got)
                self.assertIn("at character %s" % columns[2], got)
                self.assertIn(columns[3], got)
                self.assertTrue(all(" " <= c <= "~" for c in got), got)

    def test_messages_show_a_long_spec_around_the_error(self):
        spec = "relu," * 10000
        for text, want in [
                (spec + "mesh,relu", ["chain spec '...relu,relu,relu,relu,relu,relu,relu,relu,"
                                      "mesh,relu', at character 50001: unknown op 'mesh'"]),
                (spec + "clamp(" + "k" * 50000 + ")," + spec,
                 ["relu,clamp(" + "k" * 40 + "...'",
                  "clamp's min is a number, not '" + "k" * 40 + "...'"]),
                ("fc1:" + spec + "relu|fc1", ["relu,relu|fc1', at character 50010: expected a "
                                              "Linear used once; 'fc1' comes twice"])]:
            with self.assertRaises(fx.ChainError) as caught:
                fx.canonical_spec(text)
            message = str(caught.exception)
            self.assertLess(len(message), 400, message)
            for part in want:
                self.assertIn(part, message)

    def test_numbers_round_once_to_float32(self):
        # Just past the midpoint of 1 and the next float32: float64 would round to the midpoint,
        # and float32 then to even (1).
        self.assertEqual(fx.read_number("1.000000059604644775390625000000000001"),
                         1 + 2.0 ** -23)
        self.assertEqual(fx.read_number("1.000000059604644775390625"), 1.0)
        # Around the midpoint of float32's largest value and 2^128, where it rounds to inf.
        largest = 3.4028234663852886e38
        self.assertEqual(fx.read_number("-3.4028235677973366e38"), -largest)
        self.assertEqual(fx.read_number("340282356779733661637539395458142568447"), largest)
        self.assertEqual(fx.read_number("340282356779733661637539395458142568448"), fx.INF)
        for bad in ("0x10", "1_000", "INF", "nan", " 1", "\u0663"):
            with self.assertRaises(fx.ChainError):
                fx.read_number(bad)


def grammar_cases():
    r"""[(line number, columns)] of tests/spec_grammar.tsv, the spec column unescaped (\t \n \v \f
    \r \\ and \xNN, a byte of the UTF-8 spec)."""
    cases = []
    with open(os.path.join(os.path.dirname(HERE), "spec_grammar.tsv"), encoding="utf-8") as table:
        for number, line in enumerate(table.read().split("\n"), 1):
            if not line or line.startswith("#"):
                continue
            columns = line.split("\t")
            spec, i = bytearray(), 0
            while i < len(columns[0]):
                c = columns[0][i]
                if c == "\\" and i + 1 < len(columns[0]):
                    if columns[0][i + 1] == "x":
                        spec.append(int(columns[0][i + 2:i + 4], 16))
                        i += 4
                        continue
                    spec += {"t": b"\t", "n": b"\n", "v": b"\v", "f": b"\f", "r": b"\r",
                             "\\": b"\\"}[columns[0][i + 1]]
                    i += 2
                    continue
                spec += c.encode("utf-8")
                i += 1
            columns[0] = spec.decode("utf-8")
            cases.append((number, columns))
    return cases


class Files(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def path(self, name):
        return os.path.join(self.folder.name, name)

    def test_torch_load_returns_the_same_state_dict(self):
        torch.manual_seed(0)
        model = fx.build_demo("scaled_softplus")
        self.assertEqual(fx.save_with_chain(model, self.path("w.pt")),
                         EXPECTED["scaled_softplus"])
        loaded = torch.load(self.path("w.pt"))
        want = model.state_dict()
        self.assertEqual(list(loaded), list(want))
        for key, tensor in want.items():
            self.assertEqual(loaded[key].dtype, tensor.dtype)
            self.assertTrue(torch.equal(loaded[key], tensor), key)
        for prefix, entry in want._metadata.items():
            self.assertEqual(loaded._metadata[prefix], entry)
        self.assertEqual(loaded._metadata["fusedlinear"],
                         {"version": 1, "chain": EXPECTED["scaled_softplus"][1], "linear": "fc"})
        self.assertNotIn("fusedlinear", model.state_dict()._metadata)

    def test_load_state_dict_of_a_fresh_model(self):
        torch.manual_seed(0)
        model = fx.build_demo("relu6_tanhshrink").eval()
        fx.save_with_chain(model, self.path("w.pt"))
        torch.manual_seed(1)
        fresh = fx.build_demo("relu6_tanhshrink").eval()
        result = fresh.load_state_dict(torch.load(self.path("w.pt")))
        self.assertEqual((list(result.missing_keys), list(result.unexpected_keys)), ([], []))
        x = torch.rand(3, 64)
        with torch.no_grad():
            self.assertTrue(torch.equal(fresh(x), model(x)))

    def test_the_metadata_reads_back(self):
        fx.save_with_chain(fx.build_demo("leaky_sigmoid"), self.path("w.pt"))
        self.assertEqual(fx.read_chain(self.path("w.pt")),
                         {"version": 1, "chain": "leaky_relu(0.2),sigmoid", "linear": "block.0"})

    def test_layered_models_round_trip_through_pt_files(self):
        for name, spec in LAYERED_EXPECTED.items():
            with self.subTest(demo=name):
                torch.manual_seed(0)
                model = fx.build_demo(name).eval()
                path = self.path(name + ".pt")
                self.assertEqual(fx.save_with_chain(model, path), ("", spec))
                want = {"version": 1, "chain": spec, "linear": ""}
                self.assertEqual(fx.read_chain(path), want)
                loaded = torch.load(path)
                self.assertEqual(loaded._metadata["fusedlinear"], want)
                self.assertEqual(list(loaded), list(model.state_dict()))
                torch.manual_seed(1)
                fresh = fx.build_demo(name).eval()
                result = fresh.load_state_dict(loaded)
                self.assertEqual((list(result.missing_keys), list(result.unexpected_keys)),
                                 ([], []))
                x = torch.rand(3, fx.model_in_features(model))
                with torch.no_grad():
                    self.assertTrue(torch.equal(fresh(x), model(x)))
                for layer in fx.parse_model_spec(spec).layers:
                    self.assertIn(layer.linear.path + ".weight", loaded)

    def test_a_layered_chain_without_its_linear_entry_reads_back(self):
        state = nn.Linear(2, 2).state_dict()
        state._metadata["fusedlinear"] = {"version": 1, "chain": "fc1:gelu|fc2"}
        torch.save(state, self.path("layered.pt"))
        self.assertEqual(fx.read_chain(self.path("layered.pt")),
                         {"version": 1, "chain": "fc1:gelu|fc2", "linear": ""})
        state._metadata["fusedlinear"] = {"version": 1, "chain": "gelu"}
        torch.save(state, self.path("chain.pt"))
        with self.assertRaises(fx.ChainError) as caught:
            fx.read_chain(self.path("chain.pt"))
        self.assertIn("carries no chain", str(caught.exception))

    def test_a_layered_safetensors_header_reads_back_without_the_package(self):
        header = {"__metadata__": {"fusedlinear.version": "1",
                                   "fusedlinear.chain": "x+(w1:silu*w3|w2)",
                                   "fusedlinear.linear": ""},
                  "w1.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
        text = json.dumps(header).encode()
        with open(self.path("w.safetensors"), "wb") as file:
            file.write(struct.pack("<Q", len(text)) + text + struct.pack("<f", 1.0))
        self.assertEqual(fx.read_chain(self.path("w.safetensors")),
                         {"version": 1, "chain": "x+(w1:silu*w3|w2)", "linear": ""})

    def test_layered_safetensors_round_trip(self):
        try:
            import safetensors.torch
        except ImportError:
            self.skipTest("the safetensors package is not installed; .safetensors writing "
                          "not tested")
        model = fx.build_demo("swiglu_chunk")
        path = self.path("w.safetensors")
        self.assertEqual(fx.save_with_chain(model, path), ("", LAYERED_EXPECTED["swiglu_chunk"]))
        with safetensors.safe_open(path, framework="pt") as file:
            self.assertEqual(file.metadata(), {
                "fusedlinear.version": "1", "fusedlinear.chain": LAYERED_EXPECTED["swiglu_chunk"],
                "fusedlinear.linear": ""})

    def test_weights_only_load(self):
        fx.save_with_chain(fx.build_demo("mish_mish"), self.path("w.pt"))
        try:
            loaded = torch.load(self.path("w.pt"), weights_only=True)
        except TypeError:
            self.skipTest("this torch has no torch.load(weights_only=True)")
        self.assertEqual(loaded._metadata["fusedlinear"]["chain"], "mish,mish")

    def test_an_existing_file_is_kept_unless_overwrite(self):
        path = self.path("w.pt")
        with open(path, "wb") as file:
            file.write(b"keep")
        with self.assertRaises(fx.ChainError) as caught:
            fx.save_with_chain(fx.build_demo("mish_mish"), path)
        self.assertIn("exists", str(caught.exception))
        with open(path, "rb") as file:
            self.assertEqual(file.read(), b"keep")
        fx.save_with_chain(fx.build_demo("mish_mish"), path, overwrite=True)
        self.assertEqual(fx.read_chain(path)["chain"], "mish,mish")
        self.assertEqual(sorted(os.listdir(self.folder.name)), ["w.pt"])

    def test_a_folder_is_never_replaced(self):
        os.mkdir(self.path("w.pt"))
        with self.assertRaises(fx.ChainError) as caught:
            fx.save_with_chain(fx.build_demo("mish_mish"), self.path("w.pt"), overwrite=True)
        self.assertIn("not a regular file", str(caught.exception))

    def test_a_submodule_named_fusedlinear_is_refused(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fusedlinear = nn.Linear(4, 3)

            def forward(self, x):
                return torch.relu(self.fusedlinear(x))
        with self.assertRaises(fx.ChainError) as caught:
            fx.save_with_chain(Net(), self.path("w.pt"))
        self.assertIn("submodule named 'fusedlinear'", str(caught.exception))
        self.assertFalse(os.path.exists(self.path("w.pt")))

    def test_a_file_without_a_chain(self):
        torch.save(nn.Linear(2, 2).state_dict(), self.path("plain.pt"))
        torch.save(torch.ones(2), self.path("tensor.pt"))
        for name in ("plain.pt", "tensor.pt"):
            with self.assertRaises(fx.ChainError) as caught:
                fx.read_chain(self.path(name))
            self.assertIn("carries no chain", str(caught.exception))

    def test_a_chain_of_another_version(self):
        state = nn.Linear(2, 2).state_dict()
        state._metadata["fusedlinear"] = {"version": 2, "chain": "relu", "linear": ""}
        torch.save(state, self.path("v2.pt"))
        with self.assertRaises(fx.ChainError) as caught:
            fx.read_chain(self.path("v2.pt"))
        self.assertIn("version 2", str(caught.exception))

    def test_only_the_exact_version_reads(self):
        """The version as written, 1 (an int; "1" in a safetensors header), and nothing near
        it: fusedlinear refuses the same."""
        for version in (0, -1, 2, "01", " 1", "2", True, None):
            with self.subTest(version=version):
                state = nn.Linear(2, 2).state_dict()
                entry = {"chain": "relu", "linear": "fc"}
                if version is not None:
                    entry["version"] = version
                state._metadata["fusedlinear"] = entry
                torch.save(state, self.path("v.pt"))
                with self.assertRaises(fx.ChainError) as caught:
                    fx.read_chain(self.path("v.pt"))
                self.assertIn("this reads version 1", str(caught.exception))
        for version in ("01", " 1", "2", "1.0"):
            with self.subTest(safetensors_version=version):
                header = {"__metadata__": {"fusedlinear.version": version,
                                           "fusedlinear.chain": "tanh",
                                           "fusedlinear.linear": "fc"},
                          "fc.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
                text = json.dumps(header).encode()
                with open(self.path("v.safetensors"), "wb") as file:
                    file.write(struct.pack("<Q", len(text)) + text + struct.pack("<f", 1.0))
                with self.assertRaises(fx.ChainError) as caught:
                    fx.read_chain(self.path("v.safetensors"))
                self.assertIn("version %r" % version, str(caught.exception))

    def test_a_safetensors_header_reads_back_without_the_package(self):
        header = {"__metadata__": {"fusedlinear.version": "1", "fusedlinear.chain": "tanh",
                                   "fusedlinear.linear": "fc"},
                  "fc.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
        text = json.dumps(header).encode()
        with open(self.path("w.safetensors"), "wb") as file:
            file.write(struct.pack("<Q", len(text)) + text + struct.pack("<f", 1.0))
        self.assertEqual(fx.read_chain(self.path("w.safetensors")),
                         {"version": 1, "chain": "tanh", "linear": "fc"})

    def test_safetensors_round_trip(self):
        try:
            import safetensors.torch
        except ImportError:
            self.skipTest("the safetensors package is not installed; .safetensors writing "
                          "not tested")
        torch.manual_seed(0)
        model = fx.build_demo("swish_chain")
        path = self.path("w.safetensors")
        self.assertEqual(fx.save_with_chain(model, path), EXPECTED["swish_chain"])
        loaded = safetensors.torch.load_file(path)
        self.assertEqual(sorted(loaded), sorted(model.state_dict()))
        for key, tensor in model.state_dict().items():
            self.assertTrue(torch.equal(loaded[key], tensor), key)
        with safetensors.safe_open(path, framework="pt") as file:
            self.assertEqual(file.metadata(), {
                "fusedlinear.version": "1", "fusedlinear.chain": EXPECTED["swish_chain"][1],
                "fusedlinear.linear": "matmul"})
        self.assertEqual(fx.read_chain(path)["chain"], EXPECTED["swish_chain"][1])
        fresh = fx.build_demo("swish_chain")
        fresh.load_state_dict(loaded)

    def test_safetensors_without_the_package(self):
        if importlib.util.find_spec("safetensors") is not None:
            self.skipTest("the safetensors package is installed")
        with self.assertRaises(fx.ChainError) as caught:
            fx.save_with_chain(fx.build_demo("mish_mish"), self.path("w.safetensors"))
        self.assertIn("needs the safetensors package", str(caught.exception))
        self.assertEqual(os.listdir(self.folder.name), [])


class CommandLine(unittest.TestCase):
    def run_cli(self, *args):
        result = subprocess.run([sys.executable, EXPORTER] + list(args), capture_output=True,
                                text=True, timeout=300)
        return result.returncode, result.stdout, result.stderr

    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def test_list_demos(self):
        code, out, _ = self.run_cli("--list-demos")
        self.assertEqual(code, 0)
        for name, (linear, spec) in EXPECTED.items():
            self.assertRegex(out, r"(?m)^%s +%s \(linear '%s'" % (name, re.escape(spec), linear))
        for name, spec in LAYERED_EXPECTED.items():
            demo = fx.DEMOS[name]
            self.assertRegex(out, r"(?m)^%s +%s \(layered, %d -> %d\)$" % (
                name, re.escape(spec), demo.in_features, demo.out_features))

    def test_demo_all_writes_weights_input_and_output(self):
        folder = self.folder.name
        code, out, err = self.run_cli("--demo", "all", "--out", folder, "--batch", "3")
        self.assertEqual(code, 0, err)
        for name, (linear, spec) in EXPECTED.items():
            with self.subTest(demo=name):
                self.assertIn("%s: %s (linear '%s')" % (name, spec, linear), out)
                path = os.path.join(folder, name)
                self.assertEqual(fx.read_chain(path + ".pt"),
                                 {"version": 1, "chain": spec, "linear": linear})
                state = torch.load(path + ".pt")
                x, y = torch.load(path + "_input.pt"), torch.load(path + "_output.pt")
                self.assertEqual(x.shape[0], 3)
                model = fx.build_demo(name).eval()
                model.load_state_dict(state)
                with torch.no_grad():
                    self.assertTrue(torch.equal(model(x), y))
                self.assertGreaterEqual(float(x.min()), 0.0)
                self.assertLess(float(x.max()), 1.0)
        self.assertEqual(torch.load(os.path.join(folder, "mynet.pt"))["fc.weight"].shape,
                         (256, 512))
        self.assertEqual(torch.load(os.path.join(folder, "mish_mish.pt"))["linear.weight"]
                         .shape, (48, 64))
        for name, spec in LAYERED_EXPECTED.items():
            with self.subTest(demo=name):
                self.assertIn("%s: %s (layered)" % (name, spec), out)
                path = os.path.join(folder, name)
                self.assertEqual(fx.read_chain(path + ".pt"),
                                 {"version": 1, "chain": spec, "linear": ""})
                x, y = torch.load(path + "_input.pt"), torch.load(path + "_output.pt")
                model = fx.build_demo(name).eval()
                model.load_state_dict(torch.load(path + ".pt"))
                with torch.no_grad():
                    self.assertTrue(torch.equal(model(x), y))
                self.assertEqual(tuple(x.shape), (3, fx.DEMOS[name].in_features))
                self.assertEqual(tuple(y.shape), (3, fx.DEMOS[name].out_features))

    def test_shape_seed_and_overwrite(self):
        folder = self.folder.name
        args = ["--demo", "mynet", "--out", folder, "--in-features", "8", "--out-features", "6"]
        self.assertEqual(self.run_cli(*args)[0], 0)
        self.assertEqual(torch.load(os.path.join(folder, "mynet.pt"))["fc.weight"].shape, (6, 8))
        first = torch.load(os.path.join(folder, "mynet_output.pt"))
        code, _, err = self.run_cli(*args)
        self.assertEqual(code, 2)
        self.assertIn("exists", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertEqual(self.run_cli(*(args + ["--overwrite"]))[0], 0)
        self.assertTrue(torch.equal(torch.load(os.path.join(folder, "mynet_output.pt")), first))
        self.assertEqual(self.run_cli(*(args + ["--overwrite", "--seed", "1"]))[0], 0)
        self.assertFalse(torch.equal(torch.load(os.path.join(folder, "mynet_output.pt")), first))

    def test_spec_prints_the_chain_a_file_carries(self):
        path = os.path.join(self.folder.name, "w.pt")
        fx.save_with_chain(fx.build_demo("mynet", 8, 6), path)
        code, out, _ = self.run_cli("--spec", path)
        self.assertEqual(code, 0)
        self.assertEqual(out, "chain: gelu(tanh),silu,clamp(-2,2)\nlinear: fc\n")

    def test_spec_prints_the_linears_of_a_layered_file(self):
        path = os.path.join(self.folder.name, "w.pt")
        fx.save_with_chain(fx.build_demo("residual_swiglu", 8, 8), path)
        code, out, _ = self.run_cli("--spec", path)
        self.assertEqual(code, 0)
        self.assertEqual(out, "chain: x+(ffn.w1:silu*ffn.w3|ffn.w2)\nlinears: ffn.w1, ffn.w3, "
                              "ffn.w2\n")

    def test_a_layered_demo_at_another_shape(self):
        folder = self.folder.name
        args = ["--demo", "swiglu_chunk", "--out", folder, "--in-features", "8",
                "--out-features", "6", "--batch", "2"]
        code, out, err = self.run_cli(*args)
        self.assertEqual(code, 0, err)
        self.assertIn("swiglu_chunk: w13[0]:silu*w13[1]|w2 (layered)", out)
        state = torch.load(os.path.join(folder, "swiglu_chunk.pt"))
        self.assertEqual(state["w13.weight"].shape, (2 * fx.HIDDEN, 8))
        self.assertEqual(state["w2.weight"].shape, (6, fx.HIDDEN))

    def test_spec_of_a_file_without_a_chain_exits_2(self):
        path = os.path.join(self.folder.name, "plain.pt")
        torch.save(nn.Linear(2, 2).state_dict(), path)
        for target in (path, os.path.join(self.folder.name, "missing.pt")):
            code, out, err = self.run_cli("--spec", target)
            self.assertEqual((code, out), (2, ""))
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertTrue(err.startswith("fx_chain: "), err)


def main():
    global fx, EXPORTER
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exporter", default=EXPORTER, help="path of weights/fx_chain.py")
    args, rest = parser.parse_known_args()
    EXPORTER = os.path.abspath(args.exporter)
    fx = load_module(EXPORTER, "fx_chain")
    print("fx_chain from %s, torch %s" % (EXPORTER, torch.__version__))
    program = unittest.main(argv=[sys.argv[0]] + rest, verbosity=2, exit=False)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
