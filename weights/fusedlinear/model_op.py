"""A layered model from its state dict and layered spec (a file weights/fx_chain.py's
save_with_chain wrote carries both), as PyTorch modules:

    ModelOp(state, spec)    the model as one call of fusedlinear's whole-model op,
                            torch.ops.fusedlinear.model(x, weights, biases, params, spec,
                            precision) (kernels/ops/ops.h); it scripts (TorchScript) and exports
                            (torch.export, AOTInductor); the ops library must be loaded to run it
    SpecModel(state, spec)  the same model in plain PyTorch, op by op as the spec says: the
                            reference the op's output is held to
    op_arguments(state, spec)   the op's weights, biases and chain parameters, and the spec in
                            canonical form, in the order the op takes them

    import fusedlinear
    state, spec = torch.load("mlp.pt"), fusedlinear.read_chain("mlp.pt")["chain"]
    fused = fusedlinear.ModelOp(state, spec)

Runs with torch 1.13 and torch 2.x.
"""
from typing import List, Optional

import torch
import torch.nn as nn

from . import export as fx


def op_arguments(state, spec):
    """(weights, biases, params, canonical spec) of the whole-model op for the layered model
    `spec` with the tensors of `state`: each Linear's weight in the spec's order (a gate after
    its layer's Linear), its bias or None, and each layer's chain parameters in slot order (a
    parameter per add/sub/mul/div by a name, a name used twice given twice), layer after layer;
    as LayeredModel::op_arguments builds them in C++ (modules/layered_model.h), for precision
    ieee or tf32 (no bfloat16 parts of W). ChainError for a spec that is not layered; KeyError
    naming a tensor the state dict lacks."""
    model = fx.parse_model_spec(spec)

    def tensor(key, what):
        if key not in state:
            raise KeyError("the state dict has no %s (%s); its keys: %s"
                           % (key, what, ", ".join(sorted(state)[:8])))
        return state[key]

    weights, biases, params = [], [], []
    for path in model.linears():
        weights.append(tensor(path + ".weight", "the weight of Linear " + path))
        biases.append(state.get(path + ".bias"))
    for layer in model.layers:
        for op in layer.ops:
            if op.token in fx.BINARY and isinstance(op.args[0], str):
                params.append(tensor(op.args[0], "a parameter of " + str(op)))
    return weights, biases, params, str(model)


def _frozen(tensors):
    return nn.ParameterList([nn.Parameter(t.detach().clone(), requires_grad=False)
                             for t in tensors])


class ModelOp(nn.Module):
    """The layered model `spec` with the tensors of `state`, as one call of the whole-model op
    in `precision` (ieee, or tf32 on a GPU). Its own copies of the tensors, in the op's order:
    weights.K, biases.K (the Linears that have one), params.K."""

    def __init__(self, state, spec, precision="ieee"):
        super().__init__()
        if precision not in ("ieee", "tf32"):
            raise ValueError("ModelOp runs ieee or tf32, which take W as it is; got %r"
                             % precision)
        weights, biases, params, self.spec = op_arguments(state, spec)
        self.precision = precision
        self.weights = _frozen(weights)
        self.biases = _frozen([b for b in biases if b is not None])
        self.has_bias: List[bool] = [b is not None for b in biases]
        self.params = _frozen(params)

    def forward(self, x):
        weights: List[torch.Tensor] = [w for w in self.weights]
        present: List[torch.Tensor] = [b for b in self.biases]
        biases: List[Optional[torch.Tensor]] = []
        taken = 0
        for has in self.has_bias:
            if has:
                biases.append(present[taken])
                taken += 1
            else:
                biases.append(None)
        params: List[torch.Tensor] = [p for p in self.params]
        return torch.ops.fusedlinear.model(x, weights, biases, params, self.spec, self.precision)


def _eager_functions():
    """Each token of the vocabulary -> (its PyTorch function, the names of its arguments after
    the input), the first out-of-place form weights/fx_chain.py reads as the token."""
    functions = {}
    for function, form in fx.FUNCTION_FORMS.items():
        if form.inplace is not True and form.token not in functions:
            functions[form.token] = (function, [name for name, _ in form.params[1:]])
    return functions


EAGER_FUNCTIONS = _eager_functions()


def _run_op(op, y, module):
    """One op of a chain on y, by PyTorch's function for it (swish, a pattern rather than a
    function, as y * sigmoid(beta * y))."""
    args = [getattr(module, _attribute(a)) if isinstance(a, str) and op.token in fx.BINARY
            else a for a in op.args]
    if op.token == "swish":
        beta = args[0] if args else 1.0
        return y * torch.sigmoid(beta * y)
    function, names = EAGER_FUNCTIONS[op.token]
    return function(y, **dict(zip(names, args)))


def _attribute(key):
    return key.replace(".", "__")


class SpecModel(nn.Module):
    """The layered model `spec` with the tensors of `state` in plain PyTorch: F.linear for each
    Linear and PyTorch's function for each op of a chain, in the spec's order (the grammar of
    kernels/ops/model_spec.h: a gated pair chain(linear(h)) * gate(h), a chunked Linear's chain
    on one half times the other, a residual adding the input). Tensors as attributes named by
    their keys, '.' written '__'."""

    def __init__(self, state, spec):
        super().__init__()
        self.model = fx.parse_model_spec(spec)
        op_arguments(state, spec)  # every tensor the model needs is there, or KeyError
        keys = [p + suffix for p in self.model.linears() for suffix in (".weight", ".bias")]
        keys += [a for layer in self.model.layers for op in layer.ops for a in op.args
                 if isinstance(a, str) and op.token in fx.BINARY]
        for key in dict.fromkeys(keys):
            if key in state:
                self.register_buffer(_attribute(key), state[key].detach().clone())

    def _linear(self, path, h):
        bias = getattr(self, _attribute(path + ".bias"), None)
        return torch.nn.functional.linear(h, getattr(self, _attribute(path + ".weight")), bias)

    def _chain(self, ops, y):
        for op in ops:
            y = _run_op(op, y, self)
        return y

    def forward(self, x):
        h = x
        for layer in self.model.layers:
            y = self._linear(layer.linear.path, h)
            if layer.linear.half >= 0:
                halves = y.chunk(2, -1)
                h = self._chain(layer.ops, halves[layer.linear.half]) * \
                    halves[1 - layer.linear.half]
            elif layer.gate is not None:
                h = self._chain(layer.ops, y) * self._linear(layer.gate.path, h)
            else:
                h = self._chain(layer.ops, y)
        return x + h if self.model.residual else h
