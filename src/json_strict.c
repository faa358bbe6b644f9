/* json_strict: strict JSON validation in front of json-c. */
#include "json_strict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    const char *end;
    size_t members; /* object members seen, to detect duplicate keys later */
    const char *why;
} scanner;

static void skip_ws(scanner *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Length of the UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len;
    unsigned min;
    unsigned cp;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2; min = 0x80; cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3; min = 0x800; cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4; min = 0x10000; cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

static int scan_value(scanner *s, int depth);

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Value of the four hex digits after "\\u" at p, or -1. */
static long hex4(const char *p, const char *end)
{
    if (end - p < 6)
        return -1;
    long v = 0;
    for (int i = 2; i < 6; i++) {
        if (!is_hex(p[i]))
            return -1;
        char c = p[i];
        v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static int scan_string(scanner *s)
{
    s->p++; /* opening quote */
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return 0;
        }
        if (c < 0x20) {
            s->why = "a control character inside a string must be escaped";
            return -1;
        }
        if (c == '\\') {
            if (s->end - s->p < 2)
                break;
            char e = s->p[1];
            if (e == 'u') {
                long cp = hex4(s->p, s->end);
                if (cp < 0) {
                    s->why = "\\u must be followed by four hex digits";
                    return -1;
                }
                s->p += 6;
                /* A surrogate escape must be a high/low pair: json-c would
                 * turn a lone one into U+FFFD, changing the body. */
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    s->why = "lone low surrogate escape in a string";
                    return -1;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    long lo = (s->end - s->p >= 2 && s->p[0] == '\\' && s->p[1] == 'u')
                                  ? hex4(s->p, s->end) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        s->why = "high surrogate escape not followed by a low surrogate escape";
                        return -1;
                    }
                    s->p += 6;
                }
            } else if (strchr("\"\\/bfnrt", e) && e) {
                s->p += 2;
            } else {
                s->why = "invalid escape sequence in a string";
                return -1;
            }
            continue;
        }
        size_t l = utf8_seq((const unsigned char *)s->p, (size_t)(s->end - s->p));
        if (!l) {
            s->why = "invalid UTF-8 in a string";
            return -1;
        }
        s->p += l;
    }
    s->why = "unterminated string";
    return -1;
}

static int scan_number(scanner *s)
{
    const char *start = s->p;
    if (*s->p == '-')
        s->p++;
    if (s->p < s->end && *s->p == '0') {
        s->p++;
    } else if (s->p < s->end && *s->p >= '1' && *s->p <= '9') {
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    } else {
        s->why = "invalid number";
        return -1;
    }
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9') {
            s->why = "invalid number";
            return -1;
        }
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9') {
            s->why = "invalid number";
            return -1;
        }
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    /* A number that overflows a double is rejected, not turned into inf. */
    char tmp[64];
    size_t n = (size_t)(s->p - start);
    if (n < sizeof tmp) {
        memcpy(tmp, start, n);
        tmp[n] = '\0';
        errno = 0;
        double d = strtod(tmp, NULL);
        if (isinf(d)) {
            s->why = "number out of the range of a double";
            return -1;
        }
    } else {
        s->why = "number longer than 63 characters";
        return -1;
    }
    return 0;
}

static int scan_literal(scanner *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) {
        s->why = "unexpected character (not JSON)";
        return -1;
    }
    s->p += n;
    return 0;
}

static int scan_container(scanner *s, int depth, char close)
{
    int object = close == '}';
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        skip_ws(s);
        if (object) {
            if (s->p >= s->end || *s->p != '"') {
                s->why = "object keys must be double-quoted strings";
                return -1;
            }
            if (scan_string(s) < 0)
                return -1;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') {
                s->why = "expected ':' after an object key";
                return -1;
            }
            s->p++;
            s->members++;
        }
        if (scan_value(s, depth + 1) < 0)
            return -1;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return 0;
        }
        s->why = object ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array";
        return -1;
    }
}

static int scan_value(scanner *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end) {
        s->why = "unexpected end of JSON";
        return -1;
    }
    switch (*s->p) {
    case '{':
    case '[':
        if (depth >= JSON_STRICT_MAX_DEPTH) {
            s->why = "JSON nested deeper than 32 levels";
            return -1;
        }
        return scan_container(s, depth, *s->p == '{' ? '}' : ']');
    case '"':
        return scan_string(s);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
            return scan_number(s);
        s->why = "unexpected character (not JSON)";
        return -1;
    }
}

/* Members in the tree json-c built; fewer than the text had means a key
 * was repeated and json-c kept only one of them. */
static size_t tree_members(json_object *o)
{
    size_t n = 0;
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, key, val) {
            (void)key;
            n += 1 + tree_members(val);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        size_t len = json_object_array_length(o);
        for (size_t i = 0; i < len; i++)
            n += tree_members(json_object_array_get_idx(o, i));
    }
    return n;
}

int json_parse_strict(const char *text, size_t len, json_object **out, char *err, size_t errlen)
{
    scanner s = {text, text + len, 0, NULL};
    *out = NULL;
    if (scan_value(&s, 0) < 0) {
        snprintf(err, errlen, "body is not valid JSON: %s at byte %zu", s.why, (size_t)(s.p - text));
        return -1;
    }
    skip_ws(&s);
    if (s.p != s.end) {
        snprintf(err, errlen, "body is not valid JSON: trailing data at byte %zu", (size_t)(s.p - text));
        return -1;
    }
    json_tokener *tok = json_tokener_new_ex(JSON_STRICT_MAX_DEPTH + 1);
    if (!tok)
        abort();
    /* The scanner accepted the text, so this parse is only to build the tree
     * (a top-level null yields NULL, which callers reject as not an object). */
    json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (jerr == json_tokener_continue) {
        /* A top-level number or literal ends only at a delimiter, and text
         * need not be NUL-terminated: hand json-c the terminator. */
        obj = json_tokener_parse_ex(tok, "", 1);
        jerr = json_tokener_get_error(tok);
    }
    json_tokener_free(tok);
    if (jerr != json_tokener_success) {
        json_object_put(obj);
        snprintf(err, errlen, "body is not valid JSON");
        return -1;
    }
    if (tree_members(obj) != s.members) {
        json_object_put(obj);
        snprintf(err, errlen, "body is not valid JSON: duplicate key in an object");
        return -1;
    }
    *out = obj;
    return 0;
}
