/*
 * strings_regex.h - RegexFullMatch's engine (strings_regex_re2.cc, RE2;
 * strings_regex_none.c without it): compile at load, match in time linear
 * in the input. Plain C types only: the C++ shim includes it too.
 */
#ifndef SLIM_STRINGS_REGEX_H
#define SLIM_STRINGS_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct slim_regex slim_regex;
/* NULL with msg filled when the pattern is bad or no engine is built in. */
slim_regex *slim_regex_compile(const char *pattern, size_t len, char *msg, size_t cap);
bool slim_regex_full_match(const slim_regex *re, const char *s, size_t len);
void slim_regex_free(slim_regex *re);

#ifdef __cplusplus
}
#endif
#endif
