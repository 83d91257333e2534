/* strings_regex_none.c - RegexFullMatch's engine in a build without RE2:
 * every pattern is refused at load, saying why (strings_regex.h). */
#include "strings_regex.h"

#include <stdio.h>

slim_regex *slim_regex_compile(const char *pattern, size_t len, char *msg, size_t cap)
{
    (void)pattern;
    (void)len;
    snprintf(msg, cap, "this build has no regular expression engine (RE2: install libre2-dev "
             "and rebuild)");
    return NULL;
}

bool slim_regex_full_match(const slim_regex *re, const char *s, size_t len)
{
    (void)re;
    (void)s;
    (void)len;
    return false;
}

void slim_regex_free(slim_regex *re)
{
    (void)re;
}
