#!/usr/bin/env python3
"""The exporter's command line and its demo models; the exporter itself is the fusedlinear
package's (weights/fusedlinear/export.py), whose names this module re-exports, so that a script
that puts weights/ on sys.path (or loads this file by its path) uses it without installing it:

    sys.path.insert(0, "weights")
    from fx_chain import save_with_chain, chain_spec     # the same as fusedlinear's

What the exporter accepts and writes: docs/CHAINS.md, and the docstring of
weights/fusedlinear/export.py.

Command line:
    python3 weights/fx_chain.py --demo NAME|all --out DIR [--batch N --in-features I
        --out-features O --seed S --overwrite]     writes DIR/NAME.pt, NAME_input.pt, NAME_output.pt
    python3 weights/fx_chain.py --list-demos       the demo models and their specs
    python3 weights/fx_chain.py --spec FILE        the chain and Linear a saved file carries

Runs with torch 1.13 (Debian's python3-torch) and torch 2.x; .safetensors files need the
safetensors package to be written (reading the spec back needs nothing).
"""
import argparse
import collections
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# The package beside this file, ahead of an installed one: the checkout's exporter is the one its
# scripts and tests mean.
_WEIGHTS = os.path.dirname(os.path.abspath(__file__))
if _WEIGHTS not in sys.path:
    sys.path.insert(0, _WEIGHTS)

from fusedlinear.export import *  # noqa: E402,F401,F403  (the exporter's names, re-exported)
from fusedlinear.export import ChainError, check_target, write_file  # noqa: E402


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


# Layered demos: MLPs, each Linear a layer of the spec. HIDDEN is their hidden width.

HIDDEN = 64


def mlp_sequential(in_features, out_features):
    """nn.Sequential(Linear, GELU, Linear): the Linears are '0' and '2'."""
    return nn.Sequential(nn.Linear(in_features, HIDDEN), nn.GELU(),
                         nn.Linear(HIDDEN, out_features))


class NestedMLP(nn.Module):
    """Linear -> ReLU -> (Linear -> SiLU, a Sequential inside a Sequential) -> head."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(in_features, HIDDEN), nn.ReLU(),
                                   nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.SiLU()))
        self.head = nn.Linear(HIDDEN, out_features)

    def forward(self, x):
        return self.head(self.block(x))


class FunctionalMLP(nn.Module):
    """fc2(gelu(fc1(x), approximate='tanh')), written with functions."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, out_features)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class PolicyTanh(nn.Module):
    """A reinforcement-learning policy head: in -> 256 -> 256 -> 256 -> out, tanh, tanh, relu."""

    def __init__(self, in_features, out_features, hidden=256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.Tanh(),
                                 nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, out_features))

    def forward(self, x):
        return self.net(x)


