"""Loading the ops library built into the installed package, after checking that the running
torch is the one it was built against (a C++ library of ops links one torch's ABI)."""
import os

import torch

LIBRARY = "libfusedlinear_ops.so"


def release(version):
    """torch's version without its local part: '2.5.1+cu124' -> '2.5.1'."""
    return str(version).split("+")[0]


def check_torch_version(built, running):
    """ImportError, one line, unless `running` is the torch release the ops were built against."""
    if release(built) != release(running):
        raise ImportError("fusedlinear: its ops were built against torch %s, and this is torch %s; "
                          "reinstall fusedlinear with this torch (pip install --no-build-isolation "
                          "--no-deps .)" % (built, running))


def ops_loaded():
    """Whether the namespace fusedlinear already has its ops (the library loaded by its path, or
    the C++ library linked): a second library must not register it again."""
    try:
        torch.ops.fusedlinear.model
    except (AttributeError, RuntimeError):  # torch 2 says AttributeError, 1.13 RuntimeError
        return False
    return True


def load(build_info):
    """Checks the torch version, then loads the package's ops library unless the ops are there."""
    check_torch_version(build_info.TORCH_VERSION, torch.__version__)
    if not ops_loaded():
        torch.ops.load_library(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            LIBRARY))
