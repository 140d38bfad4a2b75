"""Layered models (MLPs) through fusedlinear's command line, against PyTorch's output.

    /usr/bin/python3 tests/python/layered_round_trip.py --exporter weights/fx_chain.py \\
        --cli build/fusedlinear [--work DIR] [--random 200] [--seed 0] [--jobs N] \\
        [--demo NAME ...] [--rtol 1e-5] [--atol 1e-5]

Exports every layered demo of weights/fx_chain.py (those whose spec names its Linears) with
export_demo, and --random seeded random layered models built here (1 to 4 layers, widths 1 to
40, chains of random vocabulary ops in random PyTorch forms, some layers gated pairs or chunked
Linears, some models with a residual), each traced by the exporter (its spec checked against the
one the model was built from) and saved with save_with_chain, with its input (torch.rand) and
PyTorch's output. Then, for each, runs

    CLI run --weights F --input X --output Y --device cpu
    CLI compare --weights F --input X --device cpu --iters 1 --warmup 0

(with --device cuda: on CUDA, and compare in every precision and kernel, then in bfloat16 and
float16)
(--jobs at a time, default the CPU count) and checks Y against PyTorch's output
(torch.allclose, --rtol and --atol, 1e-5 each) and compare's exit code (0). One line per model,
`ok` or `FAIL` with the reason; a failing random model's files are kept in --work (default: a
temporary folder, removed at the end unless something failed). Exits 0 when every model passes,
1 otherwise.
"""
import argparse
import concurrent.futures
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

fx = None  # the exporter, loaded from --exporter


