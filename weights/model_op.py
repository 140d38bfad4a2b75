"""The whole-model op's helpers (ModelOp, SpecModel, op_arguments), as the fusedlinear package
has them (weights/fusedlinear/model_op.py), for scripts that put weights/ on sys.path:

    sys.path.insert(0, "weights")
    from model_op import ModelOp, SpecModel

Runs with torch 1.13 and torch 2.x.
"""
import os
import sys

# The package beside this file, ahead of an installed one (as weights/fx_chain.py does).
_WEIGHTS = os.path.dirname(os.path.abspath(__file__))
if _WEIGHTS not in sys.path:
    sys.path.insert(0, _WEIGHTS)

from fusedlinear.model_op import *  # noqa: E402,F401,F403  (the helpers' names, re-exported)
