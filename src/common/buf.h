/* buf: a growable byte buffer, used to build responses and Redis arguments.
 * Allocation failure aborts: a worker that cannot allocate a few KiB cannot
 * answer anyway, and the master replaces it. */
#ifndef DQ_BUF_H
#define DQ_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;  /* NULL until the first append; then always NUL-terminated */
    size_t len;
    size_t cap;
} dq_buf;

void buf_init(dq_buf *b);
void buf_free(dq_buf *b);
void buf_reset(dq_buf *b);
void buf_append(dq_buf *b, const char *s, size_t n);
void buf_puts(dq_buf *b, const char *s);
void buf_putc(dq_buf *b, char c);
/* Frees the storage when it grew beyond keep bytes, so one large answer
 * does not stay allocated for the life of the thread. */
void buf_trim(dq_buf *b, size_t keep);
void buf_printf(dq_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_put_i64(dq_buf *b, int64_t v);
/* Appends s (n bytes, valid UTF-8) as a quoted JSON string. */
void buf_put_json_string(dq_buf *b, const char *s, size_t n);
/* Appends a millisecond count as a JSON number of seconds ("60", "0.25"). */
void buf_put_seconds(dq_buf *b, int64_t ms);

#endif
