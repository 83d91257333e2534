/* kernels/cpu/elementwise.c - placeholder table; the ops land in this file. */
#include "kernel.h"

const slim_op_def slim__ops_elementwise[] = {
    {0},
};
