// fusedlinear: the program (app/cli_main.h). A project that registers models of its own calls
// fusedlinear::app_main from its main the same way, and gets the same commands for them.
#include "app/cli_main.h"

int main(int argc, char** argv) { return fusedlinear::app_main(argc, argv); }
