#!/usr/bin/env python3
"""Build a Triton Inference Server model repository for one of fusedlinear's models.

    python3 examples/serving/build_repository.py WEIGHTS OUT_DIR --ops LIBRARY \\
        [--model swish_chain|mish_mish | --name NAME] [--rows N] [--device cuda|cpu] [--overwrite]

WEIGHTS is a state dict saved from Python: one of the two reference models' (weights/export.py
writes one), or any layered model's that weights/fx_chain.py's save_with_chain wrote (.pt or
.safetensors, its layered spec inside); LIBRARY is the ops library, libfusedlinear_ops.so.
OUT_DIR becomes a model repository holding the model written with fusedlinear's ops (a reference
model: a bias-free GEMM, then the op; a layered model: one call of the whole-model op,
torch.ops.fusedlinear.model, weights/model_op.py), twice:

    <model>_aoti/config.pbtxt, <model>_aoti/1/model.pt2
        torch.export, then AOTInductor (torch._inductor.aoti_compile_and_package), for the
        PyTorch backend's platform "torch_aoti"; exported for an input of exactly N rows
    <model>_torchscript/config.pbtxt, <model>_torchscript/1/model.pt
        torch.jit.script, for the platform "pytorch_libtorch" (the legacy path); up to N rows
    <model>_input.pt, <model>_want.pt
        a sample input, torch.rand(N, in_features), and the plain PyTorch model's output for it
        (no ops; a layered model's evaluated op by op from its spec), for
        app/tools/check_serving.cpp; files, since the server takes every folder of the
        repository for a model

<model> is the reference model's name, or a layered model's --name (default: WEIGHTS' file name
without its extension).

Needs torch 2.6 or later. Nothing is written until everything is built and checked: the
repository is made in a temporary folder beside OUT_DIR and renamed to OUT_DIR at the end.
"""
import argparse
import errno
import os
import re
import shutil
import signal
import sys
import tempfile

try:
    import torch
except ImportError:  # --help works without torch; main() says what it needs
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
# The reference models (weights/export.py), the same models written with the ops (tests/python)
# and a layered model from its spec (weights/model_op.py), imported, not written again here.
for _folder in ("weights", os.path.join("tests", "python")):
    sys.path.insert(0, os.path.join(HERE, "..", "..", _folder))
MODEL_NAMES = ("swish_chain", "mish_mish")
# A repository's model name: what Triton takes in a folder's name and a URL.
REPOSITORY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# The first torch with torch._inductor.aoti_compile_and_package and AOTIModelPackageLoader.
NEEDS_TORCH = (2, 6)
# A build whose artifacts differ from PyTorch by more than PyTorch's own allclose tolerance is
# not published; the C++ checker holds them to the tighter bound.
PUBLISH_TOLERANCE = 1e-4


def fail(message):
    print("build_repository.py: error: " + message, file=sys.stderr)
    sys.exit(2)


def first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def own_entries(model):
    """What a build of `model` writes into OUT_DIR."""
    return {model + "_aoti", model + "_torchscript", model + "_input.pt", model + "_want.pt"}


def check_out_dir(out, overwrite, name):
    """Refuses, before any work, an OUT_DIR whose contents would be lost: with --overwrite it
    may hold only what a build of a reference model or of `name` writes."""
    if os.path.islink(out):
        fail("%s is a symbolic link; give the folder itself" % out)
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        fail("%s exists and is not a folder" % out)
    entries = set(os.listdir(out))
    if not entries:
        return
    if not overwrite:
        fail("%s is not empty; pass --overwrite to replace the repository it holds" % out)
    foreign = sorted(entries - set().union(*(own_entries(m) for m in MODEL_NAMES + (name,))))
    if foreign:
        fail("%s holds %s, which this script does not write; --overwrite replaces only a "
             "repository it built: choose another folder" % (out, ", ".join(foreign[:3])))


def publish(staging, out, overwrite, name):
    """Renames the finished repository to OUT_DIR; an existing one is replaced only with
    --overwrite, and kept if the replacement fails."""
    try:
        os.rename(staging, out)  # OUT_DIR missing or an empty folder: one step
        return
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            fail("cannot rename %s to %s: %s" % (staging, out, error.strerror))
        if not overwrite:
            fail("%s was filled while the repository was built; nothing replaced" % out)
    check_out_dir(out, overwrite, name)  # still only what this script writes
    old = tempfile.mkdtemp(prefix="." + os.path.basename(out) + ".old-",
                           dir=os.path.dirname(out))
    os.rename(out, old)
    try:
        os.rename(staging, out)
    except OSError as error:
        os.rename(old, out)
        fail("cannot rename %s to %s: %s; %s kept" % (staging, out, error.strerror, out))
    shutil.rmtree(old, ignore_errors=True)


