/*
 * parallel.h - the kernel thread pool (parallel.c).
 *
 *     slim_parallel_for(rows, 16, fn, &job);  // fn(begin, end, &job) per part
 */
#ifndef SLIM_PARALLEL_H
#define SLIM_PARALLEL_H

#include <stdint.h>

/* Runs fn(begin, end, user) over [0, n) split across the kernel threads.
 * Small n runs inline, and so does everything while another request holds
 * the pool, as one fn(0, n) call. So fn's results must not depend on how
 * [0, n) is cut: a kernel that rounds differently per range (one BLAS call
 * over a merged range, partial sums per range) would make a request's
 * answer depend on what else the server is running. */
void slim_parallel_for(int64_t n, int64_t grain,
                       void (*fn)(int64_t begin, int64_t end, void *user), void *user);
int slim_num_threads(void);
/* Wakes sleeping kernel threads to watch for work for a short while (the
 * pool's spin time): for a caller about to run a model after an idle gap,
 * so its first loop finds them awake. Cheap when they are awake. */
void slim_parallel_prewake(void);

#endif
