/* tz: reads TZif files (RFC 8536 / tzfile(5), versions 1 to 4) and the
 * POSIX TZ string in their footer, and answers offset questions about them.
 *
 * A loaded zone is reduced to what offset arithmetic needs: the instants at
 * which the UTC offset changes (transitions that only rename a zone or flip
 * its DST flag are dropped), the offset before the first one, and the
 * footer rule, which governs every instant from the file's last transition
 * on. Files may be "slim" (few transitions, the footer doing the rest) or
 * "fat" (transitions written out to 2037); both read the same. */
#include "sched/tz.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TZ_DEFAULT_DIR "/usr/share/zoneinfo"
/* Real zone files are a few KiB; anything this big is not one. */
#define TZ_FILE_MAX (256 * 1024)
/* RFC 8536 keeps offsets within -25:59:59 .. +25:59:59; a wall clock is
 * never further than this from UTC, which bounds every search below. */
#define TZ_OFF_MAX (26 * 3600)
/* Instants are clamped here so that years, days and seconds computed from
 * them stay far inside int64. */
#define TZ_T_LIMIT ((int64_t)1 << 56)

/* One date of a POSIX TZ rule: when DST starts or ends in a given year. */
typedef struct {
    char kind;    /* 'J': Jn (1-365, Feb 29 never counted), 'D': n (0-365), 'M': Mm.w.d */
    int day;      /* J, D: the day number; M: the weekday, 0 Sunday */
    int week;     /* M: 1-5, 5 meaning the last such weekday of the month */
    int month;    /* M: 1-12 */
    int32_t time; /* seconds after local midnight, -167h..167h (RFC 8536 extension) */
} tz_rule_date;

/* A POSIX TZ string such as "CET-1CEST,M3.5.0,M10.5.0/3". */
typedef struct {
    int32_t std_off; /* seconds east of UTC (POSIX writes them west-positive) */
    int32_t dst_off;
    int has_dst; /* 0: std_off all year */
    tz_rule_date start, end;
} tz_posix;

struct dq_tz {
    char name[TZ_NAME_MAX + 1];
    size_t n;       /* transitions; each changes the offset */
    int64_t *times; /* ascending */
    int32_t *offs;  /* offs[i]: the offset from times[i] on */
    int32_t off0;   /* before times[0] (time type 0, as RFC 8536 says) */
    int has_rule;   /* the footer governs instants >= rule_from */
    int64_t rule_from;
    tz_posix rule;
};

