/* status.c - status names and error messages. */
#include "slim.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *slim_strerror(slim_status s)
{
    switch (s) {
#define SLIM__STATUS_TEXT(name, code, text) case SLIM_##name: return text;
        SLIM_STATUS_MAP(SLIM__STATUS_TEXT)
#undef SLIM__STATUS_TEXT
    }
    return "unknown status";
}

const char *slim_status_name(slim_status s)
{
    switch (s) {
#define SLIM__STATUS_NAME(name, code, text) case SLIM_##name: return "SLIM_" #name;
        SLIM_STATUS_MAP(SLIM__STATUS_NAME)
#undef SLIM__STATUS_NAME
    }
    return "SLIM_UNKNOWN";
}

slim_status slim_errf(slim_err *err, slim_status s, const char *fmt, ...)
{
    if (!err)
        return s;
    err->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return s;
}

slim_status slim_err_prefix(slim_err *err, const char *fmt, ...)
{
    if (!err)
        return SLIM_OK;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    size_t cap = sizeof(err->msg);
    size_t plen = strlen(prefix), mlen = strnlen(err->msg, cap - 1);
    if (plen > cap - 1)
        plen = cap - 1;
    if (plen + mlen > cap - 1)
        mlen = cap - 1 - plen;
    memmove(err->msg + plen, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + mlen] = '\0';
    return err->status;
}
