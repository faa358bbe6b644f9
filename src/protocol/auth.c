/* auth: tokens file parsing and constant-time token lookup. */
#include "protocol/auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"


struct dq_token {
    char secret[AUTH_TOKEN_MAX + 1];
    size_t len;
    int all_commands;
    int commands[CMD_COUNT];
    int nprefixes; /* 0: every topic */
    char prefixes[AUTH_MAX_PREFIXES][DQ_TOPIC_MAX + 1];
};

struct dq_auth {
    dq_token *tokens;
    size_t n;
};

void auth_free(dq_auth *a)
{
    if (!a)
        return;
    free(a->tokens);
    free(a);
}

/* The command whose right a command needs: purge is granted with delete
 * (CMDF_DELETE_RIGHT), every other command by its own name. */
static dq_command right_of(dq_command c)
{
    return c < CMD_COUNT && (command_flags(c) & CMDF_DELETE_RIGHT) ? CMD_DELETE : c;
}

/* Returns 0, -1 for an unknown name, or -2 for a command that comes with
 * another's right (it is not listed on its own). */
static int parse_commands(dq_token *t, char *list)
{
    for (char *save = NULL, *c = strtok_r(list, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        dq_command cmd = command_from_name(c, strlen(c));
        if (cmd == CMD_COUNT)
            return -1;
        if (right_of(cmd) != cmd)
            return -2;
        t->commands[cmd] = 1;
    }
    t->all_commands = 0;
    return 0;
}

static int parse_topics(dq_token *t, char *list)
{
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(p);
        if (t->nprefixes == AUTH_MAX_PREFIXES || n > DQ_TOPIC_MAX || !request_topic_valid(p, n))
            return -1;
        memcpy(t->prefixes[t->nprefixes++], p, n + 1);
    }
    return t->nprefixes ? 0 : -1;
}

/* Parses one non-comment line into t; returns 0 or -1 with err. */
static int parse_line(char *line, dq_token *t, const char *where, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->all_commands = 1;
    char *save = NULL;
    char *secret = strtok_r(line, " \t", &save);
    size_t n = strlen(secret);
    if (n < AUTH_TOKEN_MIN || n > AUTH_TOKEN_MAX) {
        snprintf(err, errlen, "%s: a token must be %d to %d characters", where, AUTH_TOKEN_MIN,
                 AUTH_TOKEN_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isgraph((unsigned char)secret[i])) {
            snprintf(err, errlen, "%s: a token must be printable ASCII without spaces", where);
            return -1;
        }
    }
    memcpy(t->secret, secret, n + 1);
    t->len = n;
    for (char *opt = strtok_r(NULL, " \t", &save); opt; opt = strtok_r(NULL, " \t", &save)) {
        if (strncmp(opt, "topics=", 7) == 0) {
            if (parse_topics(t, opt + 7) < 0) {
                snprintf(err, errlen, "%s: topics= needs 1 to %d valid topic prefixes", where,
                         AUTH_MAX_PREFIXES);
                return -1;
            }
        } else if (strncmp(opt, "commands=", 9) == 0) {
            int r = parse_commands(t, opt + 9);
            if (r == -2) {
                snprintf(err, errlen, "%s: commands= grants purge with delete; list delete", where);
                return -1;
            }
            if (r < 0) {
                snprintf(err, errlen, "%s: commands= needs command names such as add,pop", where);
                return -1;
            }
        } else {
            snprintf(err, errlen, "%s: unknown option '%.32s' (use topics= or commands=)", where, opt);
            return -1;
        }
    }
    return 0;
}

dq_auth *auth_parse(const char *text, const char *name, char *err, size_t errlen)
{
    dq_auth *a = util_xcalloc(1, sizeof *a);
    char *copy = util_xstrdup(text);
    int lineno = 0;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        while (isspace((unsigned char)*line))
            line++;
        size_t len = strlen(line);
        while (len && isspace((unsigned char)line[len - 1]))
            line[--len] = '\0';
        if (!*line || *line == '#')
            continue;
        dq_token *grown = util_xrealloc(a->tokens, (a->n + 1) * sizeof *grown);
        a->tokens = grown;
        char where[300];
        snprintf(where, sizeof where, "%s: token %zu", name, a->n + 1);
        if (parse_line(line, &a->tokens[a->n], where, err, errlen) < 0) {
            free(copy);
            auth_free(a);
            return NULL;
        }
        a->n++;
    }
    free(copy);
    if (a->n == 0) {
        snprintf(err, errlen, "%s: no tokens (remove auth_file to turn auth off)", name);
        auth_free(a);
        return NULL;
    }
    return a;
}

dq_auth *auth_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "config key 'auth_file': cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t cap = 0, len = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            text = util_xrealloc(text, cap);
        }
        memcpy(text + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!text) {
        snprintf(err, errlen, "%s: no tokens (remove auth_file to turn auth off)", path);
        return NULL;
    }
    text[len] = '\0';
    dq_auth *a = auth_parse(text, path, err, errlen);
    free(text);
    return a;
}

