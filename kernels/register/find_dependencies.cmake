# What fusedlinear needs found, the same way in its own build and in a project that uses the
# installed package (fusedlinearConfig.cmake), so that the package names no path of the machine
# it was built on. Macros: what they find is set in the caller's scope.

# libtorch, found without paths from the user: a system install (Debian's libtorch-dev) is on the
# default search path; otherwise python3 says where its torch package keeps TorchConfig.cmake.
macro(fusedlinear_find_torch)
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    find_program(FUSEDLINEAR_PYTHON NAMES python3 python)
    if(FUSEDLINEAR_PYTHON)
      execute_process(
        COMMAND ${FUSEDLINEAR_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _fusedlinear_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_fusedlinear_torch_prefix)
        list(APPEND CMAKE_PREFIX_PATH "${_fusedlinear_torch_prefix}")
      endif()
    endif()
    find_package(Torch REQUIRED)
  endif()
endmacro()

# Sleef, whose log1p the CPU loops' SIMD vectors call: sleef.h comes with the PyTorch wheel
# (torch/include) or, for Debian's libtorch, with libsleef-dev, whose functions are in
# libsleef.so.3 (the wheel's libtorch_cpu.so exports them itself). Sets FUSEDLINEAR_SLEEF_INCLUDE
# and FUSEDLINEAR_SLEEF_LIBRARY (NOTFOUND where there is none).
macro(fusedlinear_find_sleef)
  find_path(FUSEDLINEAR_SLEEF_INCLUDE sleef.h HINTS ${TORCH_INCLUDE_DIRS})
  find_library(FUSEDLINEAR_SLEEF_LIBRARY NAMES sleef libsleef.so.3)
endmacro()
