/* json_scan: strict one-pass JSON scanner (see json_scan.h). */
#include "common/json_scan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* The decoded hash of one key of an object still open, for duplicates. */
struct json_key {
    uint64_t hash;
    uint32_t tok; /* the key's token */
};

#define SMALL_TOKS 256
#define SMALL_KEYS 64

void json_doc_init(json_doc *d)
{
    memset(d, 0, sizeof *d);
}

void json_doc_free(json_doc *d)
{
    free(d->toks);
    free(d->keys);
    json_doc_init(d);
}

void json_doc_trim(json_doc *d)
{
    if (d->cap > SMALL_TOKS || d->keycap > SMALL_KEYS)
        json_doc_free(d);
}

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */
/* ------------------------------------------------------------------------ */

/* Length of the UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len;
    unsigned min, cp;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2, min = 0x80, cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3, min = 0x800, cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4, min = 0x10000, cp = s[0] & 0x07;
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
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

size_t json_utf8_char(const char *s, size_t n)
{
    return n ? utf8_seq((const unsigned char *)s, n) : 0;
}

size_t json_utf8_prefix(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    size_t i = max;
    /* Back off over continuation bytes to the start of the cut character. */
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

static size_t utf8_put(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ------------------------------------------------------------------------ */
/* Scanner                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    json_doc *d;
    const char *text;
    size_t p, end;
    const char *why;
} scanner;

static int scan_error(scanner *s, const char *why)
{
    s->why = why;
    return -1;
}

static void skip_ws(scanner *s)
{
    while (s->p < s->end) {
        char c = s->text[s->p];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        s->p++;
    }
}

static long push_tok(scanner *s, json_tok_type type, size_t start)
{
    json_doc *d = s->d;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : SMALL_TOKS;
        json_tok *t = util_xrealloc(d->toks, cap * sizeof *t);
        d->toks = t;
        d->cap = cap;
    }
    json_tok *t = &d->toks[d->n];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->start = (uint32_t)start;
    return (long)d->n++;
}

static void push_key(scanner *s, uint64_t hash, size_t tok)
{
    json_doc *d = s->d;
    if (d->nkeys == d->keycap) {
        size_t cap = d->keycap ? d->keycap * 2 : SMALL_KEYS;
        struct json_key *k = util_xrealloc(d->keys, cap * sizeof *k);
        d->keys = k;
        d->keycap = cap;
    }
    d->keys[d->nkeys].hash = hash;
    d->keys[d->nkeys].tok = (uint32_t)tok;
    d->nkeys++;
}

/* Value of the four hex digits at text[p..p+4), or -1. */
static long hex4(const char *text, size_t p, size_t end)
{
    if (end - p < 4)
        return -1;
    long v = 0;
    for (size_t i = 0; i < 4; i++) {
        int h = util_hex_digit(text[p + i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

static uint64_t fnv_bytes(uint64_t h, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)b[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Scans a string starting at its opening quote. *hash gets the FNV-1a hash
 * of its decoded bytes (used for keys). */
static int scan_string(scanner *s, uint64_t *hash)
{
    const char *t = s->text;
    long tok = push_tok(s, JSON_STRING, s->p + 1);
    uint64_t h = FNV_OFFSET;
    int escaped = 0;
    s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)t[s->p];
        if (c == '"') {
            json_tok *jt = &s->d->toks[tok];
            jt->end = (uint32_t)s->p;
            jt->escaped = (uint8_t)escaped;
            jt->skip = (uint32_t)tok + 1;
            s->p++;
            *hash = h;
            return 0;
        }
        if (c < 0x20)
            return scan_error(s, "a control character inside a string must be escaped");
        if (c == '\\') {
            escaped = 1;
            if (s->end - s->p < 2)
                break;
            char e = t[s->p + 1];
            char dec[4];
            size_t dn = 1;
            switch (e) {
            case '"': dec[0] = '"'; break;
            case '\\': dec[0] = '\\'; break;
            case '/': dec[0] = '/'; break;
            case 'b': dec[0] = '\b'; break;
            case 'f': dec[0] = '\f'; break;
            case 'n': dec[0] = '\n'; break;
            case 'r': dec[0] = '\r'; break;
            case 't': dec[0] = '\t'; break;
            case 'u': {
                long cp = hex4(t, s->p + 2, s->end);
                if (cp < 0)
                    return scan_error(s, "\\u must be followed by four hex digits");
                s->p += 4;
                /* A lone surrogate is refused: it has no UTF-8 form, and
                 * consumers decode it differently (or not at all). */
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return scan_error(s, "lone low surrogate escape in a string");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    long lo = -1;
                    if (s->end - s->p >= 8 && t[s->p + 2] == '\\' && t[s->p + 3] == 'u')
                        lo = hex4(t, s->p + 4, s->end);
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return scan_error(s, "high surrogate escape not followed by a low surrogate escape");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s->p += 6;
                }
                dn = utf8_put((unsigned)cp, dec);
                break;
            }
            default:
                return scan_error(s, "invalid escape sequence in a string");
            }
            h = fnv_bytes(h, dec, dn);
            s->p += 2;
            continue;
        }
        size_t l = utf8_seq((const unsigned char *)t + s->p, s->end - s->p);
        if (!l)
            return scan_error(s, "invalid UTF-8 in a string");
        h = fnv_bytes(h, t + s->p, l);
        s->p += l;
    }
    return scan_error(s, "unterminated string");
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The end of the number that starts at text[p] (RFC 8259 grammar), or 0
 * if there is none there. */
static size_t number_end(const char *t, size_t p, size_t end)
{
    if (p < end && t[p] == '-')
        p++;
    if (p < end && t[p] == '0') {
        p++;
    } else if (p < end && t[p] >= '1' && t[p] <= '9') {
        while (p < end && is_digit(t[p]))
            p++;
    } else {
        return 0;
    }
    if (p < end && t[p] == '.') {
        p++;
        if (p >= end || !is_digit(t[p]))
            return 0;
        while (p < end && is_digit(t[p]))
            p++;
    }
    if (p < end && (t[p] == 'e' || t[p] == 'E')) {
        p++;
        if (p < end && (t[p] == '+' || t[p] == '-'))
            p++;
        if (p >= end || !is_digit(t[p]))
            return 0;
        while (p < end && is_digit(t[p]))
            p++;
    }
    return p;
}

int json_number_syntax(const char *s, size_t n)
{
    return n > 0 && number_end(s, 0, n) == n;
}

static int scan_number(scanner *s)
{
    size_t start = s->p;
    size_t end = number_end(s->text, s->p, s->end);
    if (!end)
        return scan_error(s, "invalid number");
    s->p = end;
    double d;
    if (json_number_double(s->text + start, end - start, &d) < 0)
        return scan_error(s, "number out of the range of a double");
    long tok = push_tok(s, JSON_NUMBER, start);
    s->d->toks[tok].end = (uint32_t)end;
    s->d->toks[tok].skip = (uint32_t)tok + 1;
    return 0;
}

static int scan_literal(scanner *s, const char *word, json_tok_type type)
{
    size_t n = strlen(word);
    if (s->end - s->p < n || memcmp(s->text + s->p, word, n) != 0)
        return scan_error(s, "unexpected character (not JSON)");
    long tok = push_tok(s, type, s->p);
    s->p += n;
    s->d->toks[tok].end = (uint32_t)s->p;
    s->d->toks[tok].skip = (uint32_t)tok + 1;
    return 0;
}

static int cmp_key(const void *a, const void *b)
{
    uint64_t x = ((const struct json_key *)a)->hash, y = ((const struct json_key *)b)->hash;
    return x < y ? -1 : x > y;
}

/* A key decoded, for comparing keys whose hashes are equal. */
typedef struct {
    char *s;
    size_t n;
    uint32_t tok;
} decoded_key;

static decoded_key decode_key(scanner *s, uint32_t tok)
{
    const json_tok *t = &s->d->toks[tok];
    decoded_key k = {util_xmalloc(t->end - t->start + 1), 0, tok};
    k.n = json_string_decode(s->text, t, k.s);
    return k;
}

static int cmp_decoded(const void *a, const void *b)
{
    const decoded_key *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Keys k[0..r) share one hash: does any decoded string occur twice? They
 * are decoded and sorted, so even keys crafted to collide cost n log n.
 * Returns the token of the later of two equal keys, or 0. */
static uint32_t run_has_duplicate(scanner *s, const struct json_key *k, size_t r)
{
    decoded_key *dk = util_xmalloc(r * sizeof *dk);
    for (size_t i = 0; i < r; i++)
        dk[i] = decode_key(s, k[i].tok);
    qsort(dk, r, sizeof *dk, cmp_decoded);
    uint32_t dup = 0;
    for (size_t i = 1; i < r && !dup; i++) {
        if (cmp_decoded(&dk[i - 1], &dk[i]) == 0)
            dup = dk[i - 1].tok > dk[i].tok ? dk[i - 1].tok : dk[i].tok;
    }
    for (size_t i = 0; i < r; i++)
        free(dk[i].s);
    free(dk);
    return dup;
}

/* Checks the keys of the object that just closed (entries from..nkeys)
 * for duplicates, then forgets them. */
static int check_duplicates(scanner *s, size_t from)
{
    json_doc *d = s->d;
    size_t n = d->nkeys - from;
    d->nkeys = from;
    if (n < 2)
        return 0;
    struct json_key *k = d->keys + from;
    qsort(k, n, sizeof *k, cmp_key);
    for (size_t i = 0; i < n;) {
        size_t r = 1;
        while (i + r < n && k[i + r].hash == k[i].hash)
            r++;
        uint32_t dup = r > 1 ? run_has_duplicate(s, k + i, r) : 0;
        if (dup) {
            s->p = d->toks[dup].start - 1; /* report where the repeated key starts */
            return scan_error(s, "duplicate key in an object");
        }
        i += r;
    }
    return 0;
}

static int scan_value(scanner *s, int depth);

static int scan_container(scanner *s, int depth, int object)
{
    char close = object ? '}' : ']';
    long tok = push_tok(s, object ? JSON_OBJECT : JSON_ARRAY, s->p);
    size_t keys_from = s->d->nkeys;
    uint32_t count = 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && s->text[s->p] == close) {
        s->p++;
    } else {
        for (;;) {
            skip_ws(s);
            if (object) {
                if (s->p >= s->end || s->text[s->p] != '"')
                    return scan_error(s, "object keys must be double-quoted strings");
                uint64_t h;
                size_t key_tok = s->d->n;
                if (scan_string(s, &h) < 0)
                    return -1;
                push_key(s, h, key_tok);
                skip_ws(s);
                if (s->p >= s->end || s->text[s->p] != ':')
                    return scan_error(s, "expected ':' after an object key");
                s->p++;
            }
            if (scan_value(s, depth + 1) < 0)
                return -1;
            count++;
            skip_ws(s);
            if (s->p < s->end && s->text[s->p] == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && s->text[s->p] == close) {
                s->p++;
                break;
            }
            return scan_error(s, object ? "expected ',' or '}' in an object"
                                  : "expected ',' or ']' in an array");
        }
    }
    if (object && check_duplicates(s, keys_from) < 0)
        return -1;
    json_tok *t = &s->d->toks[tok];
    t->end = (uint32_t)s->p;
    t->count = count;
    t->skip = (uint32_t)s->d->n;
    return 0;
}

static int scan_value(scanner *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end)
        return scan_error(s, "unexpected end of JSON");
    uint64_t unused;
    switch (s->text[s->p]) {
    case '{':
    case '[':
        if (depth >= JSON_SCAN_MAX_DEPTH)
            return scan_error(s, "JSON nested deeper than 32 levels");
        return scan_container(s, depth, s->text[s->p] == '{');
    case '"':
        return scan_string(s, &unused);
    case 't':
        return scan_literal(s, "true", JSON_TRUE);
    case 'f':
        return scan_literal(s, "false", JSON_FALSE);
    case 'n':
        return scan_literal(s, "null", JSON_NULL);
    default:
        if (s->text[s->p] == '-' || is_digit(s->text[s->p]))
            return scan_number(s);
        return scan_error(s, "unexpected character (not JSON)");
    }
}

int json_scan(json_doc *d, const char *text, size_t len, char *err, size_t errlen)
{
    scanner s = {d, text, 0, len, NULL};
    d->n = 0;
    d->nkeys = 0;
    if (len > UINT32_MAX - 1) {
        snprintf(err, errlen, "body is not valid JSON: too long");
        return -1;
    }
    if (scan_value(&s, 0) < 0) {
        snprintf(err, errlen, "body is not valid JSON: %s at byte %zu", s.why, s.p);
        return -1;
    }
    skip_ws(&s);
    if (s.p != s.end) {
        snprintf(err, errlen, "body is not valid JSON: trailing data at byte %zu", s.p);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                    */
/* ------------------------------------------------------------------------ */

size_t json_string_decode(const char *text, const json_tok *t, char *out)
{
    size_t o = 0;
    for (size_t i = t->start; i < t->end;) {
        char c = text[i];
        if (c != '\\') {
            out[o++] = c;
            i++;
            continue;
        }
        char e = text[i + 1];
        i += 2;
        switch (e) {
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            /* The scan checked the escape, pairs included. */
            unsigned cp = (unsigned)hex4(text, i, t->end);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo = (unsigned)hex4(text, i + 2, t->end);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            /* An escape of n hex digits never decodes to more than it was
             * written with, so in-place decoding cannot overrun. */
            o += utf8_put(cp, out + o);
            break;
        }
        default: out[o++] = e; break; /* " \ / */
        }
    }
    return o;
}

size_t json_member(const json_doc *d, const char *text, size_t obj, const char *name)
{
    const json_tok *t = d->toks;
    size_t want = strlen(name);
    size_t key = obj + 1;
    for (uint32_t m = 0; m < t[obj].count; m++, key = json_next_member(d, key)) {
        size_t raw = t[key].end - t[key].start;
        if (raw < want)
            continue;
        if (!t[key].escaped) {
            if (raw == want && memcmp(text + t[key].start, name, want) == 0)
                return key + 1;
            continue;
        }
        char *dec = util_xmalloc(raw + 1);
        size_t n = json_string_decode(text, &t[key], dec);
        int eq = n == want && memcmp(dec, name, want) == 0;
        free(dec);
        if (eq)
            return key + 1;
    }
    return 0;
}

void json_raw(const json_doc *d, size_t i, size_t *start, size_t *end)
{
    const json_tok *t = &d->toks[i];
    int quoted = t->type == JSON_STRING;
    *start = t->start - (size_t)quoted;
    *end = t->end + (size_t)quoted;
}

size_t json_compact(const char *text, size_t start, size_t end, char *out)
{
    size_t o = 0;
    int in_string = 0;
    for (size_t i = start; i < end; i++) {
        char c = text[i];
        if (in_string) {
            out[o++] = c;
            if (c == '\\') {
                out[o++] = text[++i]; /* the escaped character, quotes included */
            } else if (c == '"') {
                in_string = 0;
            }
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        } else {
            out[o++] = c;
            in_string = c == '"';
        }
    }
    return o;
}

/* Decimal exponent saturates here: far past any double's range. */
#define EXP_LIMIT 100000000L

int json_number_double(const char *s, size_t n, double *out)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    /* value = 0.<digits> x 10^exp10, keeping at most 40 significant digits */
    char digits[41];
    size_t nd = 0;
    long exp10 = 0;
    int seen_nonzero = 0;
    for (; i < n && is_digit(s[i]); i++) {
        if (s[i] != '0' || seen_nonzero) {
            seen_nonzero = 1;
            if (nd < 40)
                digits[nd++] = s[i];
            if (exp10 < EXP_LIMIT)
                exp10++;
        }
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && is_digit(s[i]); i++) {
            if (s[i] != '0' || seen_nonzero) {
                seen_nonzero = 1;
                if (nd < 40)
                    digits[nd++] = s[i];
            } else if (exp10 > -EXP_LIMIT) {
                exp10--; /* a leading zero of the fraction */
            }
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            eneg = s[i++] == '-';
        long e = 0;
        for (; i < n && is_digit(s[i]); i++) {
            if (e < EXP_LIMIT)
                e = e * 10 + (s[i] - '0');
        }
        exp10 += eneg ? -e : e;
    }
    if (!seen_nonzero) {
        *out = neg ? -0.0 : 0.0;
        return 0;
    }
    if (exp10 > 400)
        return -1;
    if (exp10 < -400) {
        *out = neg ? -0.0 : 0.0;
        return 0;
    }
    char tmp[64];
    digits[nd] = '\0';
    snprintf(tmp, sizeof tmp, "%s0.%se%ld", neg ? "-" : "", digits, exp10);
    errno = 0;
    double d = strtod(tmp, NULL);
    if (isinf(d))
        return -1;
    *out = d;
    return 0;
}

int json_number_int64(const char *s, size_t n, int64_t *out)
{
    if (memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n))
        return 1;
    size_t i = s[0] == '-';
    if (n - i > 19)
        return -1;
    uint64_t v = 0;
    for (; i < n; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    if (s[0] == '-') {
        if (v > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)v;
    }
    return 0;
}