def load_exporter(path):
    spec = importlib.util.spec_from_file_location("fx_chain", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Random layered models. A model is a list of layers, each a dict:
#   kind: 'plain' (Linear, chain), 'gated' (chain(main(h)) * gate(h)), 'chunk' (one Linear of
#   twice the width, the chain on one half times the other half)
#   width: the layer's output width; ops: [(Op, form)], form a function (model, y) -> y
# and whether the input is added to the output. The model's forward runs them in the forms
# chosen, so that one spec is written many ways.

def _number(rng, low, high):
    """A short decimal in [low, high], as the float32 the spec writes."""
    return fx.float32(round(rng.uniform(low, high), 2))


def _param_name(model):
    model.param_count += 1
    return "p%d" % model.param_count


def _random_op(rng, model, width):
    """(Op, form): a vocabulary op with random arguments and one of its PyTorch forms; the
    form may register a parameter of the layer's width, [] or [1] on the model."""
    token = rng.choice(["relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu",
                        "swish", "mish", "sigmoid", "tanh", "hardtanh", "clamp", "hardsigmoid",
                        "hardswish", "softplus", "softsign", "tanhshrink", "logsigmoid",
                        "square", "add", "sub", "mul", "div", "identity"])
    pick = rng.choice
    if token == "relu":
        return fx.Op("relu"), pick([lambda m, y: F.relu(y), lambda m, y: torch.relu(y),
                                    lambda m, y: y.relu(), lambda m, y: F.relu(y, inplace=True)])
    if token == "relu6":
        return fx.Op("relu6"), pick([lambda m, y: F.relu6(y), lambda m, y: F.relu6(y, True)])
    if token == "leaky_relu":
        a = _number(rng, 0.01, 0.3)
        return fx.Op(token, [a]), pick([lambda m, y: F.leaky_relu(y, a),
                                        lambda m, y: F.leaky_relu(y, negative_slope=a)])
    if token in ("elu", "celu"):
        a = _number(rng, 0.5, 1.5)
        function = F.elu if token == "elu" else F.celu
        return fx.Op(token, [a]), lambda m, y: function(y, a)
    if token == "selu":
        return fx.Op("selu"), pick([lambda m, y: F.selu(y), lambda m, y: torch.selu(y)])
    if token == "gelu":
        approximate = pick(["none", "tanh"])
        return fx.Op("gelu", [approximate]), lambda m, y: F.gelu(y, approximate=approximate)
    if token == "silu":
        return fx.Op("silu"), lambda m, y: F.silu(y)
    if token == "swish":
        beta = pick([1.0, 1.702, _number(rng, 0.5, 2.0)])
        if beta == 1.0:
            return fx.Op("swish", [beta]), pick([lambda m, y: y * torch.sigmoid(y),
                                                 lambda m, y: torch.sigmoid(y) * y,
                                                 lambda m, y: torch.mul(y, y.sigmoid())])
        return fx.Op("swish", [beta]), pick([lambda m, y: y * torch.sigmoid(beta * y),
                                             lambda m, y: torch.sigmoid(y * beta) * y,
                                             lambda m, y: y * (beta * y).sigmoid()])
    if token == "mish":
        return fx.Op("mish"), lambda m, y: F.mish(y)
    if token == "sigmoid":
        return fx.Op("sigmoid"), pick([lambda m, y: torch.sigmoid(y), lambda m, y: y.sigmoid()])
    if token == "tanh":
        return fx.Op("tanh"), pick([lambda m, y: torch.tanh(y), lambda m, y: y.tanh()])
    if token in ("hardtanh", "clamp"):
        low = _number(rng, -2, 0)
        high = fx.float32(low + _number(rng, 0.5, 3))
        if token == "hardtanh":
            return fx.Op(token, [low, high]), lambda m, y: F.hardtanh(y, low, high)
        return fx.Op(token, [low, high]), pick([lambda m, y: torch.clamp(y, low, high),
                                                lambda m, y: y.clamp(min=low, max=high)])
    if token in ("hardsigmoid", "hardswish", "softsign", "tanhshrink", "logsigmoid"):
        function = getattr(F, token)
        return fx.Op(token), lambda m, y: function(y)
    if token == "softplus":
        beta, threshold = _number(rng, 0.5, 2), pick([20.0, 10.0, 5.0])
        return fx.Op(token, [beta, threshold]), lambda m, y: F.softplus(y, beta, threshold)
    if token == "square":
        return fx.Op("square"), pick([lambda m, y: y * y, lambda m, y: y ** 2,
                                      lambda m, y: torch.square(y), lambda m, y: y.pow(2)])
    if token == "identity":
        return None, pick([lambda m, y: F.dropout(y, 0.3, training=m.training),
                           lambda m, y: y.contiguous(),
                           lambda m, y: F.dropout(y, 0.5, training=False)])
    # add, sub, mul, div: a number or a parameter
    if rng.random() < 0.5:
        value = _number(rng, 0.5, 2) * pick([1, -1])
        other = value
        get = lambda m: value  # noqa: E731
    else:
        name = _param_name(model)
        shape = pick([[width], [], [1]])
        tensor = torch.rand(shape) * 1.5 + 0.5 if token == "div" else torch.randn(shape)
        model.register_parameter(name, nn.Parameter(tensor))
        other = name
        get = lambda m: getattr(m, name)  # noqa: E731
    forms = {"add": [lambda m, y: y + get(m), lambda m, y: get(m) + y,
                     lambda m, y: torch.add(y, get(m))],
             "sub": [lambda m, y: y - get(m), lambda m, y: torch.sub(y, get(m))],
             "mul": [lambda m, y: y * get(m), lambda m, y: get(m) * y,
                     lambda m, y: y.mul(get(m))],
             "div": [lambda m, y: y / get(m), lambda m, y: torch.div(y, get(m))]}
    return fx.Op(token, [other]), pick(forms[token])


def _chunk_forms():
    def method(y):
        a, b = y.chunk(2, -1)
        return a, b

    def function(y):
        halves = torch.chunk(y, 2, dim=-1)
        return halves[0], halves[1]
    return [method, function]


PRODUCTS = [lambda a, b: a * b, lambda a, b: torch.mul(a, b), lambda a, b: a.mul(b)]


class RandomMLP(nn.Module):
    """A random layered model, its forward in the forms its recipe chose."""

    def __init__(self, rng):
        super().__init__()
        self.param_count = 0
        depth = rng.randint(1, 4)
        self.residual = rng.random() < 0.25
        self.in_features = rng.randint(1, 40)
        widths = [rng.randint(1, 40) for _ in range(depth)]
        if self.residual:
            widths[-1] = self.in_features
        kinds = [rng.choice(["plain", "plain", "gated", "chunk"]) for _ in range(depth)]
        if depth == 1 and kinds[0] == "plain" and not self.residual:
            kinds[0] = rng.choice(["gated", "chunk"])  # else a chain spec, not a layered one
        if rng.random() < 0.5:
            self.layers = nn.ModuleDict()  # the Linears' paths are layers.NAME
        prefix = "layers." if hasattr(self, "layers") else ""
        self.recipe, previous = [], self.in_features
        for index, (kind, width) in enumerate(zip(kinds, widths)):
            layer = {"kind": kind, "width": width}
            names = {"plain": ("fc%d" % index, None), "gated": ("w%d" % index, "v%d" % index),
                     "chunk": ("w%d" % index, None)}[kind]
            main = nn.Linear(previous, 2 * width if kind == "chunk" else width,
                             bias=rng.random() < 0.8)
            self._add(names[0], main)
            layer["linear"] = prefix + names[0]
            if kind == "gated":
                self._add(names[1], nn.Linear(previous, width, bias=rng.random() < 0.8))
                layer["gate"] = prefix + names[1]
                layer["product"] = rng.choice(PRODUCTS)
                layer["swapped"] = rng.random() < 0.5
            if kind == "chunk":
                layer["half"] = rng.randint(0, 1)
                layer["split"] = rng.choice(_chunk_forms())
                layer["product"] = rng.choice(PRODUCTS)
                layer["swapped"] = rng.random() < 0.5
            count = rng.choice([0, 1, 1, 2, 2, 3])
            layer["ops"] = [op for op in (_random_op(rng, self, width) for _ in range(count))]
            self.recipe.append(layer)
            previous = width
        self.residual_form = rng.choice([
            lambda x, h: x + h, lambda x, h: h + x, lambda x, h: torch.add(x, h),
            self._add_in_place])

    @staticmethod
    def _add_in_place(x, h):
        h += x
        return h

    def _add(self, name, module):
        if hasattr(self, "layers"):
            self.layers[name] = module
        else:
            setattr(self, name, module)

    def _get(self, path):
        return self.get_submodule(path)

    def _chain(self, ops, y):
        for _, form in ops:
            y = form(self, y)
        return y

    def forward(self, x):
        h = x
        for layer in self.recipe:
            linear = self._get(layer["linear"])
            if layer["kind"] == "plain":
                h = self._chain(layer["ops"], linear(h))
            elif layer["kind"] == "gated":
                active = self._chain(layer["ops"], linear(h))
                gate = self._get(layer["gate"])(h)
                pair = (gate, active) if layer["swapped"] else (active, gate)
                h = layer["product"](*pair)
            else:
                halves = layer["split"](linear(h))
                active = self._chain(layer["ops"], halves[layer["half"]])
                other = halves[1 - layer["half"]]
                pair = (other, active) if layer["swapped"] else (active, other)
                h = layer["product"](*pair)
        return self.residual_form(x, h) if self.residual else h

    def expected_spec(self):
        """The canonical layered spec this model was built to have. A gated pair without ops
        (a bilinear product) names the product's left operand first."""
        texts = []
        for layer in self.recipe:
            ops = ",".join(str(op) for op, _ in layer["ops"] if op is not None)
            bilinear_swapped = not ops and layer.get("swapped")
            if layer["kind"] == "plain":
                texts.append(layer["linear"] + (":" + ops if ops else ""))
            elif layer["kind"] == "gated":
                pair = (layer["gate"], layer["linear"]) if bilinear_swapped else \
                    (layer["linear"], layer["gate"])
                texts.append("%s:%s*%s" % (pair[0], ops, pair[1]))
            else:
                half = 1 - layer["half"] if bilinear_swapped else layer["half"]
                texts.append("%s[%d]:%s*%s[%d]" % (layer["linear"], half, ops, layer["linear"],
                                                   1 - half))
        text = "|".join(texts)
        return "x+(%s)" % text if self.residual else text


def export_random(index, seed, folder, batch):
    """Builds random model `index`, checks its traced spec, writes NAME.pt, NAME_input.pt and
    NAME_output.pt; returns (name, spec, paths) or (name, None, reason)."""
    name = "random%03d" % index
    torch.manual_seed(seed * 100003 + index)
    model = RandomMLP(random.Random(seed * 100003 + index)).eval()
    want = model.expected_spec()
    paths = [os.path.join(folder, name + suffix) for suffix in (".pt", "_input.pt", "_output.pt")]
    try:
        linear, spec = fx.save_with_chain(model, paths[0], overwrite=True)
    except fx.ChainError as error:
        return name, None, "refused (%s): %s" % (want, error)
    if (linear, spec) != ("", want):
        return name, None, "traced as %r, built as %r" % ((linear, spec), ("", want))
    x = torch.rand(batch, model.in_features)
    with torch.no_grad():
        y = model(x.clone())
    torch.save(x, paths[1])
    torch.save(y, paths[2])
    return name, spec, paths


# ---------------------------------------------------------------------------------------------
# The program.

def run(command):
    """(exit code, last line of its output) of a command."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        return -1, "could not run %s: %s" % (command[0], error)
    lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return result.returncode, lines[-1] if lines else "(no output)"


# On CUDA, compare also runs every precision of a float32 model and the 16-bit models (each against
# eager libtorch of the same dtype, at compare's tolerance for it).
CUDA_COMPARES = (["--precision", "all", "--gemm", "auto,cublas,skinny,hopper"],
                 ["--dtype", "bfloat16", "--gemm", "auto,cublas,skinny,hopper"],
                 ["--dtype", "float16", "--gemm", "auto,cublas,skinny"])


def check(cli, paths, rtol, atol, device):
    """(ok, what) for one exported model: run's output against PyTorch's, and compare's exit."""
    weights, x, want = paths
    fused = weights[:-len(".pt")] + "_fused.pt"
    if os.path.exists(fused):
        os.unlink(fused)
    code, last = run([cli, "run", "--weights", weights, "--input", x, "--output", fused,
                      "--device", device])
    if code != 0:
        return False, "run: exit %d: %s" % (code, last)
    if not os.path.exists(fused):
        return False, "run: exit 0 but no %s" % fused
    got, expected = torch.load(fused), torch.load(want)
    if not isinstance(got, torch.Tensor):
        return False, "run wrote a %s, not a tensor" % type(got).__name__
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False, "run: %s %s, PyTorch's %s %s" % (list(got.shape), got.dtype,
                                                      list(expected.shape), expected.dtype)
    largest = (got.double() - expected.double()).abs().max().item() if got.numel() else 0.0
    if not torch.allclose(got, expected, rtol=rtol, atol=atol):
        return False, "run: not within rtol %g, atol %g of PyTorch (max abs difference %.3g)" % (
            rtol, atol, largest)
    for extra in CUDA_COMPARES if device == "cuda" else ([],):
        code, last = run([cli, "compare", "--weights", weights, "--input", x, "--device", device,
                          "--iters", "1", "--warmup", "0"] + extra)
        if code != 0:
            return False, "compare %s: exit %d: %s" % (" ".join(extra), code, last)
    return True, "max abs difference %.3g; compare passes%s" % (
        largest, " in every precision and dtype" if device == "cuda" else "")


def main():
    global fx
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exporter", required=True, help="path of weights/fx_chain.py")
    parser.add_argument("--cli", required=True, help="path of the fusedlinear program")
    parser.add_argument("--work", help="folder for the files (default: a temporary one)")
    parser.add_argument("--demo", action="append", help="only this layered demo (repeatable)")
    parser.add_argument("--random", type=int, default=200, help="random models (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("--batch", type=int, default=5, help="rows of each input (default 5)")
    parser.add_argument("--rtol", type=float, default=1e-5, help="default 1e-5")
    parser.add_argument("--atol", type=float, default=1e-5, help="default 1e-5")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where run and compare run (default cpu); cuda also compares every "
                             "precision, bfloat16 and float16, and exits 77 (skipped) without a "
                             "CUDA device")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="programs run at a time (default: the CPU count)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch %s sees no CUDA device: skipped" % torch.__version__)
        return 77  # ctest's SKIP_RETURN_CODE
    fx = load_exporter(args.exporter)
    layered = [name for name in fx.DEMOS if fx.chain_spec(fx.build_demo(name, 4, 4))[0] == ""]
    names = args.demo or layered
    unknown = [name for name in names if name not in layered]
    if unknown:
        parser.error("no layered demo %s; they are: %s" % (", ".join(unknown), ", ".join(layered)))
    work = args.work or tempfile.mkdtemp(prefix="layered_round_trip.")
    os.makedirs(work, exist_ok=True)
    print("fx_chain from %s, torch %s; %s; files in %s" % (args.exporter, torch.__version__,
                                                           args.cli, work), flush=True)

    # Export: (name, spec, paths), or (name, None, reason) for a model the exporter got wrong.
    exported = []
    for name in names:
        linear, spec, paths = fx.export_demo(name, work, batch=args.batch, seed=args.seed,
                                             overwrite=True)
        exported.append((name, spec, paths))
    for index in range(args.random):
        exported.append(export_random(index, args.seed, work, args.batch))

    def one(entry):
        name, spec, paths = entry
        return (False, paths) if spec is None else check(args.cli, paths, args.rtol, args.atol,
                                                         args.device)

    passed, failed = 0, []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for (name, spec, _), (ok, what) in zip(exported, pool.map(one, exported)):
            print("%-5s %-20s %s: %s" % ("ok" if ok else "FAIL", name, spec, what), flush=True)
            passed += ok
            if not ok:
                failed.append(name)
    print("%d of %d layered models (%d demos, %d random) within rtol %g, atol %g of PyTorch, "
          "compare passing" % (passed, len(exported), len(names), args.random, args.rtol,
                               args.atol))
    if failed:
        print("failed: %s (files kept in %s)" % (", ".join(failed), work))
    elif not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
