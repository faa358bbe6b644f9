/* cron: parsing five-field expressions into bitmasks, and stepping through
 * the calendar to the next local time they match, then to the instant that
 * local time fires at in a zone. */
#include "sched/cron.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* cron_next answers -1 beyond this (about a billion years), which keeps
 * all its arithmetic far inside what tz.c computes exactly. */
#define CRON_T_LIMIT ((int64_t)1 << 55)

/* ---------------------------------------------------------------- parsing */

static const char *const MONTH_NAMES[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const WDAY_NAMES[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

typedef struct {
    const char *name;
    int lo, hi;
    int step_max; /* the field's span: a larger step could only ever hit `lo` */
    const char *const *names;
    int name_base; /* value of names[0] */
    int nnames;
    const char *name_kind; /* for errors: "month name" */
} field_def;

enum { F_MINUTE, F_HOUR, F_MDAY, F_MONTH, F_WDAY, F_COUNT };

static const field_def FIELDS[F_COUNT] = {
    {"minute", 0, 59, 60, NULL, 0, 0, NULL},
    {"hour", 0, 23, 24, NULL, 0, 0, NULL},
    {"day-of-month", 1, 31, 31, NULL, 0, 0, NULL},
    {"month", 1, 12, 12, MONTH_NAMES, 1, 12, "month name"},
    {"day-of-week", 0, 7, 7, WDAY_NAMES, 0, 7, "day name"},
};

static const struct {
    const char *name;
    const char *expr;
} MACROS[] = {
    {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"},  {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* "unexpected 'x' in '5x'"; cron_parse() has refused every byte that is
 * not printable ASCII, so the item can be quoted as it is. */
static void unexpected(const field_def *f, char ch, const char *item, size_t ilen, char *err, size_t errlen)
{
    snprintf(err, errlen, "cron field '%s': unexpected '%c' in '%.*s'", f->name, ch, (int)ilen, item);
}

/* A number or (for month and day-of-week) a name, at *pp before end. */
static int parse_value(const field_def *f, const char **pp, const char *end, const char *item, size_t ilen,
                       int *out, char *err, size_t errlen)
{
    const char *p = *pp, *q = p;
    if (q < end && is_digit(*q)) {
        long v = 0;
        while (q < end && is_digit(*q)) {
            if (v < 1000000)
                v = v * 10 + (*q - '0');
            q++;
        }
        if (v < f->lo || v > f->hi) {
            snprintf(err, errlen, "cron field '%s': %.*s is out of range %d-%d", f->name, (int)(q - p), p,
                     f->lo, f->hi);
            return -1;
        }
        *out = (int)v;
    } else if (q < end && is_alpha(*q)) {
        while (q < end && is_alpha(*q))
            q++;
        int found = -1;
        for (int i = 0; i < f->nnames && q - p == 3; i++) {
            if (strncasecmp(p, f->names[i], 3) == 0)
                found = f->name_base + i;
        }
        if (found < 0) {
            if (f->names)
                snprintf(err, errlen, "cron field '%s': '%.*s' is not a number or %s", f->name, (int)(q - p),
                         p, f->name_kind);
            else
                snprintf(err, errlen, "cron field '%s': '%.*s' is not a number", f->name, (int)(q - p), p);
            return -1;
        }
        *out = found;
    } else if (q == end) {
        snprintf(err, errlen, "cron field '%s': '%.*s' is missing a number", f->name, (int)ilen, item);
        return -1;
    } else {
        unexpected(f, *q, item, ilen, err, errlen);
        return -1;
    }
    *pp = q;
    return 0;
}

/* One list item: *, a, a-b, with an optional /step. */
static int parse_item(const field_def *f, const char *item, size_t ilen, uint64_t *mask, char *err,
                      size_t errlen)
{
    const char *p = item, *end = item + ilen;
    int lo, hi, step = 1;
    int single = 0;
    if (*p == '*') {
        p++;
        lo = f->lo;
        hi = f->hi;
    } else {
        if (parse_value(f, &p, end, item, ilen, &lo, err, errlen) < 0)
            return -1;
        hi = lo;
        single = 1;
        if (p < end && *p == '-') {
            p++;
            if (parse_value(f, &p, end, item, ilen, &hi, err, errlen) < 0)
                return -1;
            single = 0;
            if (hi < lo) {
                snprintf(err, errlen, "cron field '%s': range %.*s is reversed (write the smaller value first)",
                         f->name, (int)ilen, item);
                return -1;
            }
        }
    }
    if (p < end && *p == '/') {
        p++;
        const char *s = p;
        long v = 0;
        while (p < end && is_digit(*p)) {
            if (v < 1000000)
                v = v * 10 + (*p - '0');
            p++;
        }
        if (p == s) {
            snprintf(err, errlen, "cron field '%s': step in '%.*s' is not a number", f->name, (int)ilen, item);
            return -1;
        }
        if (v == 0) {
            snprintf(err, errlen, "cron field '%s': step 0 in '%.*s' must be at least 1", f->name, (int)ilen,
                     item);
            return -1;
        }
        if (v > f->step_max) {
            snprintf(err, errlen, "cron field '%s': step %.*s is out of range 1-%d", f->name, (int)(p - s), s,
                     f->step_max);
            return -1;
        }
        step = (int)v;
        if (single) /* a/n: from a to the end of the field */
            hi = f->hi;
    }
    if (p != end) {
        unexpected(f, *p, item, ilen, err, errlen);
        return -1;
    }
    for (int v = lo; v <= hi; v += step)
        *mask |= (uint64_t)1 << v;
    return 0;
}

static int parse_field(const field_def *f, const char *s, size_t len, uint64_t *mask, char *err,
                       size_t errlen)
{
    *mask = 0;
    const char *end = s + len;
    for (const char *item = s;;) {
        const char *comma = memchr(item, ',', (size_t)(end - item));
        const char *iend = comma ? comma : end;
        if (iend == item) {
            snprintf(err, errlen, "cron field '%s': empty list item in '%.*s'", f->name, (int)len, s);
            return -1;
        }
        if (parse_item(f, item, (size_t)(iend - item), mask, err, errlen) < 0)
            return -1;
        if (!comma)
            return 0;
        item = comma + 1;
    }
}

static int parse_fields(const char *expr, dq_cron *out, char *err, size_t errlen)
{
    const char *start[F_COUNT + 1];
    size_t len[F_COUNT + 1];
    int n = 0;
    for (const char *p = expr; *p;) {
        while (is_blank(*p))
            p++;
        if (!*p)
            break;
        const char *s = p;
        while (*p && !is_blank(*p))
            p++;
        if (n <= F_COUNT) {
            start[n] = s;
            len[n] = (size_t)(p - s);
        }
        n++;
    }
    if (n == 0) {
        snprintf(err, errlen, "cron expression is empty");
        return -1;
    }
    if (n != F_COUNT) {
        snprintf(err, errlen,
                 "cron expression has %d field%s; it needs 5 (minute hour day-of-month month day-of-week)", n,
                 n == 1 ? "" : "s");
        return -1;
    }
    uint64_t mask[F_COUNT];
    for (int i = 0; i < F_COUNT; i++) {
        if (parse_field(&FIELDS[i], start[i], len[i], &mask[i], err, errlen) < 0)
            return -1;
    }
    memset(out, 0, sizeof *out);
    out->minutes = mask[F_MINUTE];
    out->hours = (uint32_t)mask[F_HOUR];
    out->mdays = (uint32_t)mask[F_MDAY];
    out->months = (uint16_t)mask[F_MONTH];
    /* 7 is Sunday too. */
    out->wdays = (uint8_t)((mask[F_WDAY] | mask[F_WDAY] >> 7) & 0x7f);
    out->mday_star = start[F_MDAY][0] == '*';
    out->wday_star = start[F_WDAY][0] == '*';
    return 0;
}

int cron_parse(const char *expr, dq_cron *out, char *err, size_t errlen)
{
    if (!expr) {
        snprintf(err, errlen, "cron expression is empty");
        return -1;
    }
    if (strnlen(expr, CRON_EXPR_MAX + 1) > CRON_EXPR_MAX) {
        snprintf(err, errlen, "cron expression is longer than %d bytes", CRON_EXPR_MAX);
        return -1;
    }
    /* Refused before anything echoes the text: an error message quotes it. */
    for (const char *c = expr; *c; c++) {
        if (!is_blank(*c) && (*c < ' ' || *c > '~')) {
            snprintf(err, errlen, "cron expression has byte 0x%02x at offset %d; only printable ASCII is allowed",
                     (unsigned char)*c, (int)(c - expr));
            return -1;
        }
    }
    const char *p = expr;
    while (is_blank(*p))
        p++;
    if (*p != '@')
        return parse_fields(expr, out, err, errlen);

    const char *e = p;
    while (*e && !is_blank(*e))
        e++;
    size_t n = (size_t)(e - p);
    const char *rest = e;
    while (is_blank(*rest))
        rest++;
    for (size_t i = 0; i < sizeof MACROS / sizeof MACROS[0]; i++) {
        if (strlen(MACROS[i].name) == n && strncasecmp(p, MACROS[i].name, n) == 0) {
            if (*rest) {
                snprintf(err, errlen, "cron macro '%.*s' takes nothing after it (found '%s')", (int)n, p, rest);
                return -1;
            }
            return parse_fields(MACROS[i].expr, out, err, errlen);
        }
    }
    snprintf(err, errlen,
             "unknown cron macro '%.*s' (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or "
             "@hourly)",
             (int)n, p);
    return -1;
}

/* ---------------------------------------------------------------- matching */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* The smallest v in from..max whose bit is set, or -1. */
static int next_bit(uint64_t mask, int from, int max)
{
    if (from > max)
        return -1;
    uint64_t m = mask >> from;
    if (!m)
        return -1;
    int v = from + __builtin_ctzll(m);
    return v <= max ? v : -1;
}

static int day_matches(const dq_cron *c, int mday, int wday)
{
    int dom = (int)(c->mdays >> mday & 1), dow = (int)(c->wdays >> wday & 1);
    if (c->mday_star || c->wday_star)
        return dom && dow;
    return dom || dow;
}

int cron_matches(const dq_cron *c, int64_t local_s)
{
    int64_t days = floor_div(local_s, 86400);
    int64_t secs = local_s - days * 86400;
    int64_t y;
    int m, d;
    tz_civil_from_days(days, &y, &m, &d);
    return (c->months >> m & 1) && day_matches(c, d, tz_weekday(days)) && (c->hours >> (secs / 3600) & 1) &&
           (c->minutes >> (secs % 3600 / 60) & 1);
}

/* The first matching local time at or after `from` (a whole minute) into
 * *out; -1 if it falls after day number last_day. Skips whole months, days
 * and hours that cannot match, so a rare expression ("0 0 29 2 *") costs a
 * few hundred steps over 8 years, not millions. */
static int next_local(const dq_cron *c, int64_t from, int64_t last_day, int64_t *out)
{
    int64_t days = floor_div(from, 86400);
    int64_t secs = from - days * 86400;
    int h = (int)(secs / 3600), mi = (int)(secs % 3600 / 60);
    int64_t y;
    int m, d;
    tz_civil_from_days(days, &y, &m, &d);
    while (days <= last_day) {
        if (!(c->months >> m & 1)) {
            int nm = next_bit(c->months, m + 1, 12);
            if (nm < 0) {
                y++;
                nm = next_bit(c->months, 1, 12);
            }
            m = nm;
            d = 1;
            h = mi = 0;
            days = tz_days_from_civil(y, m, 1);
            continue;
        }
        if (day_matches(c, d, tz_weekday(days))) {
            int nh = next_bit(c->hours, h, 23);
            if (nh >= 0) {
                if (nh != h)
                    mi = 0;
                int nmi = next_bit(c->minutes, mi, 59);
                if (nmi >= 0) {
                    *out = days * 86400 + nh * 3600 + nmi * 60;
                    return 0;
                }
                if (nh < 23) {
                    h = nh + 1;
                    mi = 0;
                    continue;
                }
            }
        }
        /* On to the next day. */
        days++;
        h = mi = 0;
        if (++d > tz_month_days(y, m)) {
            d = 1;
            if (++m > 12) {
                m = 1;
                y++;
            }
        }
    }
    return -1;
}

/* ---------------------------------------------------------------- firing */

int64_t cron_next(const dq_cron *c, const dq_tz *tz, int64_t after)
{
    if (after < -CRON_T_LIMIT || after > CRON_T_LIMIT)
        return -1;
    int64_t local_after = after + (tz ? tz_offset(tz, after) : 0);
    int64_t last_day = floor_div(local_after, 86400) + CRON_HORIZON_DAYS;
    /* Fire instants never decrease as local times increase (a gap's times
     * share its end; a repeated time fires at its first occurrence), so the
     * answer is the first matching local time from the minute `after` is
     * in whose fire instant lies after `after`. Only the times of a
     * fall-back overlap that `after` has passed the first time round are
     * stepped over here. */
    int64_t from = floor_div(local_after, 60) * 60;
    for (;;) {
        int64_t local;
        if (next_local(c, from, last_day, &local) < 0)
            return -1;
        int64_t first = local, second;
        if (tz)
            tz_local_to_utc(tz, local, &first, &second);
        if (first > after)
            return first;
        from = local + 60;
    }
}

int cron_upcoming(const dq_cron *c, const dq_tz *tz, int64_t after, int64_t *out, int n)
{
    int found = 0;
    while (found < n) {
        int64_t t = cron_next(c, tz, after);
        if (t < 0)
            break;
        out[found++] = t;
        after = t;
    }
    return found;
}
