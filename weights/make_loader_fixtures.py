#!/usr/bin/env python3
"""Writes the state-dict loader's test fixtures: every file form people save from PyTorch.

    python3 weights/make_loader_fixtures.py [--out DIR]

DIR (default weights/fixtures/loader/torch<major>.<minor>) receives small files of every form
the loader reads or refuses (docs/LOADING.md), and manifest.json describing each: how to read
it, and either the tensors expected (name, dtype, shape, and the little-endian bytes in hex,
taken from what torch.load returns for the file) or a piece of the expected error message.
The manifest is read by tests/test_torch_file.cpp independently of the loader.

Runs with torch 1.13 and 2.x; deterministic (fixed seed). The safetensors files are written
by hand, so no safetensors package is needed; if it is installed, one more file is written
with it.
"""

import argparse
import collections
import io
import json
import os
import pickle
import struct
import zipfile

import torch
import torch.nn as nn

SAFETENSORS_DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
DTYPE_NAMES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}


class TinyNet(nn.Module):
    """Parameters and buffers of several kinds: float weights, a float buffer, an int64 counter."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.register_buffer("add_value", torch.randn(3))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        return self.linear(x) + self.add_value


# Same-size integer views and struct codes: exact bytes (NaN payloads too) without numpy.
BYTE_VIEWS = {
    torch.float32: (torch.int32, "i"), torch.float64: (torch.int64, "q"),
    torch.float16: (torch.int16, "h"), torch.bfloat16: (torch.int16, "h"),
    torch.int64: (torch.int64, "q"), torch.int32: (torch.int32, "i"),
    torch.int16: (torch.int16, "h"), torch.int8: (torch.int8, "b"),
    torch.uint8: (torch.uint8, "B"), torch.bool: (torch.uint8, "B"),
}


def tensor_bytes(t):
    """The tensor's elements as contiguous little-endian bytes."""
    t = t.detach().cpu().contiguous()
    view, code = BYTE_VIEWS[t.dtype]
    values = (t.to(view) if t.dtype == torch.bool else t.view(view)).flatten().tolist()
    return struct.pack("<%d%s" % (len(values), code), *values)


def describe(name, t):
    return {"name": name, "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
            "hex": tensor_bytes(t).hex()}


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and tensor_bytes(a) == tensor_bytes(b)


