# fusedlinear_add_models(TARGET <target> [CUDA_TARGET <target>] HEADER <header> LIST <type>)
#
# Compiles every path for the model declarations (kernels/math/model.h) that <type> names: a
# tuple of declarations, or one, defined in <header> (which must include
# kernels/math/model.h); for a layered declaration, each layer's chain. Into <target> go the CPU loops (scalar, and AVX2 and AVX-512 where this
# build has them) and a file that registers the models at start-up (the ops' chain registry, the
# model registry, hence the CLI, bench and the tests); into CUDA_TARGET (default: <target>) the
# CUDA epilogue, the small-batch kernels and the Hopper GEMM, a kernel family a file so that they
# compile side by side, where CUDA kernels are built. <target> links fusedlinear::fusedlinear (or
# is part of it).
#
# The library registers its own models so (kernels/math/reference_models.h); a project of its own
# registers its declarations the same way (examples/).
function(fusedlinear_add_models)
  cmake_parse_arguments(ARG "" "TARGET;CUDA_TARGET;HEADER;LIST" "" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_HEADER OR NOT ARG_LIST)
    message(FATAL_ERROR "fusedlinear_add_models: needs TARGET, HEADER and LIST")
  endif()
  # The templates beside this file, wherever it is included from.
  set(_fusedlinear_register_dir ${CMAKE_CURRENT_FUNCTION_LIST_DIR})
  if(NOT ARG_CUDA_TARGET)
    set(ARG_CUDA_TARGET ${ARG_TARGET})
  endif()
  get_filename_component(FUSEDLINEAR_MODELS_HEADER ${ARG_HEADER} ABSOLUTE)
  set(FUSEDLINEAR_MODELS_LIST ${ARG_LIST})
  string(MAKE_C_IDENTIFIER "${ARG_TARGET}_${ARG_LIST}" _name)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/fusedlinear_models/${_name})

  configure_file(${_fusedlinear_register_dir}/register.cpp.in ${_dir}/register.cpp @ONLY)
  target_sources(${ARG_TARGET} PRIVATE ${_dir}/register.cpp)

  if(fusedlinear_CPU_SIMD)
    foreach(FUSEDLINEAR_ISA avx2 avx512)
      configure_file(${_fusedlinear_register_dir}/cpu_isa.cpp.in ${_dir}/${FUSEDLINEAR_ISA}.cpp
                     @ONLY)
      target_sources(${ARG_TARGET} PRIVATE ${_dir}/${FUSEDLINEAR_ISA}.cpp)
      # Built with its instruction set's flags and without a precompiled header, which would
      # share code built without them.
      set_source_files_properties(
        ${_dir}/${FUSEDLINEAR_ISA}.cpp TARGET_DIRECTORY ${ARG_TARGET} PROPERTIES
        COMPILE_OPTIONS "${fusedlinear_${FUSEDLINEAR_ISA}_FLAGS}"
        COMPILE_DEFINITIONS "${fusedlinear_${FUSEDLINEAR_ISA}_DEFINITIONS}"
        INCLUDE_DIRECTORIES "${fusedlinear_SLEEF_INCLUDE}"
        SKIP_PRECOMPILE_HEADERS ON)
    endforeach()
  endif()

  if(fusedlinear_CUDA_KERNELS)
    configure_file(${_fusedlinear_register_dir}/cuda_epilogue.cu.in ${_dir}/epilogue.cu @ONLY)
    target_sources(${ARG_CUDA_TARGET} PRIVATE ${_dir}/epilogue.cu)
    # The epilogue only: results below 1.2e-38 in magnitude flush to zero (PyTorch keeps them as
    # denormals, a difference far below any tolerance), which lets exp, division, tanh and erf
    # compile to fewer instructions where the kernel is bound by instruction issue. Not the
    # small-batch kernels, whose split of x may be subnormal.
    set_source_files_properties(${_dir}/epilogue.cu TARGET_DIRECTORY ${ARG_CUDA_TARGET}
                                PROPERTIES COMPILE_OPTIONS -ftz=true)
    foreach(FUSEDLINEAR_FAMILY kFloat kBf16 kBf16x3 kHalf)
      configure_file(${_fusedlinear_register_dir}/cuda_skinny.cu.in
                     ${_dir}/skinny_${FUSEDLINEAR_FAMILY}.cu @ONLY)
      target_sources(${ARG_CUDA_TARGET} PRIVATE ${_dir}/skinny_${FUSEDLINEAR_FAMILY}.cu)
    endforeach()
    foreach(FUSEDLINEAR_FAMILY kFloat32 kBf16 kHalf)
      configure_file(${_fusedlinear_register_dir}/cuda_hopper.cu.in
                     ${_dir}/hopper_${FUSEDLINEAR_FAMILY}.cu @ONLY)
      target_sources(${ARG_CUDA_TARGET} PRIVATE ${_dir}/hopper_${FUSEDLINEAR_FAMILY}.cu)
    endforeach()
  endif()
endfunction()
