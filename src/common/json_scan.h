/* json_scan: strict RFC 8259 JSON in one pass, into a flat array of tokens
 * that point into the text. Nothing is copied or converted while scanning:
 * a job body is kept as the exact text the producer sent (numbers keep every
 * digit, escapes stay escapes), and the request's own fields are read from
 * their tokens. The scan rejects what the protocol calls bad JSON: NaN and
 * Infinity, single quotes, trailing commas, a duplicate key at any depth
 * (keys compared as decoded strings, so "a\u0000b" and "a\u0000c" differ and
 * "\u0061" equals "a"), a number that overflows a double, invalid UTF-8, a
 * lone surrogate escape, nesting deeper than JSON_SCAN_MAX_DEPTH. Pure: no
 * I/O, no global state. */
#ifndef DQ_JSON_SCAN_H
#define DQ_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#define JSON_SCAN_MAX_DEPTH 32

typedef enum {
    JSON_OBJECT = 1,
    JSON_ARRAY,
    JSON_STRING,
    JSON_NUMBER,
    JSON_TRUE,
    JSON_FALSE,
    JSON_NULL
} json_tok_type;

/* One value. An object's members follow it as key, value, key, value...;
 * an array's elements follow it; `skip` jumps over the whole subtree. */
typedef struct {
    uint8_t type;    /* json_tok_type */
    uint8_t escaped; /* strings: holds backslash escapes, decode before use */
    uint32_t start;  /* offset of the first byte (strings: after the quote) */
    uint32_t end;    /* one past the last byte (strings: the closing quote) */
    uint32_t count;  /* objects: members; arrays: elements */
    uint32_t skip;   /* index of the first token after this subtree */
} json_tok;

/* Scanner state and its reusable storage (tokens and the bookkeeping for
 * duplicate keys). Keep one per thread and call json_doc_trim after a large
 * document so memory stays bounded. */
typedef struct {
    json_tok *toks;
    size_t n, cap;
    struct json_key *keys; /* hashes of the keys of the open objects */
    size_t nkeys, keycap;
} json_doc;

void json_doc_init(json_doc *d);
void json_doc_free(json_doc *d);
/* Frees storage beyond what a small document needs. */
void json_doc_trim(json_doc *d);

/* Scans text[0..len) (need not be NUL-terminated), which must hold one JSON
 * value and nothing but whitespace around it. Returns 0 with d->toks[0] the
 * value, or -1 with err: "body is not valid JSON: <why> at byte <n>". */
int json_scan(json_doc *d, const char *text, size_t len, char *err, size_t errlen);

/* The index of the member after the one whose key is at token i. */
static inline size_t json_next_member(const json_doc *d, size_t key)
{
    return d->toks[key + 1].skip;
}

/* The value token of member `name` (compared decoded) of the object at
 * token obj, or 0 when it has none (0 is never a member's value). */
size_t json_member(const json_doc *d, const char *text, size_t obj, const char *name);
/* The span of the value at token i in its text, with a string's quotes. */
void json_raw(const json_doc *d, size_t i, size_t *start, size_t *end);

/* Decodes a string token's escapes into out (at least tok end - start
 * bytes; the decoded string is never longer). Returns the decoded length.
 * out may be text + start itself: decoding in place is safe. */
size_t json_string_decode(const char *text, const json_tok *t, char *out);

/* Copies text[start..end) to out without whitespace outside strings (out
 * may equal text + start). Returns the compact length. */
size_t json_compact(const char *text, size_t start, size_t end, char *out);

/* 1 if s[0..n) is exactly one JSON number (for numbers in query strings). */
int json_number_syntax(const char *s, size_t n);
/* A number token's value as a double (any length: digits past the 40th
 * significant one are dropped before conversion, which cannot change a
 * seconds value). Returns 0, or -1 if it is out of a double's range. */
int json_number_double(const char *s, size_t n, double *out);
/* A number token written as an integer (no fraction, no exponent) within
 * int64: returns 0 with *out, 1 if it has a fraction or exponent, -1 if it
 * does not fit. */
int json_number_int64(const char *s, size_t n, int64_t *out);

/* 1 if s[0..n) is valid UTF-8 (no overlong forms, no surrogates). */
int json_utf8_valid(const char *s, size_t n);
/* The length of the valid UTF-8 character at s (n bytes available), 0 if
 * none starts there. */
size_t json_utf8_char(const char *s, size_t n);
/* The length of the longest prefix of s[0..n) that is at most max bytes
 * and ends at a character boundary (for quoting client input). */
size_t json_utf8_prefix(const char *s, size_t n, size_t max);

#endif
