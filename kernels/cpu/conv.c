/* kernels/cpu/conv.c - placeholder table; the ops land in this file. */
#include "kernel.h"

const slim_op_def slim__ops_conv[] = {
    {0},
};
