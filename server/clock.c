/*
 * clock.c - the server's monotonic clock (clock.h). One clock for queue
 * waits, deadlines and phase times, so that they can be compared.
 */
#include "clock.h"

#include <time.h>

int64_t slim_server_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t slim_server_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