/* ---------------------------------------------------------------- civil dates */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int tz_month_days(int64_t y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Counts in 400-year eras starting on March 1, so that the leap day is the
 * last day of its "year" and month lengths follow a fixed 153-day pattern
 * (31 30 31 30 31 for March-July, again for August-December). An era is
 * always 146097 days. */
int64_t tz_days_from_civil(int64_t y, int m, int d)
{
    if (m <= 2)
        y--;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;              /* 0..399 */
    int64_t mp = m > 2 ? m - 3 : m + 9;       /* March 0 .. February 11 */
    int64_t doy = (153 * mp + 2) / 5 + d - 1; /* 0..365 */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468; /* 719468: 0000-03-01 to 1970-01-01 */
}

void tz_civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    int64_t z = days + 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097; /* 0..146096 */
    /* Years of the era: remove the leap days so a year is 365 days. */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

int tz_weekday(int64_t days)
{
    /* 1970-01-01 was a Thursday. */
    int64_t r = (days + 4) % 7;
    return (int)(r < 0 ? r + 7 : r);
}

/* ---------------------------------------------------------------- POSIX TZ rule */

/* The instant a rule date falls on in `year`; off is the offset in effect
 * just before it (the rule's times are local wall-clock times). */
static int64_t rule_instant(const tz_rule_date *r, int64_t year, int32_t off)
{
    int64_t days = tz_days_from_civil(year, 1, 1);
    switch (r->kind) {
    case 'J':
        days += r->day - 1 + (is_leap(year) && r->day >= 60);
        break;
    case 'D':
        days += r->day;
        break;
    default: {
        int64_t first = tz_days_from_civil(year, r->month, 1);
        int d = (r->day - tz_weekday(first) + 7) % 7 + (r->week - 1) * 7;
        while (d >= tz_month_days(year, r->month))
            d -= 7; /* week 5: the last one */
        days = first + d;
    }
    }
    return days * 86400 + r->time - off;
}

/* Offsets and rule times share this parser: [+-]hh[:mm[:ss]] with hours
 * up to max_hours. Returns seconds, sign as written, or -1 on bad text. */
static int parse_hms(const char **sp, int max_hours, int32_t *out)
{
    const char *s = *sp;
    int sign = 1;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    int32_t part[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        if (i > 0) {
            if (*s != ':')
                break;
            s++;
        }
        if (*s < '0' || *s > '9')
            return -1;
        int v = 0, digits = 0;
        while (*s >= '0' && *s <= '9' && digits < 4) {
            v = v * 10 + (*s++ - '0');
            digits++;
        }
        if (*s >= '0' && *s <= '9')
            return -1;
        if ((i == 0 && v > max_hours) || (i > 0 && v > 59))
            return -1;
        part[i] = v;
    }
    *out = sign * (part[0] * 3600 + part[1] * 60 + part[2]);
    *sp = s;
    return 0;
}

/* A zone abbreviation: 3+ letters, or <...> of letters, digits, + and -. */
static int parse_abbr(const char **sp)
{
    const char *s = *sp;
    size_t n = 0;
    if (*s == '<') {
        s++;
        while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
               *s == '+' || *s == '-') {
            s++;
            n++;
        }
        if (*s != '>' || n == 0)
            return -1;
        s++;
    } else {
        while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')) {
            s++;
            n++;
        }
        if (n < 3)
            return -1;
    }
    *sp = s;
    return 0;
}

/* Plain decimal digits (no sign, no blanks), at most 3 of them, within
 * lo..hi. */
static int parse_small(const char **sp, int lo, int hi, int *out)
{
    const char *s = *sp;
    int v = 0, digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 4) {
        v = v * 10 + (*s++ - '0');
        digits++;
    }
    if (digits == 0 || digits > 3 || v < lo || v > hi)
        return -1;
    *out = v;
    *sp = s;
    return 0;
}

static int parse_rule_date(const char **sp, tz_rule_date *r)
{
    const char *s = *sp;
    memset(r, 0, sizeof *r);
    if (*s == 'M') {
        s++;
        r->kind = 'M';
        if (parse_small(&s, 1, 12, &r->month) < 0 || *s++ != '.' || parse_small(&s, 1, 5, &r->week) < 0 ||
            *s++ != '.' || parse_small(&s, 0, 6, &r->day) < 0)
            return -1;
    } else if (*s == 'J') {
        s++;
        r->kind = 'J';
        if (parse_small(&s, 1, 365, &r->day) < 0)
            return -1;
    } else {
        r->kind = 'D';
        if (parse_small(&s, 0, 365, &r->day) < 0)
            return -1;
    }
    r->time = 2 * 3600;
    if (*s == '/') {
        s++;
        if (parse_hms(&s, 167, &r->time) < 0)
            return -1;
    }
    *sp = s;
    return 0;
}

/* Parses a footer such as "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0". */
static int parse_posix(const char *s, tz_posix *p)
{
    int32_t west;
    memset(p, 0, sizeof *p);
    if (parse_abbr(&s) < 0 || parse_hms(&s, 24, &west) < 0)
        return -1;
    p->std_off = -west;
    if (*s == '\0')
        return 0;
    if (parse_abbr(&s) < 0)
        return -1;
    p->dst_off = p->std_off + 3600;
    if (*s != ',' && *s != '\0') {
        if (parse_hms(&s, 24, &west) < 0)
            return -1;
        p->dst_off = -west;
    }
    if (*s == '\0') {
        /* DST without dates: POSIX leaves it to the implementation; zic
         * never writes it, and the usual choice is the US rule. */
        const char *us = "M3.2.0,M11.1.0";
        if (parse_rule_date(&us, &p->start) < 0 || *us++ != ',' || parse_rule_date(&us, &p->end) < 0)
            return -1;
    } else {
        s++; /* ',' */
        if (parse_rule_date(&s, &p->start) < 0 || *s++ != ',' || parse_rule_date(&s, &p->end) < 0 ||
            *s != '\0')
            return -1;
    }
    p->has_dst = p->std_off != p->dst_off;
    return 0;
}

