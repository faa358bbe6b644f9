/* util: allocation, clocks, crc32, random hex, hex digits, word lists,
 * trimming. */
#include "common/util.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

static int64_t clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *must(void *p)
{
    if (!p)
        abort();
    return p;
}

void *util_xmalloc(size_t n)
{
    return must(malloc(n ? n : 1)); /* malloc(0) may answer NULL */
}

void *util_xcalloc(size_t n, size_t size)
{
    return must(calloc(n ? n : 1, size ? size : 1));
}

void *util_xrealloc(void *p, size_t n)
{
    return must(realloc(p, n ? n : 1)); /* realloc(p, 0) may free p */
}

char *util_xstrdup(const char *s)
{
    return must(strdup(s));
}

int64_t util_mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

int64_t util_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t util_wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

void util_format_utc_ms(int64_t ms, char *out, size_t n)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    char day[24];
    if (ms < 0 || !gmtime_r(&secs, &tm) || !strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm)) {
        snprintf(out, n, "?");
        return;
    }
    snprintf(out, n, "%s.%03dZ", day, (int)(ms % 1000));
}

uint32_t util_crc32(const char *s, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned char)s[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

void util_random_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    if (nbytes > sizeof raw)
        abort();
    size_t got = 0;
    while (got < nbytes) {
        ssize_t r = getrandom(raw + got, nbytes - got, 0);
        if (r > 0)
            got += (size_t)r;
    }
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
}

int util_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int is_separator(char c)
{
    return c == ' ' || c == '\t' || c == ',';
}

int util_next_word(const char **p, const char **word, size_t *len)
{
    const char *s = *p;
    while (is_separator(*s))
        s++;
    if (!*s) {
        *p = s;
        return 0;
    }
    *word = s;
    while (*s && !is_separator(*s))
        s++;
    *len = (size_t)(s - *word);
    *p = s;
    return 1;
}

char *util_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

void *util_shared_alloc(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void util_shared_free(void *p, size_t n)
{
    if (p)
        munmap(p, n);
}