def read_state_dict(path):
    """The tensors of a torch.save'd state dict (as weights/export.py writes it in any --form),
    or of a .safetensors file."""
    if path.endswith(".safetensors"):
        try:
            import safetensors.torch
        except ImportError:
            fail("%s: reading .safetensors needs the safetensors package" % path)
        try:
            return safetensors.torch.load_file(path)
        except Exception as error:  # any reason: one line
            fail("cannot read %s as a .safetensors file: %s" % (path, first_line(error)))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # any reason: one line
        fail("cannot read %s as a file saved by torch.save: %s" % (path, first_line(error)))
    if isinstance(state, dict) and isinstance(state.get("model_state_dict"), dict):
        state = state["model_state_dict"]  # a training checkpoint
    if (not isinstance(state, dict) or not state
            or not all(isinstance(v, torch.Tensor) for v in state.values())):
        fail("%s holds no state dict (a dict of tensors, as torch.save(model.state_dict()) "
             "writes)" % path)
    state = dict(state)
    while state and all(k.startswith("module.") for k in state):  # (Distributed)DataParallel
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def reference_model(name, state, path):
    """The plain PyTorch model (weights/export.py's definition) with the file's parameters."""
    from export import build

    shapes = {k: v.shape for k, v in build(name, 2, 3).state_dict().items()}
    weight_key = next(k for k in shapes if len(shapes[k]) == 2)  # the Linear's weight
    if weight_key not in state or state[weight_key].dim() != 2:
        fail("%s has no 2-D %s: not a %s state dict (its keys: %s)"
             % (path, weight_key, name, ", ".join(sorted(state)[:6])))
    out_features, in_features = state[weight_key].shape
    model = build(name, in_features, out_features)
    want = model.state_dict()
    missing, unexpected = sorted(set(want) - set(state)), sorted(set(state) - set(want))
    if missing or unexpected:
        fail("%s is not a %s state dict: %s" % (path, name, "; ".join(
            ([("missing " + ", ".join(missing))] if missing else [])
            + ([("unexpected " + ", ".join(unexpected))] if unexpected else []))))
    for key, tensor in state.items():
        if tensor.shape != want[key].shape or not tensor.is_floating_point():
            fail("%s: %s is %s %s where %s [%d -> %d] takes float %s" % (
                path, key, str(tensor.dtype).replace("torch.", ""), list(tensor.shape), name,
                in_features, out_features, list(want[key].shape)))
    model.load_state_dict(state)  # in float32, whatever the file's float dtype
    return model.eval(), in_features, out_features


def ops_model(name, reference, in_features, out_features):
    """The same model written with fusedlinear's op, as tests/python/pytorch2_path.py writes it."""
    from pytorch2_path import MishMishOps, SwishChainOps

    module = {"swish_chain": SwishChainOps, "mish_mish": MishMishOps}[name]
    module = module(in_features, out_features)
    module.load_state_dict(reference.state_dict())
    return module.eval()


def layered_models(state, spec, path):
    """The layered model `spec` with the file's tensors (as float32), in plain PyTorch op by op
    and as one call of the whole-model op (weights/model_op.py), and its input and output
    widths."""
    import fx_chain
    from model_op import ModelOp, SpecModel

    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    try:
        reference, fused = SpecModel(state, spec).eval(), ModelOp(state, spec).eval()
    except (KeyError, fx_chain.ChainError) as error:
        fail("%s: %s" % (path, error.args[0]))
    in_features = fused.weights[0].shape[1]
    try:
        with torch.no_grad():
            out_features = reference(torch.zeros(1, in_features)).shape[-1]
    except RuntimeError as error:  # tensors of shapes the spec cannot chain
        fail("%s: its tensors do not make the model %s: %s" % (path, spec, first_line(error)))
    return reference, fused, in_features, out_features


