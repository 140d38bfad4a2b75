# cmake -DSOURCE_DIR=<tree> -DOUTPUT=<file.cpp> "-DHEADERS=a.h;b.cuh" -P embed_headers.cmake
#
# Writes OUTPUT: kEmbeddedHeaders (embedded_headers.h), the text of each of HEADERS (paths from
# SOURCE_DIR) as a raw string literal, for NVRTC. Written only when it changes, so that an
# unchanged header rebuilds nothing.
set(_delimiter "fl_header")
set(_entries "")
foreach(_header IN LISTS HEADERS)
  file(READ ${SOURCE_DIR}/${_header} _text)
  string(FIND "${_text}" ")${_delimiter}\"" _clash)
  if(NOT _clash EQUAL -1)
    message(FATAL_ERROR "${_header} holds the raw string's delimiter ${_delimiter}")
  endif()
  string(APPEND _entries "    {\"${_header}\", R\"${_delimiter}(${_text})${_delimiter}\"},\n")
endforeach()
list(LENGTH HEADERS _count)
set(_content "// Written by kernels/cuda/jit/embed_headers.cmake: the kernel headers NVRTC compiles.
#include \"kernels/cuda/jit/embedded_headers.h\"

namespace fusedlinear {
namespace cuda {
namespace jit {

const EmbeddedHeader kEmbeddedHeaders[] = {
${_entries}};
const int kEmbeddedHeaderCount = ${_count};

}  // namespace jit
}  // namespace cuda
}  // namespace fusedlinear
")
set(_old "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} _old)
endif()
if(NOT _old STREQUAL _content)
  file(WRITE ${OUTPUT} "${_content}")
endif()
