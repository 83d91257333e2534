// strings_regex_re2.cc - RegexFullMatch's engine: RE2, whose automata
// match in time linear in the input (no backtracking, so a pattern such as
// (a+)+$ cannot blow up). A thin shim; the operator is C (strings.c).
#include <re2/re2.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "strings_regex.h"

struct slim_regex {
    RE2 re;
    explicit slim_regex(const re2::StringPiece &p, const RE2::Options &o) : re(p, o) {}
};

extern "C" slim_regex *slim_regex_compile(const char *pattern, size_t len, char *msg, size_t cap)
{
    RE2::Options o;
    o.set_log_errors(false);
    // UTF-8 patterns and subjects, as onnxruntime's RE2 use; the default
    // program budget bounds a huge pattern's automaton.
    o.set_encoding(RE2::Options::EncodingUTF8);
    slim_regex *r = new (std::nothrow) slim_regex(re2::StringPiece(pattern, len), o);
    if (!r) {
        snprintf(msg, cap, "out of memory compiling it");
        return nullptr;
    }
    if (!r->re.ok()) {
        snprintf(msg, cap, "not a valid RE2 regular expression: %s", r->re.error().c_str());
        delete r;
        return nullptr;
    }
    return r;
}

extern "C" bool slim_regex_full_match(const slim_regex *re, const char *s, size_t len)
{
    return RE2::FullMatch(re2::StringPiece(s, len), re->re);
}

extern "C" void slim_regex_free(slim_regex *re)
{
    delete re;
}
