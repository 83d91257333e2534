/* kernels/cpu/rnn.c - placeholder table; the ops land in this file. */
#include "kernel.h"

const slim_op_def slim__ops_rnn[] = {
    {0},
};