/* The latest rule event at or before t: returns 1 if it starts DST, 0 if it
 * ends it. Events of a year lie within about a week of it, so the two years
 * before and the year after cover t. At equal instants a start wins, which
 * makes year-round DST ("...,0/0,J365/25") read as DST throughout. */
static int rule_in_dst(const tz_posix *p, int64_t t)
{
    int64_t y;
    int m, d;
    tz_civil_from_days(floor_div(t, 86400), &y, &m, &d);
    int64_t best = INT64_MIN;
    int dst = 0;
    for (int64_t yy = y - 2; yy <= y + 1; yy++) {
        int64_t end = rule_instant(&p->end, yy, p->dst_off);
        int64_t start = rule_instant(&p->start, yy, p->std_off);
        if (end <= t && end >= best) {
            best = end;
            dst = 0;
        }
        if (start <= t && start >= best) {
            best = start;
            dst = 1;
        }
    }
    return dst;
}

static int32_t rule_offset(const tz_posix *p, int64_t t)
{
    if (!p->has_dst)
        return p->std_off;
    return rule_in_dst(p, t) ? p->dst_off : p->std_off;
}

/* The first rule event after t, into *at; -1 if the rule has none. */
static int rule_next_event(const tz_posix *p, int64_t t, int64_t *at)
{
    if (!p->has_dst)
        return -1;
    int64_t y;
    int m, d;
    tz_civil_from_days(floor_div(t, 86400), &y, &m, &d);
    int64_t best = INT64_MAX;
    for (int64_t yy = y - 1; yy <= y + 2; yy++) {
        int64_t ev[2] = {rule_instant(&p->start, yy, p->std_off), rule_instant(&p->end, yy, p->dst_off)};
        for (int i = 0; i < 2; i++) {
            if (ev[i] > t && ev[i] < best)
                best = ev[i];
        }
    }
    *at = best;
    return 0;
}

/* ---------------------------------------------------------------- offsets */

static int64_t clamp_t(int64_t t)
{
    return t > TZ_T_LIMIT ? TZ_T_LIMIT : t < -TZ_T_LIMIT ? -TZ_T_LIMIT : t;
}

/* How many transitions are at or before t (the index of the first one
 * after it). */
