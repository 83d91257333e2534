/*
 * clock.h - the monotonic clock every deadline, queue wait and phase time
 * of the server is read from (clock.c).
 */
#ifndef SLIM_SERVER_CLOCK_H
#define SLIM_SERVER_CLOCK_H

#include <stdint.h>

int64_t slim_server_now_us(void); /* monotonic clock, microseconds */
int64_t slim_server_now_ns(void); /* the same, nanoseconds (statistics) */

#endif
