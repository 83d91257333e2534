/*
 * pool_blocked.h - MaxPoolBlocked (pool_blocked.c): its test hook.
 *
 *     bool simd = slim__mpb_force_portable(true);   // the portable loop only
 *     ...run...
 *     slim__mpb_force_portable(false);              // back to CPUID's choice
 *
 * The kernel picks an AVX-512 loop where the CPU has AVX-512F; tests run
 * both and compare their bits.
 */
#ifndef SLIM_POOL_BLOCKED_H
#define SLIM_POOL_BLOCKED_H

#include "kernel.h"

/* Runs MaxPoolBlocked on its portable loop (on) or lets CPUID choose
 * (off); returns whether this CPU has the SIMD loop at all. */
bool slim__mpb_force_portable(bool on);

#endif