static size_t transitions_upto(const dq_tz *tz, int64_t t)
{
    size_t lo = 0, hi = tz->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tz->times[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int tz_offset(const dq_tz *tz, int64_t unix_s)
{
    int64_t t = clamp_t(unix_s);
    if (tz->has_rule && t >= tz->rule_from)
        return rule_offset(&tz->rule, t);
    size_t lo = transitions_upto(tz, t);
    return lo == 0 ? tz->off0 : tz->offs[lo - 1];
}

/* The first instant after t at which the offset changes, into *at; -1 if
 * it never changes again. */
static int next_change(const dq_tz *tz, int64_t t, int64_t *at)
{
    if (!tz->has_rule || t < tz->rule_from) {
        size_t lo = transitions_upto(tz, t);
        if (lo < tz->n) {
            *at = tz->times[lo];
            return 0;
        }
        if (!tz->has_rule)
            return -1;
        /* A footer that disagrees with the last transition takes over at
         * rule_from; RFC 8536 forbids it, but it would still be a change. */
        if (tz->rule_from > t && tz_offset(tz, tz->rule_from - 1) != tz_offset(tz, tz->rule_from)) {
            *at = tz->rule_from;
            return 0;
        }
    }
    int64_t from = t > tz->rule_from ? t : tz->rule_from;
    /* Events that change nothing (a rule whose DST never ends) are
     * skipped; a few rounds are plenty for any real rule. */
    for (int i = 0; i < 8; i++) {
        int64_t ev;
        if (from >= TZ_T_LIMIT || rule_next_event(&tz->rule, from, &ev) < 0)
            return -1;
        if (rule_offset(&tz->rule, ev) != rule_offset(&tz->rule, ev - 1)) {
            *at = ev;
            return 0;
        }
        from = ev;
    }
    return -1;
}

/* Every instant u with u + offset(u) == local lies within TZ_OFF_MAX of
 * local, so walking the stretches of constant offset across that window
 * finds all of them; each stretch [s, e) with offset o holds at most one,
 * local - o. A local time with none fell into a gap: the change that jumped
 * over it is the one whose wall clock went from below to above it. */
int tz_local_to_utc(const dq_tz *tz, int64_t local_s, int64_t *first, int64_t *second)
{
    int64_t local = clamp_t(local_s);
    int64_t s = local - TZ_OFF_MAX - 1, limit = local + TZ_OFF_MAX;
    int32_t o = tz_offset(tz, s);
    int found = 0;
    int64_t gap_end = 0;
    int have_gap = 0;
    for (;;) {
        int64_t e;
        if (next_change(tz, s, &e) < 0 || e > limit + 1)
            e = limit + 1;
        int64_t u = local - o;
        if (u >= s && u < e) {
            if (found == 0)
                *first = u;
            else if (found == 1)
                *second = u;
            found++;
        }
        if (e > limit)
            break;
        int32_t next_o = tz_offset(tz, e);
        if (!have_gap && e + o <= local && local < e + next_o) {
            gap_end = e;
            have_gap = 1;
        }
        s = e;
        o = next_o;
    }
    if (found > 0)
        return found > 2 ? 2 : found;
    /* Unreachable with offsets inside TZ_OFF_MAX; local - o is a sane answer. */
    *first = have_gap ? gap_end : local - o;
    return 0;
}

/* ---------------------------------------------------------------- loading */

const char *tz_name(const dq_tz *tz)
{
    return tz->name;
}

void tz_free(dq_tz *tz)
{
    if (!tz)
        return;
    free(tz->times);
    free(tz->offs);
    free(tz);
}

static int name_ok(const char *name, char *err, size_t errlen)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0) {
        snprintf(err, errlen, "time zone name is empty");
        return -1;
    }
    if (n > TZ_NAME_MAX) {
        snprintf(err, errlen, "time zone name is longer than %d bytes", TZ_NAME_MAX);
        return -1;
    }
    /* The characters first: the messages below quote the name, and without
     * '.' no name can climb out of the zone directory. */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '/' ||
              c == '_' || c == '+' || c == '-')) {
            snprintf(err, errlen,
                     "time zone name has byte 0x%02x at offset %zu; use letters, digits, '/', '_', '+' and '-'",
                     (unsigned char)c, i);
            return -1;
        }
    }
    if (name[0] == '/') {
        snprintf(err, errlen, "time zone name '%s' is an absolute path; use a zone name such as Europe/Berlin",
                 name);
        return -1;
    }
    if (name[n - 1] == '/' || strstr(name, "//")) {
        snprintf(err, errlen, "time zone name '%s' has an empty path component", name);
        return -1;
    }
    return 0;
}

static int64_t be32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static int64_t be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

