/*
 * cancel.c - cooperative cancellation tokens (see cancel.h).
 */
#include "cancel.h"

#include <time.h>

static _Thread_local slim_cancel *current_token;
static _Thread_local unsigned poll_count;

int64_t slim_cancel_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t slim_cancel_deadline_after_ms(int64_t ms)
{
    if (ms <= 0)
        return 0;
    return slim_cancel_now_ns() + ms * 1000000;
}

void slim_cancel_init(slim_cancel *c, int64_t deadline_ns)
{
    atomic_init(&c->reason, SLIM_CANCEL_NONE);
    c->deadline_ns = deadline_ns;
    c->timeout_ms = 0;
    if (deadline_ns) {
        int64_t left = deadline_ns - slim_cancel_now_ns();
        c->timeout_ms = left > 0 ? (left + 999999) / 1000000 : 0;
    }
}

void slim_cancel_request(slim_cancel *c, slim_cancel_reason why)
{
    int none = SLIM_CANCEL_NONE;
    if (c)
        atomic_compare_exchange_strong(&c->reason, &none, (int)why);
}

slim_cancel_reason slim_cancel_reason_of(slim_cancel *c)
{
    if (!c)
        return SLIM_CANCEL_NONE;
    int r = atomic_load_explicit(&c->reason, memory_order_relaxed);
    if (r != SLIM_CANCEL_NONE)
        return (slim_cancel_reason)r;
    if (c->deadline_ns && slim_cancel_now_ns() >= c->deadline_ns) {
        slim_cancel_request(c, SLIM_CANCEL_DEADLINE);
        return (slim_cancel_reason)atomic_load(&c->reason);
    }
    return SLIM_CANCEL_NONE;
}

slim_cancel *slim_cancel_enter(slim_cancel *c)
{
    slim_cancel *prev = current_token;
    current_token = c;
    return prev;
}

slim_cancel *slim_cancel_current(void)
{
    return current_token;
}

bool slim_cancel_poll(void)
{
    slim_cancel *c = current_token;
    if (!c)
        return false;
    if (atomic_load_explicit(&c->reason, memory_order_relaxed) != SLIM_CANCEL_NONE)
        return true;
    /* The clock costs ~20 ns; an inner loop step may cost less. */
    if (c->deadline_ns && (++poll_count & 1023) == 0)
        return slim_cancel_reason_of(c) != SLIM_CANCEL_NONE;
    return false;
}

slim_status slim_cancel_status(slim_err *err)
{
    switch (slim_cancel_reason_of(current_token)) {
    case SLIM_CANCEL_NONE:
        return SLIM_OK;
    case SLIM_CANCEL_DEADLINE:
        return slim_errf(err, SLIM_ETIMEDOUT, "the request's timeout of %lld ms passed",
                         (long long)current_token->timeout_ms);
    case SLIM_CANCEL_CLIENT:
        return slim_errf(err, SLIM_ECANCELLED, "cancelled: the client disconnected");
    case SLIM_CANCEL_UNLOAD:
        return slim_errf(err, SLIM_ECANCELLED, "cancelled: the model is being unloaded");
    case SLIM_CANCEL_SHUTDOWN:
        return slim_errf(err, SLIM_ECANCELLED, "cancelled: the server is shutting down");
    }
    return SLIM_OK;
}