/* Constant time for a given secret length: every byte of the secret is
 * looked at whatever the guess is. */
static int secret_equal(const dq_token *t, const char *guess, size_t glen)
{
    unsigned char diff = (unsigned char)(t->len != glen);
    for (size_t i = 0; i < t->len; i++) {
        unsigned char g = i < glen ? (unsigned char)guess[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)t->secret[i]);
    }
    return diff == 0;
}

const dq_token *auth_find(const dq_auth *a, const char *header)
{
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return NULL;
    const char *guess = header + 7;
    while (*guess == ' ')
        guess++;
    size_t glen = strlen(guess);
    const dq_token *found = NULL;
    for (size_t i = 0; i < a->n; i++) {
        if (secret_equal(&a->tokens[i], guess, glen) && !found)
            found = &a->tokens[i];
    }
    return found;
}

int auth_command_allowed(const dq_token *t, dq_command c)
{
    c = right_of(c);
    return t->all_commands || (c < CMD_COUNT && t->commands[c]);
}

int auth_topic_limited(const dq_token *t)
{
    return t->nprefixes > 0;
}

int auth_topic_allowed(const dq_token *t, const char *topic)
{
    if (!t->nprefixes)
        return 1;
    for (int i = 0; i < t->nprefixes; i++) {
        if (strncmp(topic, t->prefixes[i], strlen(t->prefixes[i])) == 0)
            return 1;
    }
    return 0;
}

static dq_status deny(char *err, size_t errlen, const char *why, const char *what)
{
    snprintf(err, errlen, "%s%s", why, what);
    return DQ_UNAUTHORIZED;
}

/* The rights a command's fields need besides the command's own
 * (commands.def's DQ_FIELD_RIGHT rows). */
static const struct {
    dq_command cmd;
    dq_field field;
    dq_command right;
} field_rights[] = {
#define DQ_COMMAND(e, name, flags, fields, parser, handler)
#define DQ_FIELD_RIGHT(c, f, r) {CMD_##c, F_##f, CMD_##r},
#include "protocol/commands.def"
#undef DQ_FIELD_RIGHT
#undef DQ_COMMAND
};

/* 0, or DQ_UNAUTHORIZED when the request carries a field whose right the
 * token lacks (pop's finish without finish would remove any job). */
static dq_status check_field_rights(const dq_token *t, const dq_request *req, char *err,
                                    size_t errlen)
{
    for (size_t i = 0; i < sizeof field_rights / sizeof field_rights[0]; i++) {
        if (field_rights[i].cmd != req->cmd || !(req->fields & FIELD_BIT(field_rights[i].field)) ||
            auth_command_allowed(t, field_rights[i].right))
            continue;
        snprintf(err, errlen, "this token may not use the field '%s' of %s: it needs the %s right",
                 field_name(field_rights[i].field), command_name(req->cmd),
                 command_name(right_of(field_rights[i].right)));
        return DQ_UNAUTHORIZED;
    }
    return DQ_OK;
}

dq_status auth_check(const dq_auth *a, const char *header, const dq_request *req, char *allow,
                     size_t allowlen, char *err, size_t errlen)
{
    allow[0] = '\0';
    if (!a || (command_flags(req->cmd) & CMDF_PUBLIC))
        return DQ_OK;
    const dq_token *t = auth_find(a, header);
    if (!t)
        return deny(err, errlen,
                    "missing or unknown bearer token (send Authorization: Bearer <token>)", "");
    if (!auth_command_allowed(t, req->cmd))
        return deny(err, errlen, "this token may not use the command ", command_name(req->cmd));
    if (check_field_rights(t, req, err, errlen) != DQ_OK)
        return DQ_UNAUTHORIZED;
    if (!auth_topic_limited(t))
        return DQ_OK;
    int flags = command_flags(req->cmd);
    if (flags & CMDF_ALL_TOPICS)
        return deny(err, errlen, command_name(req->cmd),
                    " needs a token that is not limited to topics");
    if ((flags & CMDF_NAMES_TOPIC) && !req->ntopics)
        return deny(err, errlen, "a token limited to topics must name a topic in ",
                    command_name(req->cmd));
    for (size_t i = 0; i < req->njobs; i++) {
        if (!auth_topic_allowed(t, req->jobs[i].topic))
            return deny(err, errlen, "this token may not use the topic ", req->jobs[i].topic);
    }
    for (size_t i = 0; i < req->ntopics; i++) {
        if (!auth_topic_allowed(t, req->topics[i]))
            return deny(err, errlen, "this token may not use the topic ", req->topics[i]);
    }
    size_t o = 0;
    for (int i = 0; i < t->nprefixes; i++) {
        int n = snprintf(allow + o, allowlen - o, "%s%s", i ? "," : "", t->prefixes[i]);
        if (n < 0 || (size_t)n >= allowlen - o)
            abort(); /* AUTH_ALLOW_MAX is sized for every prefix */
        o += (size_t)n;
    }
    return DQ_OK;
}
