# The objects built with AVX2 or AVX-512 flags (kernels/cpu/epilogue_avx*.cpp) must define
# no external symbol but their epilogue_span. Anything else they defined, an inline function of
# a header above all, would be a weak symbol of which the linker keeps one copy for every
# caller: if it kept this one, code built for AVX-512 would run on CPUs without it.
#   cmake -DNM=nm "-DOBJECTS=a.o|b.o|..." -P check_isa_objects.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(checked 0)
foreach(object IN LISTS objects)
  if(NOT object MATCHES "epilogue_avx")
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
    if(NOT line MATCHES "epilogue_span")
      message(SEND_ERROR "${object} defines ${line}")
    endif()
  endforeach()
  math(EXPR checked "${checked} + 1")
endforeach()
if(NOT checked EQUAL 2)
  message(FATAL_ERROR "expected the AVX2 and AVX-512 objects among ${OBJECTS}")
endif()
message(STATUS "${checked} objects define only epilogue_span")
