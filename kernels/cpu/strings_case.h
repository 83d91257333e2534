/* strings_case.h - UTF-8 case change (strings_case.c). */
#ifndef SLIM_STRINGS_CASE_H
#define SLIM_STRINGS_CASE_H

#include "strings_impl.h"

typedef enum { SLIM_CASE_NONE, SLIM_CASE_LOWER, SLIM_CASE_UPPER } slim_case;

uint32_t slim_case_lower(uint32_t cp);
uint32_t slim_case_upper(uint32_t cp);
/* s (n bytes of UTF-8) with each code point mapped, into out (replaced).
 * SLIM_EINVAL names the byte where s stops being UTF-8. */
slim_status slim_utf8_case(const char *s, size_t n, slim_case mode, slim_strbuf *out,
                           slim_err *err);

#endif
