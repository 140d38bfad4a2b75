"""Builds the fusedlinear package: its Python sources (weights/fusedlinear/) and the ops library,
built by the project's own CMake (the target fusedlinear_ops) against the torch of the Python
that runs the build, then copied into the package beside a record of that torch's version.

    pip install --no-build-isolation --no-deps .

Environment:
    FUSEDLINEAR_CMAKE_BUILD_DIR   an already configured CMake build of this checkout (the
                                  project at its top, against this Python's torch): its
                                  fusedlinear_ops is built there (up to date: nothing to do)
                                  instead of in a build folder of its own
    FUSEDLINEAR_CMAKE_ARGS        more arguments for CMake's configure step (e.g.
                                  -DCMAKE_CUDA_ARCHITECTURES=90a-real)
    CMAKE_BUILD_PARALLEL_LEVEL    the build's jobs (default: the machine's cores)
"""
import os
import re
import shlex

from setuptools import Extension, setup
from setuptools.command.build import build
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libfusedlinear_ops.so"


def project_version():
    """The version CMakeLists.txt declares, so that the package and the library agree."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as file:
        return re.search(r"project\(fusedlinear VERSION ([0-9.]+)", file.read()).group(1)


class BuildInItsOwnFolder(build):
    """setuptools' build folder is build-python/, not build/, where the project's CMake builds
    by convention."""

    def initialize_options(self):
        super().initialize_options()
        self.build_base = "build-python"


class BuildOpsWithCMake(build_ext):
    """The one extension, the ops library, built by CMake's target fusedlinear_ops."""

    def get_ext_filename(self, name):
        return os.path.join(*name.split(".")[:-1], LIBRARY)

    def build_extension(self, ext):
        import torch  # the torch of this Python: the one the package will run with

        build_dir = os.environ.get("FUSEDLINEAR_CMAKE_BUILD_DIR")
        if not build_dir:
            build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
            self.configure(build_dir, torch)
        self.spawn(["cmake", "--build", build_dir, "--target", "fusedlinear_ops", "--parallel",
                    os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))])
        built = os.path.join(build_dir, LIBRARY)
        if not os.path.isfile(built):
            raise RuntimeError("fusedlinear: the CMake build in %s made no %s"
                               % (build_dir, LIBRARY))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.copy_file(built, target)
        self.write_build_info(os.path.join(os.path.dirname(target), "_build_info.py"), torch)

    def configure(self, build_dir, torch):
        # torch's own CMake files first, so that CMake takes the torch this Python imports.
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                "-DCMAKE_PREFIX_PATH=" + torch.utils.cmake_prefix_path,
                "-DFUSEDLINEAR_BUILD_CLI=OFF", "-DFUSEDLINEAR_BUILD_TESTS=OFF",
                "-DFUSEDLINEAR_BUILD_OPS_LIBRARY=ON", "-DFUSEDLINEAR_INSTALL=OFF"]
        self.spawn(args + shlex.split(os.environ.get("FUSEDLINEAR_CMAKE_ARGS", "")))

    @staticmethod
    def write_build_info(path, torch):
        with open(path, "w") as file:
            file.write('"""Written when the package was built: what its ops library was built '
                       'against."""\n')
            file.write("VERSION = %r\n" % project_version())
            file.write("TORCH_VERSION = %r\n" % torch.__version__)
            file.write("TORCH_CUDA = %r\n" % torch.version.cuda)


setup(
    version=project_version(),
    # The Python side of the project lives in weights/ (docs/DESIGN.md).
    packages=["fusedlinear"],
    package_dir={"fusedlinear": "weights/fusedlinear"},
    ext_modules=[Extension("fusedlinear.libfusedlinear_ops", sources=[])],
    cmdclass={"build": BuildInItsOwnFolder, "build_ext": BuildOpsWithCMake},
)
