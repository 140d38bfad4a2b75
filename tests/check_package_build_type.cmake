# The installed package warns, once, a project configured without optimisation, and says
# nothing to a Release one. Run as: cmake -DBUILD=<fusedlinear's build tree> -DWORK=<folder>
# -DPREFIX_PATH=<libtorch's prefix, or ""> -P check_package_build_type.cmake
# PREFIX_PATH's entries are separated by '|' (one argument on the test's command line).
string(REPLACE "|" ";" PREFIX_PATH "${PREFIX_PATH}")
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${WORK}/install"
                OUTPUT_QUIET RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "cmake --install ${BUILD} failed")
endif()
set(_warning "fusedlinear: no CMAKE_BUILD_TYPE is set: the models fusedlinear_add_models")
foreach(type "" Debug Release)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/package_consumer"
            -B "${WORK}/consumer-${type}" "-DCMAKE_BUILD_TYPE=${type}"
            "-DCMAKE_PREFIX_PATH=${WORK}/install;${PREFIX_PATH}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR "configuring the consumer (build type '${type}') failed:\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "fusedlinear: [^:]*: the models fusedlinear_add_models" warnings "${err}")
  list(LENGTH warnings count)
  if(type STREQUAL "Release")
    if(NOT count EQUAL 0)
      message(FATAL_ERROR "a Release consumer was warned:\n${err}")
    endif()
  elseif(NOT count EQUAL 1)
    message(FATAL_ERROR "build type '${type}': ${count} warnings, expected one:\n${err}")
  endif()
  if(type STREQUAL "" AND NOT err MATCHES "${_warning}")
    message(FATAL_ERROR "no build type: the warning does not say so:\n${err}")
  endif()
endforeach()
message(STATUS "the package warns unoptimised consumers once, and Release ones not")