typedef struct {
    uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts;

static size_t tzif_block_size(const tzif_counts *c, size_t tsize)
{
    return c->time * tsize + c->time + c->type * 6 + c->chars + c->leap * (tsize + 4) + c->isstd + c->isut;
}

static int tzif_header(const unsigned char *p, size_t len, tzif_counts *c)
{
    if (len < 44 || memcmp(p, "TZif", 4) != 0)
        return -1;
    uint32_t v[6];
    for (int i = 0; i < 6; i++)
        v[i] = (uint32_t)be32(p + 20 + 4 * i);
    c->isut = v[0];
    c->isstd = v[1];
    c->leap = v[2];
    c->time = v[3];
    c->type = v[4];
    c->chars = v[5];
    /* Bounds a real file never reaches keep the size sums below small. */
    if (c->type == 0 || c->type > 256 || c->time > 100000 || c->chars > 10000 || c->leap > 10000 ||
        (c->isut != 0 && c->isut != c->type) || (c->isstd != 0 && c->isstd != c->type))
        return -1;
    return 0;
}

/* The data block a parser reads: version 1's (tsize 4), or for version 2+
 * the one after it (tsize 8), with c its counts. */
typedef struct {
    tzif_counts c;
    size_t tsize;
    const unsigned char *p; /* the block, then the footer at p + need */
    size_t left, need;      /* bytes from p; the block's size */
} tzif_block;

static int tzif_locate(tzif_block *b, const unsigned char *file, size_t len, char *why,
                       size_t whylen)
{
    if (tzif_header(file, len, &b->c) < 0) {
        snprintf(why, whylen, "not a TZif file");
        return -1;
    }
    unsigned char version = file[4];
    b->tsize = 4;
    b->p = file + 44;
    b->left = len - 44;
    if (version >= '2') {
        size_t skip = tzif_block_size(&b->c, 4);
        if (b->left < skip || tzif_header(b->p + skip, b->left - skip, &b->c) < 0) {
            snprintf(why, whylen, "truncated or damaged");
            return -1;
        }
        b->p += skip + 44;
        b->left -= skip + 44;
        b->tsize = 8;
    } else if (version != 0) {
        snprintf(why, whylen, "unknown TZif version");
        return -1;
    }
    if (b->c.leap > 0) {
        snprintf(why, whylen, "it counts leap seconds (use the zone without right/)");
        return -1;
    }
    b->need = tzif_block_size(&b->c, b->tsize);
    if (b->left < b->need) {
        snprintf(why, whylen, "truncated or damaged");
        return -1;
    }
    return 0;
}

/* The offset of each transition into tz (only those that change it);
 * *last gets the last transition time (INT64_MIN with none). */
static int tzif_transitions(dq_tz *tz, const tzif_block *b, int64_t *last, char *why,
                            size_t whylen)
{
    const tzif_counts *c = &b->c;
    const unsigned char *times = b->p, *idx = b->p + c->time * b->tsize, *types = idx + c->time;
    int32_t offs_by_type[256];
    for (uint32_t i = 0; i < c->type; i++) {
        int64_t off = be32(types + 6 * i);
        if (off <= -TZ_OFF_MAX || off >= TZ_OFF_MAX || types[6 * i + 4] > 1) {
            snprintf(why, whylen, "truncated or damaged");
            return -1;
        }
        offs_by_type[i] = (int32_t)off;
    }
    tz->off0 = offs_by_type[0];
    if (c->time > 0) {
        tz->times = malloc(c->time * sizeof *tz->times);
        tz->offs = malloc(c->time * sizeof *tz->offs);
        if (!tz->times || !tz->offs)
            abort();
    }
    int32_t prev = tz->off0;
    *last = INT64_MIN;
    for (uint32_t i = 0; i < c->time; i++) {
        int64_t t = b->tsize == 8 ? be64(times + 8 * i) : be32(times + 4 * i);
        if (idx[i] >= c->type || (i > 0 && t <= *last)) {
            snprintf(why, whylen, "truncated or damaged");
            return -1;
        }
        *last = t;
        int32_t off = offs_by_type[idx[i]];
        if (off != prev) { /* a change of name or DST flag alone is no change */
            tz->times[tz->n] = t;
            tz->offs[tz->n] = off;
            tz->n++;
            prev = off;
        }
    }
    return 0;
}

/* Version 2+: the footer's POSIX TZ string, the rule after the last
 * transition (none when it is empty). */
static int tzif_footer(dq_tz *tz, const tzif_block *b, int64_t last, char *why, size_t whylen)
{
    const unsigned char *f = b->p + b->need;
    size_t flen = b->left - b->need;
    const unsigned char *nl = flen > 1 ? memchr(f + 1, '\n', flen - 1) : NULL;
    if (flen < 2 || f[0] != '\n' || !nl) {
        snprintf(why, whylen, "truncated or damaged (no footer)");
        return -1;
    }
    size_t slen = (size_t)(nl - f - 1);
    if (slen == 0)
        return 0;
    char footer[128];
    if (slen >= sizeof footer) {
        snprintf(why, whylen, "its TZ string is too long");
        return -1;
    }
    memcpy(footer, f + 1, slen);
    footer[slen] = '\0';
    if (parse_posix(footer, &tz->rule) < 0 || tz->rule.std_off <= -TZ_OFF_MAX ||
        tz->rule.std_off >= TZ_OFF_MAX || tz->rule.dst_off <= -TZ_OFF_MAX ||
        tz->rule.dst_off >= TZ_OFF_MAX) {
        snprintf(why, whylen, "its TZ string '%s' is not understood", footer);
        return -1;
    }
    tz->has_rule = 1;
    tz->rule_from = b->c.time > 0 ? last : INT64_MIN;
    return 0;
}

/* Builds tz from a TZif file: its data block and, for version 2+, the
 * footer after it. */
static int tzif_parse(dq_tz *tz, const unsigned char *file, size_t len, char *why, size_t whylen)
{
    tzif_block b;
    int64_t last;
    if (tzif_locate(&b, file, len, why, whylen) < 0 ||
        tzif_transitions(tz, &b, &last, why, whylen) < 0)
        return -1;
    return b.tsize == 8 ? tzif_footer(tz, &b, last, why, whylen) : 0;
}

static unsigned char *read_file(const char *path, size_t *len, int *errnum)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *errnum = errno;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        *errnum = errno;
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > TZ_FILE_MAX) {
        /* A directory ("Europe") is not a zone; other odd files are. */
        *errnum = S_ISDIR(st.st_mode) ? ENOENT : EINVAL;
        close(fd);
        return NULL;
    }
    unsigned char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        abort();
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
}

