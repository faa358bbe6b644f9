/* json_strict: parse a request body as strict RFC 8259 JSON.
 * json-c alone accepts NaN, Infinity, single quotes and duplicate keys; the
 * protocol rejects all of them, so a small validator runs first and the
 * duplicate-key check runs after json-c built the tree. Pure: no I/O. */
#ifndef DQ_JSON_STRICT_H
#define DQ_JSON_STRICT_H

#include <json-c/json.h>
#include <stddef.h>

#define JSON_STRICT_MAX_DEPTH 32

/* Parses text[0..len). On success returns 0 and sets *out (owned by the
 * caller: json_object_put it). On failure returns -1 and writes a sentence
 * naming the problem into err. */
int json_parse_strict(const char *text, size_t len, json_object **out, char *err, size_t errlen);

/* Returns 1 if s[0..n) is valid UTF-8 (no overlongs, no surrogates). */
int json_utf8_valid(const char *s, size_t n);

#endif