def write_safetensors(path, tensors, metadata=None):
    """The safetensors layout: u64 header length, JSON header (padded to 8), raw data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = tensor_bytes(t)
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rezip(src, dst, compression=zipfile.ZIP_STORED, replace=None):
    """Copies a torch.save archive with Python's zipfile, optionally compressed, with the records
    named in `replace` (by their name inside the archive folder) replaced or added."""
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        names = zin.namelist()
        prefix = names[0].split("/")[0] + "/"
        def write(name, data):  # a fixed date, so the output is the same on every run
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compression
            zout.writestr(info, data)
        replaced = {prefix + suffix: data for suffix, data in replace.items()}
        for name in names:
            write(name, replaced.pop(name) if name in replaced else zin.read(name))
        for name, data in replaced.items():  # records the archive lacked (torch 1.13 has no
            write(name, data)                # byteorder record)


class CudaLocation:
    """Makes torch.save record every storage as saved on "cuda:0", as it does for GPU tensors,
    on a machine without one (torch.load(..., map_location="cpu") reads the result)."""

    def __enter__(self):
        self.entry = (0, lambda obj: "cuda:0", lambda obj, location: None)
        torch.serialization._package_registry.insert(0, self.entry)

    def __exit__(self, *exc):
        torch.serialization._package_registry.remove(self.entry)


def main():
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "fixtures", "loader", "torch" + version))
    args = parser.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)

    torch.manual_seed(0)
    model = TinyNet()
    with torch.no_grad():
        model.steps.fill_(7)
    sd = model.state_dict()
    other = TinyNet().state_dict()  # a second state dict (an EMA copy, say)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()  # gives the optimizer state tensors (exp_avg, ...)
    model.zero_grad()
    sd = model.state_dict()

    cases = []
    tensor_sets = {}  # expected tensors, each distinct list stored once in the manifest

    def tensor_set(entries):
        for name, existing in tensor_sets.items():
            if existing == entries:
                return name
        name = "set%d" % len(tensor_sets)
        tensor_sets[name] = entries
        return name

    def path_of(name):
        return os.path.join(out, name)

    def loads(name, python, expected, read="state_dict", weights_key="", notices=(),
              loaded=None, metadata=None):
        """A file the loader must read to `expected` (name -> tensor), checked against what
        torch.load returns for it (`loaded` selects that from torch.load's result), with the
        `metadata` (key -> text) the loader reports for fusedlinear, if any."""
        result = torch.load(path_of(name), map_location="cpu", **LOAD_KWARGS)
        if loaded is not None:
            result = loaded(result)
        if read == "tensor":
            assert same(result, expected[""]), name
            entries = [describe("", result)]
        else:
            assert list(result.keys()) == list(expected.keys()), (name, list(result.keys()))
            for key in expected:
                assert same(result[key], expected[key]), (name, key)
            entries = [describe(k, v) for k, v in result.items()]
        cases.append({"file": name, "python": python, "read": read, "weights_key": weights_key,
                      "expect": tensor_set(entries), "notices": list(notices)})
        if metadata is not None:
            cases[-1]["metadata"] = metadata

    def safetensors_case(name, python, expected, notices=(), metadata=None):
        """A safetensors file: the loader returns its tensors sorted by name, as
        safetensors.torch.load_file does (checked against it where it is installed)."""
        try:
            import safetensors.torch
            result = safetensors.torch.load_file(path_of(name))
            if notices:  # the module. prefix, which the loader strips
                result = {k[len("module."):]: v for k, v in result.items()}
            assert sorted(result.keys()) == list(expected.keys()), name
            for key in expected:
                assert same(result[key], expected[key]), (name, key)
        except ImportError:
            pass
        cases.append({"file": name, "python": python, "read": "state_dict", "weights_key": "",
                      "expect": tensor_set([describe(k, v) for k, v in expected.items()]),
                      "notices": list(notices)})
        if metadata is not None:
            cases[-1]["metadata"] = metadata

    def refuses(name, python, error, read="state_dict", weights_key=""):
        cases.append({"file": name, "python": python, "read": read, "weights_key": weights_key,
                      "error": error})

    # --- state dicts
    torch.save(sd, path_of("state_dict.pt"))
    loads("state_dict.pt", "torch.save(model.state_dict(), path)", sd)
    torch.save(dict(sd), path_of("plain_dict.pt"))
    loads("plain_dict.pt", "torch.save(dict(model.state_dict()), path)", sd)
    torch.save(sd, path_of("protocol4.pt"), pickle_protocol=4)
    loads("protocol4.pt", "torch.save(model.state_dict(), path, pickle_protocol=4)", sd)
    params = dict(model.named_parameters())
    torch.save(params, path_of("parameters.pt"))
    loads("parameters.pt", "torch.save(dict(model.named_parameters()), path)",
          {k: v.detach() for k, v in params.items()})

    # --- training checkpoints
    ckpt = {"epoch": 3, "state_dict": sd, "optimizer": optimizer.state_dict(), "loss": 0.125,
            "config": {"lr": 0.01, "name": "tiny", "layers": [4, 3]}, "note": None,
            "flags": (True, False), "seed": 2**64 - 1, "step": -(2**40), "blob": b"\x00\x01"}
    torch.save(ckpt, path_of("checkpoint_state_dict.pt"))
    loads("checkpoint_state_dict.pt",
          "torch.save({'epoch': e, 'state_dict': model.state_dict(), "
          "'optimizer': opt.state_dict(), ...}, path)",
          sd, notices=["'state_dict'"], loaded=lambda r: r["state_dict"])
    torch.save({"epoch": 7, "model_state_dict": sd, "optimizer_state_dict": {"state": {}}},
               path_of("checkpoint_model_state_dict.pt"))
    loads("checkpoint_model_state_dict.pt",
          "torch.save({'epoch': e, 'model_state_dict': model.state_dict(), "
          "'optimizer_state_dict': ...}, path)",
          sd, notices=["'model_state_dict'"], loaded=lambda r: r["model_state_dict"])
    # Classes outside the allow-list (argparse.Namespace here) are never called; the loader
    # still finds the state dict beside them.
    torch.save({"model": sd, "args": argparse.Namespace(lr=0.1, depth=2), "history": [0.5, 0.25]},
               path_of("checkpoint_model.pt"))
    loads("checkpoint_model.pt", "torch.save({'model': model.state_dict(), 'args': args}, path)",
          sd, notices=["'model'"], loaded=lambda r: r["model"])
    torch.save({"generator": sd, "step": 5}, path_of("checkpoint_other_key.pt"))
    loads("checkpoint_other_key.pt", "torch.save({'generator': model.state_dict(), 'step': s}, "
          "path)", sd, notices=["'generator'"], loaded=lambda r: r["generator"])
    torch.save({"model": sd, "state_dict": other}, path_of("checkpoint_two.pt"))
    refuses("checkpoint_two.pt", "torch.save({'model': sd, 'state_dict': ema_sd}, path)",
            "several state dicts")
    loads("checkpoint_two.pt", "(the same, with --weights-key model)", sd, weights_key="model",
          notices=["'model'"], loaded=lambda r: r["model"])
    loads("checkpoint_two.pt", "(the same, with --weights-key state_dict)", other,
          weights_key="state_dict", notices=["'state_dict'"], loaded=lambda r: r["state_dict"])
    refuses("checkpoint_two.pt", "(the same, with --weights-key ema)", "no key 'ema'",
            weights_key="ema")
    refuses("checkpoint_two.pt", "(the same, with --weights-key model.x)", "no key 'model.x'",
            weights_key="model.x")
    refuses("checkpoint_state_dict.pt", "(with --weights-key epoch)", "not a mapping",
            weights_key="epoch")
    torch.save({"epoch": 1, "lr": 0.1}, path_of("checkpoint_without_weights.pt"))
    refuses("checkpoint_without_weights.pt", "torch.save({'epoch': 1, 'lr': 0.1}, path)",
            "no state dict")
    torch.save({"model": model, "epoch": 1}, path_of("checkpoint_whole_module.pt"))
    refuses("checkpoint_whole_module.pt", "torch.save({'model': model, 'epoch': e}, path)",
            "'model' holds a pickled object of class __main__.TinyNet")
    torch.save({"weight": sd["linear.weight"], "step": 3}, path_of("mixed_values.pt"))
    refuses("mixed_values.pt", "torch.save({'weight': w, 'step': 3}, path)",
            "entry 'step' is an int, not a tensor")

    # --- DataParallel / DistributedDataParallel: both hold the model as .module
    wrapper = nn.Module()
    wrapper.module = model
    torch.save(wrapper.state_dict(), path_of("data_parallel.pt"))
    loads("data_parallel.pt", "torch.save(nn.DataParallel(model).state_dict(), path)", sd,
          notices=["'module.'"],
          loaded=lambda r: collections.OrderedDict((k[len("module."):], v) for k, v in r.items()))

    # --- views of shared storages, GPU locations, dtypes
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    shared = collections.OrderedDict([
        ("tied.a", sd["linear.weight"]), ("tied.b", sd["linear.weight"]),
        ("rows", base[1:3]), ("column", base[:, 2]), ("transposed", base.t()),
        ("element", base[3, 5]), ("strided", base[::2, 1::3]),
        ("expanded", torch.randn(3)[None].expand(4, 3)), ("empty", base[2:2]),
    ])
    torch.save(shared, path_of("shared_storage.pt"))
    loads("shared_storage.pt", "torch.save({'a': w, 'b': w, 'rows': base[1:3], "
          "'column': base[:, 2], ...}, path)", shared)
    with CudaLocation():
        torch.save(sd, path_of("cuda_location.pt"))
    loads("cuda_location.pt", "torch.save(model.cuda().state_dict(), path)", sd)
    if torch.cuda.is_available():
        gpu_sd = collections.OrderedDict((k, v.cuda()) for k, v in sd.items())
        torch.save(gpu_sd, path_of("cuda_tensors.pt"))
        loads("cuda_tensors.pt", "torch.save(model.cuda().state_dict(), path) (on a GPU)", sd)

    special = torch.tensor([0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"),
                            1e-40, 3.0e38])
    dtypes = collections.OrderedDict([
        ("float32", special.clone()),
        ("float16", torch.tensor([0.0, -0.0, 1.5, 65504.0, 6e-8, float("inf"), float("nan")],
                                 dtype=torch.float16)),
        ("bfloat16", torch.tensor([0.0, -1.5, 3.0e38, 1e-40, float("-inf")],
                                  dtype=torch.bfloat16)),
        ("float64", torch.tensor([0.1, -1e308, 5e-324, float("nan")], dtype=torch.float64)),
        ("int64", torch.tensor([0, -1, 2**62, -(2**63)], dtype=torch.int64)),
        ("int32", torch.tensor([0, -1, 2**31 - 1], dtype=torch.int32)),
        ("int16", torch.tensor([-32768, 32767], dtype=torch.int16)),
        ("int8", torch.tensor([-128, 127, 0], dtype=torch.int8)),
        ("uint8", torch.tensor([0, 255, 7], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("matrix_f16", torch.randn(2, 3).half()),
        ("scalar_bf16", torch.tensor(2.5, dtype=torch.bfloat16)),
    ])
    torch.save(dtypes, path_of("dtypes.pt"))
    loads("dtypes.pt", "torch.save({'w16': w.half(), 'wbf': w.bfloat16(), 'n': n_int64, ...}, "
          "path)", dtypes)

    # --- single tensors (read_tensor)
    t = torch.randn(2, 3)
    torch.save(t, path_of("tensor.pt"))
    loads("tensor.pt", "torch.save(tensor, path)", {"": t}, read="tensor")
    view = base[:, 1:4].t()
    torch.save(view, path_of("tensor_view.pt"))
    loads("tensor_view.pt", "torch.save(base[:, 1:4].t(), path)", {"": view}, read="tensor")
    torch.save(dtypes["bfloat16"], path_of("tensor_bf16.pt"))
    loads("tensor_bf16.pt", "torch.save(tensor.bfloat16(), path)", {"": dtypes["bfloat16"]},
          read="tensor")
    refuses("state_dict.pt", "(read as a single tensor)", "not a single tensor", read="tensor")
    refuses("tensor.pt", "(read as a state dict)", "holds a single tensor")

    # --- safetensors, written by hand (and with the package when it is installed)
    flat = collections.OrderedDict(sorted(sd.items()))
    write_safetensors(path_of("state_dict.safetensors"), sd, {"format": "pt"})
    safetensors_case("state_dict.safetensors", "safetensors.torch.save_file(model.state_dict(), "
                     "path)", flat)
    st_dtypes = collections.OrderedDict(sorted(dtypes.items()))
    write_safetensors(path_of("dtypes.safetensors"), dtypes)
    safetensors_case("dtypes.safetensors", "safetensors.torch.save_file(tensors, path)",
                     st_dtypes)
    write_safetensors(path_of("data_parallel.safetensors"), wrapper.state_dict())
    safetensors_case("data_parallel.safetensors",
                     "safetensors.torch.save_file(nn.DataParallel(model).state_dict(), path)",
                     flat, notices=["'module.'"])
    with open(path_of("safetensors_no_extension.bin"), "wb") as f, \
            open(path_of("state_dict.safetensors"), "rb") as g:
        f.write(g.read())
    safetensors_case("safetensors_no_extension.bin", "(a .safetensors file under another name)",
                     flat)
    try:
        import safetensors.torch
        safetensors.torch.save_file(dict(sd), path_of("package.safetensors"),
                                    metadata={"format": "pt"})
        safetensors_case("package.safetensors", "safetensors.torch.save_file(model.state_dict(), "
                         "path)", flat)
    except ImportError:
        pass

    # --- text for fusedlinear beside the tensors: _metadata["fusedlinear"] of a state dict (ints
    # read as their decimal text), or a safetensors header's __metadata__ "fusedlinear.<key>"
    ours = {"version": 1, "chain": "gelu(tanh),silu,clamp(-2,2)", "linear": "linear"}
    as_text = {k: str(v) for k, v in ours.items()}
    tagged = model.state_dict()
    tagged._metadata["fusedlinear"] = dict(ours)
    torch.save(tagged, path_of("metadata.pt"))
    again = torch.load(path_of("metadata.pt"), **LOAD_KWARGS)
    assert again._metadata["fusedlinear"] == ours
    TinyNet().load_state_dict(again)  # still a state dict Python loads as before
    loads("metadata.pt", "sd = model.state_dict(); sd._metadata['fusedlinear'] = {'version': 1, "
          "'chain': ..., 'linear': ...}; torch.save(sd, path)", sd, metadata=as_text)
    torch.save({"epoch": 2, "state_dict": tagged}, path_of("checkpoint_metadata.pt"))
    loads("checkpoint_metadata.pt", "torch.save({'epoch': e, 'state_dict': sd}, path) (sd with "
          "_metadata['fusedlinear'])", sd, notices=["'state_dict'"],
          loaded=lambda r: r["state_dict"], metadata=as_text)
    write_safetensors(path_of("metadata.safetensors"), sd,
                      {"format": "pt", "fusedlinear.chain": ours["chain"],
                       "fusedlinear.linear": ours["linear"]})
    safetensors_case("metadata.safetensors", "safetensors.torch.save_file(sd, path, metadata="
                     "{'fusedlinear.chain': ..., 'fusedlinear.linear': 'linear'})", flat,
                     metadata={"chain": ours["chain"], "linear": ours["linear"]})
    bad = model.state_dict()
    bad._metadata["fusedlinear"] = {"chain": ["gelu", "silu"]}
    torch.save(bad, path_of("metadata_not_text.pt"))
    refuses("metadata_not_text.pt", "sd._metadata['fusedlinear'] = {'chain': ['gelu', 'silu']}",
            "_metadata['fusedlinear']['chain'] is a list, expected a string")

    # --- what the loader refuses
    torch.save(sd, path_of("legacy.pt"), _use_new_zipfile_serialization=False)
    refuses("legacy.pt", "torch.save(model.state_dict(), path, "
            "_use_new_zipfile_serialization=False)", "legacy torch.save format")
    torch.save(model, path_of("whole_module.pt"))
    refuses("whole_module.pt", "torch.save(model, path)",
            "pickled object of class __main__.TinyNet (torch.save(model))")
    torch.jit.save(torch.jit.script(nn.Linear(2, 1)), path_of("torchscript.pt"))
    refuses("torchscript.pt", "torch.jit.save(torch.jit.script(model), path)",
            "TorchScript archive")
    torch.save([sd["linear.weight"], sd["linear.bias"]], path_of("list.pt"))
    refuses("list.pt", "torch.save([w, b], path)", "holds a list, not a mapping")
    torch.save(42, path_of("number.pt"))
    refuses("number.pt", "torch.save(42, path)", "holds an int, not a mapping")
    rezip(path_of("state_dict.pt"), path_of("compressed.pt"), zipfile.ZIP_DEFLATED)
    refuses("compressed.pt", "(an archive re-packed with zip compression)", "is compressed")
    rezip(path_of("state_dict.pt"), path_of("big_endian.pt"), replace={"byteorder": b"big"})
    refuses("big_endian.pt", "torch.save(model.state_dict(), path) on a big-endian machine",
            "byte order 'big'")
    rezip(path_of("state_dict.pt"), path_of("python_zipfile.pt"))
    loads("python_zipfile.pt", "(an archive re-packed by Python's zipfile)", sd)
    with open(path_of("plain_pickle.pkl"), "wb") as f:
        pickle.dump({"weight": [1.0, 2.0]}, f, protocol=2)
    refuses("plain_pickle.pkl", "pickle.dump(weights, f)", "a plain pickle file")
    with open(path_of("text.txt"), "wb") as f:
        f.write(b"not weights\n")
    refuses("text.txt", "(any other file)", "not a torch.save archive")
    open(path_of("empty.pt"), "wb").close()
    refuses("empty.pt", "(an empty file)", "not a torch.save archive")
    refuses("does_not_exist.pt", "(a missing file)", "cannot open: No such file or directory")

    with open(path_of("manifest.json"), "w") as f:
        f.write('{"torch_version": %s,\n "cases": [\n  ' % json.dumps(torch.__version__))
        f.write(",\n  ".join(json.dumps(case) for case in cases))
        f.write('],\n "tensor_sets": {\n  ')
        f.write(",\n  ".join("%s: %s" % (json.dumps(k), json.dumps(v))
                             for k, v in tensor_sets.items()))
        f.write("}}\n")
    total = sum(os.path.getsize(path_of(n)) for n in os.listdir(out))
    print(f"wrote {len(cases)} cases, {len(os.listdir(out))} files, {total} bytes to {out}")


LOAD_KWARGS = {}
if "weights_only" in torch.load.__code__.co_varnames:
    LOAD_KWARGS["weights_only"] = False  # the checkpoints hold non-tensor objects

if __name__ == "__main__":
    main()
