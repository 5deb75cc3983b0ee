#include "testutil.h"
int main(int argc, char **argv) { tu_init(argc, argv); return tu_finish("test_golden"); }
