/* buf: growable byte buffer and the small JSON writer built on it. */
#include "common/buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void buf_init(dq_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void buf_free(dq_buf *b)
{
    free(b->data);
    buf_init(b);
}

void buf_reset(dq_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static void buf_reserve(dq_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = util_xrealloc(b->data, cap);
    b->data = p;
    b->cap = cap;
}

void buf_append(dq_buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_puts(dq_buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

void buf_putc(dq_buf *b, char c)
{
    buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void buf_trim(dq_buf *b, size_t keep)
{
    if (b->cap > keep)
        buf_free(b);
    else
        buf_reset(b);
}

void buf_printf(dq_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void buf_put_i64(dq_buf *b, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
    buf_append(b, tmp, (size_t)n);
}

void buf_put_json_string(dq_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n + 2);
    b->data[b->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc = 0;
        switch (c) {
        case '"': esc = '"'; break;
        case '\\': esc = '\\'; break;
        case '\n': esc = 'n'; break;
        case '\r': esc = 'r'; break;
        case '\t': esc = 't'; break;
        case '\b': esc = 'b'; break;
        case '\f': esc = 'f'; break;
        default: break;
        }
        if (esc) {
            char e[2] = {'\\', esc};
            buf_append(b, e, 2);
        } else if (c < 0x20) {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            buf_append(b, u, 6);
        } else {
            buf_append(b, (const char *)&c, 1);
        }
    }
    buf_append(b, "\"", 1);
}

void buf_put_seconds(dq_buf *b, int64_t ms)
{
    if (ms % 1000 == 0) {
        buf_put_i64(b, ms / 1000);
        return;
    }
    char tmp[32];
    uint64_t mag = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
    int n = snprintf(tmp, sizeof tmp, "%s%" PRIu64 ".%03" PRIu64, ms < 0 ? "-" : "", mag / 1000,
                     mag % 1000);
    while (n > 0 && tmp[n - 1] == '0')
        n--;
    buf_append(b, tmp, (size_t)n);
}