def models_of(weights, model=None, name=None):
    """(name, reference, fused, in_features, out_features) of WEIGHTS: the model it carries
    (weights/fx_chain.py's metadata: a layered spec, or one Linear's chain as a layered spec of
    one layer), else the reference model `model` or the one its keys name; `name` (default: the
    reference model's, or WEIGHTS' file name without its extension) the repository's."""
    import fx_chain

    state = read_state_dict(weights)
    carried = None
    if model is None:
        try:
            carried = fx_chain.read_chain(weights)
        except fx_chain.ChainError as error:  # no chain, or a torch.save format without one
            if "carries a chain of version" in str(error):
                fail(str(error))
    if carried is None:
        if model is None:
            if "add_value" not in state:
                fail("%s carries no model spec (weights/fx_chain.py's save_with_chain writes "
                     "one) and has no key that names a reference model (swish_chain's "
                     "add_value): pass --model" % weights)
            model = "swish_chain"
        reference, in_features, out_features = reference_model(model, state, weights)
        fused = ops_model(model, reference, in_features, out_features)
        name = name or model
    else:
        spec = carried["chain"]
        if not fx_chain.is_layered_spec(spec):
            spec = "%s:%s" % (carried["linear"], spec)
        reference, fused, in_features, out_features = layered_models(state, spec, weights)
        name = name or os.path.splitext(os.path.basename(weights))[0]
    if not REPOSITORY_NAME.match(name):
        fail("%r is no model name for the repository (letters, digits, '_', '.' and '-', a "
             "letter or digit first): pass --name" % name)
    return name, reference, fused, in_features, out_features


def write_torchscript(module, path):
    """torch.jit.script of the ops module, saved with its parameters on the CPU (the server
    moves them to the instance's device as it loads)."""
    torch.jit.save(torch.jit.script(module), path)


def write_aoti_package(module, x, path):
    """torch.export of the ops module for x's shape and device, packaged by AOTInductor."""
    import torch._inductor
    import torch.export

    with torch.no_grad():
        exported = torch.export.export(module, (x,))
        torch._inductor.aoti_compile_and_package(exported, package_path=path)


def config_text(name, platform, comment, max_batch_size, input_dims, output_dims, device):
    dims = lambda values: ", ".join(str(v) for v in values)  # noqa: E731
    return """# {name}: {comment}
# The server must have fusedlinear's ops before it loads the model: start it with
# LD_PRELOAD=/path/to/libfusedlinear_ops.so (examples/serving/README.md).
backend: "pytorch"
platform: "{platform}"
max_batch_size: {max_batch_size}
input [
  {{
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ {input_dims} ]
  }}
]
output [
  {{
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ {output_dims} ]
  }}
]
instance_group [
  {{
    count: 1
    kind: {kind}
  }}
]
""".format(name=name, comment=comment, platform=platform, max_batch_size=max_batch_size,
           input_dims=dims(input_dims), output_dims=dims(output_dims),
           kind="KIND_GPU" if device.type == "cuda" else "KIND_CPU")


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def build_repository(staging, name, reference, fused, in_features, out_features, rows, device):
    """Writes the repository of `fused` (`reference` in plain PyTorch) as `name` into `staging`
    and checks its artifacts in this process."""
    torch.manual_seed(0)
    x = torch.rand(rows, in_features)
    with torch.no_grad():
        want = reference.to(device)(x.to(device)).cpu()

    script_dir = os.path.join(staging, name + "_torchscript")
    os.makedirs(os.path.join(script_dir, "1"))
    script_path = os.path.join(script_dir, "1", "model.pt")
    write_torchscript(fused, script_path)
    write_text(os.path.join(script_dir, "config.pbtxt"), config_text(
        name + "_torchscript", "pytorch_libtorch",
        "%s written with fusedlinear's op, as TorchScript (the legacy path).\n"
        "# max_batch_size %d: requests of 1 to %d rows, which the server may batch." % (
            name, rows, rows), rows, [in_features], [out_features], device))

    aoti_dir = os.path.join(staging, name + "_aoti")
    os.makedirs(os.path.join(aoti_dir, "1"))
    aoti_path = os.path.join(aoti_dir, "1", "model.pt2")
    write_aoti_package(fused.to(device), x.to(device), aoti_path)
    write_text(os.path.join(aoti_dir, "config.pbtxt"), config_text(
        name + "_aoti", "torch_aoti",
        "%s written with fusedlinear's op, as an AOTInductor package.\n"
        "# max_batch_size 0: the package takes [%d, %d] exactly; torch_aoti does not batch yet."
        % (name, rows, in_features), 0, [rows, in_features], [rows, out_features], device))

    torch.save(x, os.path.join(staging, name + "_input.pt"))
    torch.save(want, os.path.join(staging, name + "_want.pt"))

    # The TorchScript module loaded back before anything is published. The package is run from
    # C++ only (fusedlinear_check_serving, with the server's loader): torch 2.11's Python crashed
    # loading an AOTInductor package back (torch._inductor.aoti_load_package).
    with torch.no_grad():
        script = torch.jit.load(script_path, map_location=device)
        results = [("model.pt", script(x.to(device)))]
    for what, got in results:
        got = got.detach().cpu()
        if got.shape != want.shape:
            fail("%s gave %s where PyTorch gives %s; nothing written" % (
                what, list(got.shape), list(want.shape)))
        difference = (got.double() - want.double()).abs().max().item()
        print("%s on %s: max abs difference from PyTorch %.3g" % (what, device, difference))
        if not difference <= PUBLISH_TOLERANCE:
            fail("%s is not within %g of PyTorch; nothing written" % (what, PUBLISH_TOLERANCE))


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Writes OUT_DIR/<model>_aoti (platform torch_aoti), OUT_DIR/<model>_torchscript "
               "(pytorch_libtorch, legacy) and a sample input with PyTorch's output. "
               "Needs torch %d.%d or later." % NEEDS_TORCH)
    parser.add_argument("weights", metavar="WEIGHTS",
                        help="a state dict saved from Python: weights/export.py's, or a layered "
                             "model's from weights/fx_chain.py's save_with_chain")
    parser.add_argument("out", metavar="OUT_DIR", help="the model repository to write")
    parser.add_argument("--ops", metavar="LIBRARY", required=True,
                        help="the ops library, libfusedlinear_ops.so")
    parser.add_argument("--model", choices=MODEL_NAMES,
                        help="the reference model WEIGHTS holds (default: the model WEIGHTS "
                             "carries, else from its keys, where they name it: swish_chain's "
                             "add_value)")
    parser.add_argument("--name",
                        help="the model's name in the repository (default: the reference "
                             "model's, or WEIGHTS' file name without its extension)")
    parser.add_argument("--rows", type=int, default=8,
                        help="rows of a request: the AOTInductor package's exact input rows, the "
                             "TorchScript model's max_batch_size (default 8)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the models run: KIND_GPU or KIND_CPU (default cuda)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a repository this script built at OUT_DIR")
    args = parser.parse_args()
    if not 1 <= args.rows <= 2 ** 31 - 1:
        parser.error("--rows must be 1 to 2147483647")
    return args


