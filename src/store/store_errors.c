/* store_errors: error vocabulary of the functions and of Redis (see
 * store_errors.h). */
#include "store/store_errors.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *code;
    dq_status status;
} codes[] = {
    {"DQ_NOT_FOUND", DQ_NOT_FOUND},
    {"DQ_CONFLICT", DQ_CONFLICT},
    {"DQ_LAYOUT", DQ_MISCONFIGURED}, /* detail: the deployment's bucket and shard counts */
};

/* A shard whose data is of another stored layout (layout_refused in
 * lib/95-layout.lua; detail: "<found> <known>"): nothing ran, and nothing will
 * until the data is migrated (older) or the newer release runs. */
static const char *const layout_codes[] = {"DQ_LAYOUT_OLD", "DQ_LAYOUT_NEW"};

/* Errors Redis answers without running the command. */
static const char *const no_effect[] = {"LOADING",  "READONLY", "MASTERDOWN", "BUSY",
                                        "NOAUTH",   "WRONGPASS", "NOPERM",    "OOM",
                                        "MISCONF",  "CLUSTERDOWN", "TRYAGAIN"};

static int starts_with(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    return n >= w && memcmp(s, word, w) == 0 && (n == w || s[w] == ' ');
}

/* Drops the "ERR " Redis puts in front of an error without a code. */
static void strip_err(const char **msg, size_t *len)
{
    if (*len > 4 && memcmp(*msg, "ERR ", 4) == 0) {
        *msg += 4;
        *len -= 4;
    }
}

int store_error_no_effect(const char *msg, size_t len)
{
    for (size_t i = 0; i < sizeof no_effect / sizeof no_effect[0]; i++) {
        if (starts_with(msg, len, no_effect[i]))
            return 1;
    }
    return 0;
}

int store_error_is_auth(const char *msg, size_t len)
{
    strip_err(&msg, &len);
    return starts_with(msg, len, "NOAUTH") || starts_with(msg, len, "WRONGPASS");
}

static void copy_detail(char *detail, size_t detail_len, const char *s, size_t n)
{
    if (!detail_len)
        return;
    if (n >= detail_len)
        n = detail_len - 1;
    memcpy(detail, s, n);
    detail[n] = '\0';
}

int store_error_is_layout(const char *msg, size_t len)
{
    strip_err(&msg, &len);
    return starts_with(msg, len, layout_codes[0]) || starts_with(msg, len, layout_codes[1]);
}

/* The sentence for a layout error: what the data is and what to do. */
static void layout_sentence(const char *msg, size_t len, char *detail, size_t detail_len)
{
    int found = 0, known = 0;
    char text[64];
    copy_detail(text, sizeof text, msg, len);
    if (sscanf(text, "DQ_LAYOUT_%*s %d %d", &found, &known) != 2 || !detail_len)
        return;
    if (found < known)
        snprintf(detail, detail_len, "its delayq data is of stored layout %d, this delayq's is %d: "
                 "run 'delayq-fcgi --migrate' first", found, known);
    else
        snprintf(detail, detail_len, "its delayq data is of stored layout %d, newer than this "
                 "delayq's (%d): run the release that wrote it", found, known);
}

dq_status store_error_status(const char *msg, size_t len, char *detail, size_t detail_len)
{
    copy_detail(detail, detail_len, "", 0);
    if (len == 2 && memcmp(msg, "ok", 2) == 0)
        return DQ_OK;
    if (store_error_no_effect(msg, len)) {
        copy_detail(detail, detail_len, msg, len);
        return DQ_UNAVAILABLE;
    }
    strip_err(&msg, &len);
    if (store_error_is_layout(msg, len)) {
        layout_sentence(msg, len, detail, detail_len);
        return DQ_UNAVAILABLE;
    }
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        if (starts_with(msg, len, codes[i].code)) {
            size_t c = strlen(codes[i].code);
            if (len > c + 1)
                copy_detail(detail, detail_len, msg + c + 1, len - c - 1);
            return codes[i].status;
        }
    }
    copy_detail(detail, detail_len, msg, len);
    return DQ_INTERNAL;
}
