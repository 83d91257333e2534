/*
 * admission_impl.h - module-private: request_need.c's figures for
 * admission.c. Nothing else includes it.
 */
#ifndef SLIM_SERVER_ADMISSION_IMPL_H
#define SLIM_SERVER_ADMISSION_IMPL_H

#include "slim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct slim_server_request slim_server_request;

/* What a request needs before it runs.
 * Under a CPU memory limit, the bytes its JSON header's tree can take are
 * reserved in the allocator while it is parsed (SLIM_EOOM: not now). */
slim_status slim__request_reserve_parse(slim_server_request *req, slim_err *err);
void slim__request_release_parse(slim_server_request *req);
typedef struct slim__request_need {
    size_t inputs;              /* its decoded inputs */
    size_t run;                 /* inputs + a one-row run's arena + its outputs (known ones) */
    bool known;                 /* the header parsed: the figures mean something */
    int64_t timeout_us;         /* its "timeout" parameter (0: none or not valid yet) */
} slim__request_need;
/* From its JSON header (parsed under the reservation above). */
slim__request_need slim__request_declared_need(const slim_server_request *req);
/* The answer's size at most, from its decoded inputs; 0 when an output's
 * shape depends on data. */
size_t slim__request_reply_bound(const slim_server_request *req);

#endif
