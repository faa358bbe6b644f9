/* util: small helpers shared by the binaries: allocation, clocks, crc32,
 * random hex, hex digits, word lists, trimming. */
#ifndef DQ_UTIL_H
#define DQ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* malloc, calloc, realloc and strdup that do not return without the
 * memory: out of memory, the process aborts (there is no sensible answer
 * to give without it, and a worker that dies is replaced). */
void *util_xmalloc(size_t n);
void *util_xcalloc(size_t n, size_t size);
void *util_xrealloc(void *p, size_t n);
char *util_xstrdup(const char *s);

/* Monotonic milliseconds, for timeouts and backoff (never for due times:
 * those come from Redis' clock). */
int64_t util_mono_ms(void);
int64_t util_mono_us(void); /* the same clock in microseconds */
/* Unix milliseconds from this host's clock, for checks with years of slack
 * (an `at` too far ahead); due times come from Redis' clock. */
int64_t util_wall_ms(void);
/* Unix milliseconds as UTC ISO 8601 ("2026-11-26T01:02:03.456Z") into
 * out (at least 25 bytes); "?" when they are out of range. */
void util_format_utc_ms(int64_t ms, char *out, size_t n);
/* CRC-32 (IEEE) of s[0..n): a job's shard is crc32(id) mod shards, its
 * bucket in the shard crc32(id) / shards mod buckets. */
uint32_t util_crc32(const char *s, size_t n);
/* n zeroed bytes that processes forked afterwards share (an anonymous
 * shared mapping), or NULL. util_shared_free(p, n) unmaps them. */
void *util_shared_alloc(size_t n);
void util_shared_free(void *p, size_t n);
/* Writes 2*nbytes random hex characters and a NUL into out. */
void util_random_hex(char *out, size_t nbytes);
/* The value of a hex digit, or -1. */
int util_hex_digit(char c);
/* The next word of a list separated by spaces, tabs or commas (config
 * values such as push_allow and push_secret): returns 1 with *word and *len
 * and advances *p past it, or 0 at the end. */
int util_next_word(const char **p, const char **word, size_t *len);
/* s without its leading and trailing white space: cuts the trailing part
 * off in place and returns where the rest begins (a config file's key or
 * value). */
char *util_trim(char *s);

#endif
