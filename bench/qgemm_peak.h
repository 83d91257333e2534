/*
 * qgemm_peak.h - bench_qgemm's peak probes (qgemm_peak.c): the machine as
 * CPUID describes it, and the register-only FMA (f32) or vpdpbusd (int8)
 * rate over 8, 12, 16 and 24 accumulator chains, printed as one JSON
 * object. Threads: slim_num_threads().
 */
#ifndef SLIM_BENCH_QGEMM_PEAK_H
#define SLIM_BENCH_QGEMM_PEAK_H

#include <stdbool.h>

int slim_bench_peak(bool f32);

#endif