dq_tz *tz_load(const char *name, char *err, size_t errlen)
{
    if (name_ok(name, err, errlen) < 0)
        return NULL;
    dq_tz *tz = calloc(1, sizeof *tz);
    if (!tz)
        abort();
    memcpy(tz->name, name, strlen(name) + 1);

    const char *dir = getenv("TZDIR");
    if (!dir || !*dir)
        dir = TZ_DEFAULT_DIR;
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        snprintf(err, errlen, "time zone '%s': TZDIR is too long", name);
        tz_free(tz);
        return NULL;
    }
    size_t len = 0;
    int errnum = 0;
    unsigned char *file = read_file(path, &len, &errnum);
    if (!file) {
        /* UTC is UTC with or without a tz database. */
        if (strcmp(name, "UTC") == 0)
            return tz;
        if (errnum == ENOENT || errnum == ENOTDIR)
            snprintf(err, errlen, "unknown time zone '%s' (no such zone in %s)", name, dir);
        else if (errnum == EINVAL)
            snprintf(err, errlen, "time zone '%s': %s is not a time zone file", name, path);
        else {
            char msg[128];
            if (strerror_r(errnum, msg, sizeof msg) != 0)
                snprintf(msg, sizeof msg, "error %d", errnum);
            snprintf(err, errlen, "time zone '%s': cannot read %s: %s", name, path, msg);
        }
        tz_free(tz);
        return NULL;
    }
    char why[200];
    if (tzif_parse(tz, file, len, why, sizeof why) < 0) {
        snprintf(err, errlen, "time zone '%s': %s is not a usable time zone file: %s", name, path, why);
        free(file);
        tz_free(tz);
        return NULL;
    }
    free(file);
    return tz;
}
