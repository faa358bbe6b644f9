/* store_errors: what an error from Redis means for the client, in one
 * place. delayq's functions answer errors as "DQ_<CODE> <detail>" (and the
 * items of a batch reply use the same words); Redis' own errors are sorted
 * into "the command had no effect" (503 unavailable) and bugs (500). Pure. */
#ifndef DQ_STORE_ERRORS_H
#define DQ_STORE_ERRORS_H

#include <stddef.h>

#include "common/status.h"

/* Maps an error text (as Redis sent it, "ERR " prefix or not) to a status
 * and copies the detail after the code into detail ("reserved" for
 * "DQ_CONFLICT reserved"; Redis' own message for its errors). "ok" maps to
 * DQ_OK. Unknown errors are DQ_INTERNAL. */
dq_status store_error_status(const char *msg, size_t len, char *detail, size_t detail_len);

/* 1 if a Redis error means the command was refused before it ran. */
int store_error_no_effect(const char *msg, size_t len);

/* 1 if a function refused to run on data of another stored layout
 * (DQ_LAYOUT_OLD, DQ_LAYOUT_NEW): DQ_UNAVAILABLE, with a detail that says
 * what to do. */
int store_error_is_layout(const char *msg, size_t len);

/* 1 if the error is Redis refusing the credentials (NOAUTH, WRONGPASS). */
int store_error_is_auth(const char *msg, size_t len);

#endif
