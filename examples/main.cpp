// my_fusedlinear: the fusedlinear program with this project's model registered beside the
// library's (examples/CMakeLists.txt: fusedlinear_add_models). `my_fusedlinear --model my_model`
// runs it eager against fused; `run`, `bench` and every option work as they do for the library's.
#include <fusedlinear/fusedlinear.h>

int main(int argc, char** argv) { return fusedlinear::app_main(argc, argv); }
