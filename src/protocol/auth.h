/* auth: optional bearer tokens (config key auth_file). Each token may be
 * limited to topic prefixes and to commands. Pure: parsing and checks only.
 * A request that names jobs by id cannot be checked here without a race
 * (the id may be added under another topic a moment later), so for those
 * auth_check hands the token's prefixes to the Redis function, which checks
 * the job's topic in the same atomic step as the action. */
#ifndef DQ_AUTH_H
#define DQ_AUTH_H

#include <stddef.h>

#include "common/status.h"
#include "protocol/request.h"

#define AUTH_TOKEN_MIN 16
#define AUTH_TOKEN_MAX 256
#define AUTH_MAX_PREFIXES 32
/* Room for every prefix of a token, joined by commas. */
#define AUTH_ALLOW_MAX (AUTH_MAX_PREFIXES * (DQ_TOPIC_MAX + 1) + 1)

typedef struct dq_token dq_token;
typedef struct dq_auth dq_auth;

/* Reads a tokens file: one token a line, then optional `topics=p1,p2` (topic
 * prefixes) and `commands=add,pop`; '#' lines are comments. Returns NULL with
 * err naming the line on a bad file. Owned by the caller: auth_free it. */
dq_auth *auth_load(const char *path, char *err, size_t errlen);
/* Same, from text (for tests). */
dq_auth *auth_parse(const char *text, const char *name, char *err, size_t errlen);
void auth_free(dq_auth *a);

/* The token an Authorization header value ("Bearer <token>") names, or NULL.
 * Compares against every token in constant time per token, so timing does
 * not tell how much of a guess was right. */
const dq_token *auth_find(const dq_auth *a, const char *header);
int auth_command_allowed(const dq_token *t, dq_command c);
/* 1 if the token has no topic limit or topic starts with one of its prefixes. */
int auth_topic_allowed(const dq_token *t, const char *topic);
int auth_topic_limited(const dq_token *t);

/* Decides whether a request may run with the Authorization header given
 * (NULL a: auth is off): the command's right, the rights of the fields it
 * carries (commands.def's DQ_FIELD_RIGHT), then its topics. On DQ_OK, allow gets what the Redis functions must
 * check for jobs named by id: the token's topic prefixes joined by commas,
 * or "" when there is no topic limit. Else DQ_UNAUTHORIZED with err. */
dq_status auth_check(const dq_auth *a, const char *header, const dq_request *req, char *allow,
                     size_t allowlen, char *err, size_t errlen);

#endif