def main():
    args = parse_args()
    if torch is None:
        fail("%s has no torch; run this with the python3 of torch %d.%d or later"
             % (sys.executable, *NEEDS_TORCH))
    version = tuple(int(v) for v in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    if version < NEEDS_TORCH:
        fail("torch %s: torch.export and AOTInductor packages need torch %d.%d or later"
             % (torch.__version__, *NEEDS_TORCH))
    for path, what in ((args.weights, "WEIGHTS"), (args.ops, "--ops")):
        if not os.path.isfile(path):
            fail("%s %s: %s" % (what, path, "not a file" if os.path.exists(path) else
                                "no such file"))
    name, reference, fused, in_features, out_features = models_of(args.weights, args.model,
                                                                  args.name)
    out = os.path.abspath(args.out)
    check_out_dir(out, args.overwrite, name)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch %s sees no CUDA device; pass --device cpu"
             % torch.__version__)
    try:
        torch.ops.load_library(args.ops)
        getattr(torch.ops.fusedlinear, "model")
    except (OSError, RuntimeError, AttributeError) as error:
        fail("cannot load the ops from %s: %s" % (args.ops, first_line(error)))

    # SIGTERM and SIGHUP end the run through the same clean-up as an error or Ctrl-C.
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda signum, frame: sys.exit(128 + signum))
    parent, staging = os.path.dirname(out), None
    try:
        try:
            os.makedirs(parent, exist_ok=True)
            staging = tempfile.mkdtemp(prefix="." + os.path.basename(out) + ".tmp-", dir=parent)
        except OSError as error:
            fail("cannot make a folder in %s: %s" % (parent, error.strerror))
        build_repository(staging, name, reference, fused, in_features, out_features, args.rows,
                         device)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(staging, 0o777 & ~mask)  # mkdtemp's folder is the owner's alone
        publish(staging, out, args.overwrite, name)
    except KeyboardInterrupt:
        print("build_repository.py: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    print("wrote %s: %s_aoti (model.pt2, torch_aoti, [%d, %d] -> [%d, %d]), %s_torchscript "
          "(model.pt, pytorch_libtorch, up to %d rows), %s_input.pt, %s_want.pt; instances on %s"
          % (out, name, args.rows, in_features, args.rows, out_features, name, args.rows, name,
             name, device.type))


if __name__ == "__main__":
    main()
