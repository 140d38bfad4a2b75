# fusedlinear_add_models compiles a project's models (every path of each) in that project, with
# its flags: built without optimisation (no CMAKE_BUILD_TYPE, or Debug) the fused CPU loops run
# several times slower than eager. A project that uses fusedlinear (find_package or
# add_subdirectory) is told so once, at configure time; multi-config generators choose at build
# time and are not.
function(fusedlinear_check_build_type)
  if(CMAKE_CONFIGURATION_TYPES)
    return()
  endif()
  if(CMAKE_BUILD_TYPE AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    return()
  endif()
  get_property(_warned GLOBAL PROPERTY FUSEDLINEAR_BUILD_TYPE_WARNED)
  if(_warned)
    return()
  endif()
  set_property(GLOBAL PROPERTY FUSEDLINEAR_BUILD_TYPE_WARNED TRUE)
  if(CMAKE_BUILD_TYPE)
    set(_type "CMAKE_BUILD_TYPE is Debug")
  else()
    set(_type "no CMAKE_BUILD_TYPE is set")
  endif()
  message(WARNING "fusedlinear: ${_type}: the models fusedlinear_add_models compiles in this "
                  "project are built without optimisation and run several times slower than "
                  "with it; configure with -DCMAKE_BUILD_TYPE=Release (or RelWithDebInfo)")
endfunction()
