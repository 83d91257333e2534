/*
 * cancel.h - cooperative cancellation of a run: deadlines, client
 * disconnects, unloads and shutdown.
 *
 * A run is never killed from outside: the thread running it looks at its
 * token between nodes (executor.c) and, inside long kernels and loops,
 * every few milliseconds of work (slim_cancel_poll). Whoever owns the run
 * (the server's worker, `slim run`) makes the token, enters it on the
 * running thread, and may cancel it from any thread.
 *
 *     slim_cancel tok;
 *     slim_cancel_init(&tok, slim_cancel_deadline_after_ms(2000));
 *     slim_cancel *prev = slim_cancel_enter(&tok);
 *     st = slim_model_run(...);        // SLIM_ETIMEDOUT once past 2 s
 *     slim_cancel_enter(prev);
 *
 * The token is thread-local like the memory account (mem_account.h); the
 * kernel thread pool (parallel.c) carries the caller's token to its workers
 * for the length of a job.
 */
#ifndef SLIM_CANCEL_H
#define SLIM_CANCEL_H

#include "slim.h"

#include <stdbool.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SLIM_CANCEL_NONE = 0,
    SLIM_CANCEL_DEADLINE,  /* the request's timeout passed */
    SLIM_CANCEL_CLIENT,    /* the client went away */
    SLIM_CANCEL_UNLOAD,    /* the model is being unloaded */
    SLIM_CANCEL_SHUTDOWN,  /* the server is stopping */
} slim_cancel_reason;

/* CUDA sources include this through kernel.h as C++, where C11 atomics do
 * not exist; they never touch the fields, so they see the type opaque. */
#ifdef __cplusplus
typedef struct slim_cancel slim_cancel;
#else
typedef struct slim_cancel {
    atomic_int reason;     /* slim_cancel_reason; NONE while the run may go on */
    int64_t deadline_ns;   /* CLOCK_MONOTONIC; 0: none */
    int64_t timeout_ms;    /* for the message only */
} slim_cancel;
#endif

/* Monotonic clock in nanoseconds, and a deadline ms from now (0 ms: none). */
int64_t slim_cancel_now_ns(void);
int64_t slim_cancel_deadline_after_ms(int64_t ms);

void slim_cancel_init(slim_cancel *c, int64_t deadline_ns);
/* Any thread: asks the run to stop; the first reason given wins. */
void slim_cancel_request(slim_cancel *c, slim_cancel_reason why);
/* The reason the run must stop now (checks the deadline too), or NONE. */
slim_cancel_reason slim_cancel_reason_of(slim_cancel *c);

/* Makes c the calling thread's token; returns the previous one (NULL ok). */
slim_cancel *slim_cancel_enter(slim_cancel *c);
slim_cancel *slim_cancel_current(void);

/*
 * Cheap check for kernels: true once the current token is cancelled or
 * past its deadline. Reads the clock at most every 1024 calls per thread,
 * so it can sit in an inner loop of microsecond steps; loops of bigger
 * steps may call it every iteration.
 */
bool slim_cancel_poll(void);

/*
 * The status for a stopped run with its message: SLIM_ETIMEDOUT naming the
 * timeout, SLIM_ECANCELLED naming the reason. SLIM_OK when not cancelled.
 */
slim_status slim_cancel_status(slim_err *err);

#ifdef __cplusplus
}
#endif

#endif
