"""fusedlinear from Python: the ops (torch.ops.fusedlinear.*), the exporter of specs and the fuse
pass.

    import fusedlinear                       # loads the ops the package was built with
    fused = fusedlinear.fuse(model)          # an fx.GraphModule: Linear -> pointwise stretches,
                                             # MLPs, gated and residual blocks as the fused ops
    fusedlinear.refresh(fused)               # W split again (bf16 modes) after weights changed
    fusedlinear.save_with_chain(model, "mlp.pt")   # the state dict with its spec, for the program

Installed with pip (`pip install --no-build-isolation --no-deps .` from a checkout), the package
holds the ops library and the torch version it was built against: importing it with another torch
is an ImportError. In a checkout (weights/ on sys.path) it holds no library: the exporter works
without it, and the ops are loaded by their path
(torch.ops.load_library("build/libfusedlinear_ops.so")) before anything runs them.
"""
try:
    from . import _build_info
except ImportError:  # a checkout: no library was built into it
    _build_info = None
else:
    from . import _library

    _library.load(_build_info)

from .export import (ChainError, canonical_spec, chain_spec, is_layered_spec,  # noqa: E402
                     parse_model_spec, parse_spec, read_chain, save_with_chain, trace_model)
from .fusion import FusionReport, SplitWeight, fuse, refresh  # noqa: E402
from .model_op import ModelOp, SpecModel, op_arguments  # noqa: E402

__version__ = _build_info.VERSION if _build_info is not None else None
__all__ = ["ChainError", "FusionReport", "ModelOp", "SpecModel", "SplitWeight", "canonical_spec",
           "chain_spec", "fuse", "is_layered_spec", "op_arguments", "parse_model_spec",
           "parse_spec", "read_chain", "refresh", "save_with_chain", "trace_model"]
