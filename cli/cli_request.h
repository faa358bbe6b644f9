/* cli_request: builds the JSON body of a request from the command line's
 * flags. Checks only what the server cannot check for us (a --delay that is
 * not a number would make the whole body invalid JSON); ranges and
 * identifiers are left to the server, so the rules live in one place. */
#ifndef DQ_CLI_REQUEST_H
#define DQ_CLI_REQUEST_H

#include <stddef.h>

#include "cli_args.h"
#include "common/buf.h"

/* Appends the request object for the flags in a (every field flag given)
 * to out, reading --body-file / --body-string-file ("-" is stdin). Returns 0,
 * or -1 with a sentence in err naming the flag. */
int cli_request_build(const cli_args *a, dq_buf *out, char *err, size_t errlen);

#endif