class SwiGLU(nn.Module):
    """LLaMA's feed-forward: w2(silu(w1(x)) * w3(x)), Linears without bias; `swapped` writes
    the product the other way round, w3(x) * silu(w1(x))."""

    def __init__(self, in_features, out_features, swapped=False):
        super().__init__()
        self.w1 = nn.Linear(in_features, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, out_features, bias=False)
        self.w3 = nn.Linear(in_features, HIDDEN, bias=False)
        self.swapped = swapped

    def forward(self, x):
        if self.swapped:
            return self.w2(self.w3(x) * F.silu(self.w1(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GatedGelu(nn.Module):
    """T5 v1.1's gated-GELU feed-forward: wo(dropout(gelu_tanh(wi_0(x)) * wi_1(x)))."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.wi_0 = nn.Linear(in_features, HIDDEN, bias=False)
        self.wi_1 = nn.Linear(in_features, HIDDEN, bias=False)
        self.wo = nn.Linear(HIDDEN, out_features, bias=False)
        self.act = nn.GELU(approximate="tanh")
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        hidden = self.act(self.wi_0(x)) * self.wi_1(x)
        return self.wo(self.dropout(hidden))


class ChunkSwiGLU(nn.Module):
    """SwiGLU from one Linear of twice the width: a, b = w13(x).chunk(2, -1); w2(silu(a) * b)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.w13 = nn.Linear(in_features, 2 * HIDDEN)
        self.w2 = nn.Linear(HIDDEN, out_features)

    def forward(self, x):
        a, b = self.w13(x).chunk(2, -1)
        return self.w2(F.silu(a) * b)


class ChunkGEGLU(nn.Module):
    """diffusers' GEGLU and its output Linear: the second half activated,
    h, gate = proj(x).chunk(2, dim=-1); out(h * gelu(gate))."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * HIDDEN)
        self.out = nn.Linear(HIDDEN, out_features)

    def forward(self, x):
        hidden, gate = torch.chunk(self.proj(x), 2, dim=-1)
        return self.out(hidden * F.gelu(gate))


class ResidualMLP(nn.Module):
    """x + fc2(gelu(fc1(x))): the output is as wide as the input (out_features is ignored)."""

    def __init__(self, in_features, out_features=None):
        super().__init__()
        self.fc1 = nn.Linear(in_features, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, in_features)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class ResidualSwiGLU(nn.Module):
    """A transformer block's feed-forward half without its norm: x = x + ffn(x), ffn a SwiGLU
    (its Linears ffn.w1, ffn.w2, ffn.w3); out_features is ignored."""

    def __init__(self, in_features, out_features=None):
        super().__init__()
        self.ffn = SwiGLU(in_features, in_features)

    def forward(self, x):
        x = x + self.ffn(x)
        return x


class QuickGELU(nn.Module):
    """CLIP's activation: x * sigmoid(1.702 * x)."""

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ClipMLP(nn.Module):
    """CLIP's MLP: c_fc -> QuickGELU -> c_proj, inside `mlp` as CLIP names it."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.mlp = nn.Sequential(collections.OrderedDict([
            ("c_fc", nn.Linear(in_features, HIDDEN)), ("gelu", QuickGELU()),
            ("c_proj", nn.Linear(HIDDEN, out_features))]))

    def forward(self, x):
        return self.mlp(x)


class ReluSquaredMLP(nn.Module):
    """Primer's squared ReLU: fc2(relu(fc1(x)).square())."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, out_features)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)).square())


def mlp_dropout_identity(in_features, out_features):
    """Linear -> ReLU -> Dropout(0.1) -> Identity -> Linear -> Dropout(0.2): the Linears are '0'
    and '4'; the dropouts and the Identity leave no trace in the spec."""
    return nn.Sequential(nn.Linear(in_features, HIDDEN), nn.ReLU(), nn.Dropout(0.1),
                         nn.Identity(), nn.Linear(HIDDEN, out_features), nn.Dropout(0.2))


class MLPWithParams(nn.Module):
    """fc2(silu(fc1(x) + shift)) * scale: a per-feature shift on the hidden layer (shape
    [hidden]), a scalar scale (shape []) on the output layer."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, HIDDEN)
        self.shift = nn.Parameter(torch.randn(HIDDEN))
        self.fc2 = nn.Linear(HIDDEN, out_features)
        self.scale = nn.Parameter(torch.tensor(0.75))

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x) + self.shift)) * self.scale


class MixedMLP(nn.Module):
    """Four layers of assorted forms: in-place ReLU, LeakyReLU, Hardswish then clamp, Softplus."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, out_features)
        self.act = nn.LeakyReLU(0.1)

    def forward(self, x):
        x = F.relu(self.fc1(x), inplace=True)
        x = self.act(self.fc2(x))
        x = F.hardswish(self.fc3(x)).clamp(-1, 1)
        return F.softplus(self.fc4(x))


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
    # layered models (MLPs)
    "mlp_sequential": Demo(mlp_sequential, 32, 16),
    "mlp_nested": Demo(NestedMLP, 32, 16),
    "mlp_functional": Demo(FunctionalMLP, 32, 16),
    "policy_tanh": Demo(PolicyTanh, 64, 8),
    "swiglu": Demo(SwiGLU, 32, 32),
    "swiglu_swapped": Demo(lambda i, o: SwiGLU(i, o, swapped=True), 32, 32),
    "geglu": Demo(GatedGelu, 32, 32),
    "swiglu_chunk": Demo(ChunkSwiGLU, 32, 32),
    "geglu_chunk": Demo(ChunkGEGLU, 32, 32),
    "residual_mlp": Demo(ResidualMLP, 32, 32),
    "residual_swiglu": Demo(ResidualSwiGLU, 32, 32),
    "quickgelu_mlp": Demo(ClipMLP, 32, 32),
    "relu_squared_mlp": Demo(ReluSquaredMLP, 32, 16),
    "mlp_dropout_identity": Demo(mlp_dropout_identity, 32, 16),
    "mlp_with_params": Demo(MLPWithParams, 32, 16),
    "mlp_mixed": Demo(MixedMLP, 32, 16),
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
        check_target(path, overwrite)
    linear, spec = save_with_chain(model, paths[0], overwrite=overwrite)
    write_file(paths[1], overwrite, lambda file: torch.save(x, file))
    write_file(paths[2], overwrite, lambda file: torch.save(y, file))
    return linear, spec, paths


def model_in_features(model):
    return next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features


# ---------------------------------------------------------------------------------------------
# Command line.

def _arguments(argv):
    parser = argparse.ArgumentParser(
        description="Save Linear -> pointwise models (and layered MLPs of them) with their "
        "spec for fusedlinear.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--demo", choices=tuple(DEMOS) + ("all",), help="export a demo model")
    what.add_argument("--list-demos", action="store_true", help="print each demo and its spec")
    what.add_argument("--spec", metavar="FILE", help="print the chain and Linear FILE carries "
                      "(a layered spec: its Linears)")
    parser.add_argument("--out", help="folder for --demo's files (created if missing)")
    parser.add_argument("--batch", type=int, default=5, help="rows of the input (default 5)")
    parser.add_argument("--in-features", type=int, help="default: the demo's (64; mynet 512; "
                        "--list-demos says)")
    parser.add_argument("--out-features", type=int, help="default: the demo's (48; mynet 256; "
                        "a residual demo's is its in-features)")
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


def _which(linear):
    return "linear '%s'" % linear if linear else "layered"


def _list_demos():
    for name in DEMOS:
        linear, spec = chain_spec(build_demo(name, 4, 3))
        demo = DEMOS[name]
        print("%-20s %s (%s, %d -> %d)" % (name, spec, _which(linear), demo.in_features,
                                             demo.out_features))


def _export_demos(args):
    os.makedirs(args.out, exist_ok=True)
    for name in DEMOS if args.demo == "all" else (args.demo,):
        linear, spec, paths = export_demo(name, args.out, args.batch, args.in_features,
                                          args.out_features, args.seed, args.overwrite)
        print("%s: %s (%s) -> %s" % (name, spec, _which(linear), ", ".join(paths)))


def main(argv=None):
    args = _arguments(argv)
    try:
        if args.list_demos:
            _list_demos()
        elif args.spec:
            found = read_chain(args.spec)
            if is_layered_spec(found["chain"]):
                print("chain: %s\nlinears: %s" % (found["chain"], ", ".join(
                    parse_model_spec(found["chain"]).linears())))
            else:
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
