# The objects built with AVX2 or AVX-512 flags (the avx2.cpp and avx512.cpp that
# kernels/register/fusedlinear_models.cmake writes for each registration, and the small-batch
# products' small_batch_avx2.cpp and small_batch_avx512.cpp) must define no external symbol but
# their entry point (chain_span_at, small_batch_rows). Anything else they defined, an inline
# function of a header above all, would be a weak symbol of which the linker keeps one copy for
# every caller: if it kept this one, code built for AVX-512 would run on CPUs without it.
#   cmake -DNM=nm "-DOBJECTS=a.o|b.o|..." -P check_isa_objects.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(checked 0)
foreach(object IN LISTS objects)
  if(NOT object MATCHES "(fusedlinear_models/.*/|small_batch_)avx(2|512)\\.cpp\\.o$")
    continue()
  endif()
  execute_process(COMMAND ${NM} --defined-only --extern-only ${object}
                  OUTPUT_VARIABLE symbols RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${object}")
  endif()
  string(REGEX REPLACE "\n$" "" symbols "${symbols}")
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "chain_span_at|small_batch_rows")
      message(SEND_ERROR "${object} defines ${line}")
    endif()
  endforeach()
  math(EXPR checked "${checked} + 1")
endforeach()
if(checked LESS 6)
  message(FATAL_ERROR "expected the AVX2 and AVX-512 objects of the library's two registrations "
                      "and of the small-batch products among ${OBJECTS}")
endif()
message(STATUS "${checked} objects define only their entry point")
