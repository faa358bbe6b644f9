/* delayq: the command line client. One subcommand per protocol command;
 * flags named after the protocol fields; human output by default, the
 * server's JSON answer verbatim with --json; the exit status follows the
 * answer's error code (table below, documented in delayq(1)). */
#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_http.h"
#include "cli_json.h"
#include "cli_output.h"
#include "cli_request.h"
#include "common/buf.h"

#define DEFAULT_URL "http://127.0.0.1:8080"

/* ---------------------------------------------------------------- exit codes */

enum {
    EXIT_OK = 0,
    EXIT_USAGE = 1,
    EXIT_BAD_REQUEST = 2,
    EXIT_NOT_FOUND = 3,
    EXIT_CONFLICT = 4,
    EXIT_UNAUTHORIZED = 5,
    EXIT_TOO_LARGE = 6,
    EXIT_UNAVAILABLE = 7,
    EXIT_TIMEOUT = 8,
    EXIT_OTHER = 9, /* cannot connect, an answer that is not the protocol's, internal */
};

/* One table from the protocol's error code (and, for an answer without one,
 * its HTTP status) to the exit status. */
static const struct {
    const char *code;
    long http;
    int exit;
} exit_table[] = {
    {"bad_request", 400, EXIT_BAD_REQUEST}, {"not_found", 404, EXIT_NOT_FOUND},
    {"conflict", 409, EXIT_CONFLICT},       {"unauthorized", 401, EXIT_UNAUTHORIZED},
    {"too_large", 413, EXIT_TOO_LARGE},     {"unavailable", 503, EXIT_UNAVAILABLE},
    {"timeout", 504, EXIT_TIMEOUT},
};

static int exit_for(const char *code, long http)
{
    for (size_t i = 0; i < sizeof exit_table / sizeof exit_table[0]; i++) {
        if (code ? strcmp(code, exit_table[i].code) == 0 : http == exit_table[i].http)
            return exit_table[i].exit;
    }
    return EXIT_OTHER;
}

/* ---------------------------------------------------------------- commands */

typedef enum {
    OUT_ADD, OUT_POP, OUT_REMOVE, OUT_GET, OUT_ID, OUT_TOUCH, OUT_RELEASE, OUT_KICK, OUT_STATS,
    OUT_HEALTH, OUT_SCHEDULES, OUT_JOBS, OUT_RESCHEDULE, OUT_PAUSE, OUT_METRICS, OUT_PURGE,
    OUT_POLICY, OUT_POLICIES
} out_kind;

typedef struct {
    const char *name;
    int get;           /* sent as GET with no body (health only) */
    cli_flags withheld; /* flags of fields the server takes that this CLI does not offer */
    cli_flags required; /* fields that must be given (a body: any body flag) */
    out_kind out;
    const char *verb; /* past tense, for "finished ID" */
    const char *summary;
    const char *usage; /* the command's flags, for its --help */
} cli_command;

#define B(f) CLI_BIT(CLI_F_##f)

static const cli_command commands[] = {
    {"add", 0, 0, B(TOPIC) | CLI_BODY_FLAGS, OUT_ADD, NULL,
     "add a job; prints its id (with --replace: \"replaced ID\" or \"added ID\")",
     "  --topic T             topic of the job (required)\n"
     "  --id ID               job id (default: the server makes one)\n"
     "  --replace             upsert (needs --id): a delayed, ready or buried job of this id\n"
     "                        and topic is replaced by this one, else the job is added; a\n"
     "                        reserved job or one of another topic is a conflict\n"
     "  --key KEY             grouping key (a merchant or user id) that flow limits count by\n"
     "  --traceparent TP      W3C trace context: 00-<32 hex>-<16 hex>-<2 hex>; pop, get and\n"
     "                        callbacks carry it on\n"
     "  --tracestate TS       its vendor state (up to 512 printable ASCII bytes; needs\n"
     "                        --traceparent)\n"
     "  --delay SECONDS       ready after this many seconds (fractions allowed; default 0)\n"
     "  --at UNIX_SECONDS     ready at this time instead (not with --delay)\n"
     "  --ttr SECONDS         time to finish once popped (default 60)\n"
     "  --retries N           redeliveries allowed before the job is buried (default unlimited)\n"
     "  --backoff STEPS       seconds to wait after each failed delivery: 15,180,600 or stepped\n"
     "  --callback URL        delayq POSTs the body to URL when due, instead of pop\n"
     "  --body JSON           the job's body, any JSON value: '{\"order\":42}', '\"text\"', 42\n"
     "  --body-string TEXT    the body as a plain string\n"
     "  --body-file PATH      the body as JSON read from a file (- reads stdin)\n"
     "  --body-string-file PATH  the body as a string read from a file, verbatim (- reads stdin)\n"
     "One body flag is required.\n"},
    {"pop", 0, 0, B(TOPIC), OUT_POP, "finished",
     "take ready jobs; prints id, topic, attempts, ttr and value, or \"no job\"",
     "  --topic T[,T2...]     topic(s) to take from, first non-empty first (required)\n"
     "  --timeout SECONDS     wait up to this long for a job (0..60; default 0)\n"
     "  --count N             take up to N jobs (1..100)\n"
     "  --finish ID[,ID...]   first finish these jobs, in the same request (at once, before\n"
     "                        the wait); one line each; a failed finish does not change the\n"
     "                        exit status (the pop answered: the jobs printed are to be handled)\n"},
    {"finish", 0, 0, 0, OUT_REMOVE, "finished", "finish (remove) jobs",
     "  --id ID               the job\n"
     "  --ids ID,ID...        several jobs; exit status of the first that failed\n"},
    {"delete", 0, 0, 0, OUT_REMOVE, "deleted", "delete jobs (counted as deleted, not finished)",
     "  --id ID               the job\n"
     "  --ids ID,ID...        several jobs; exit status of the first that failed\n"},
    {"get", 0, 0, B(ID), OUT_GET, NULL, "show a job's state and body",
     "  --id ID               the job (required)\n"},
    {"touch", 0, 0, B(ID), OUT_TOUCH, NULL, "give a reserved job a new TTR from now",
     "  --id ID               the reserved job (required)\n"},
    {"release", 0, 0, B(ID), OUT_RELEASE, NULL, "put a reserved job back",
     "  --id ID               the reserved job (required)\n"
     "  --delay SECONDS       ready again after this many seconds (default 0)\n"},
    {"bury", 0, 0, B(ID), OUT_ID, "buried", "set a reserved job aside until kicked",
     "  --id ID               the reserved job (required)\n"},
    {"kick", 0, 0, 0, OUT_KICK, "kicked",
     "make buried jobs ready: a topic's oldest, or named ones",
     "  --topic T             the topic's oldest buried jobs (or --id/--ids)\n"
     "  --count N             up to N jobs (1..10000; default 1; with --topic)\n"
     "  --id ID               this buried job\n"
     "  --ids ID,ID...        these buried jobs; exit status of the first that failed\n"},
    {"reschedule", 0, 0, B(ID), OUT_RESCHEDULE, NULL,
     "give a delayed, ready or buried job a new due time",
     "  --id ID               the job (required; not a reserved one)\n"
     "  --delay SECONDS       due this many seconds from now (0: ready now)\n"
     "  --at UNIX_SECONDS     due at this time instead (one of --delay, --at is required)\n"},
    {"jobs", 0, 0, B(TOPIC) | B(STATE), OUT_JOBS, NULL,
     "list a topic's jobs in one state, a page at a time",
     "  --topic T             the topic (required)\n"
     "  --state S             delay, ready, reserved, buried, or finished or deleted\n"
     "                        (the records a topic's keep holds) (required)\n"
     "  --limit N             jobs per page (1..1000; default 50)\n"
     "  --cursor C            the page after the one that printed this cursor\n"},
    {"stats", 0, B(LIMIT) | B(CURSOR), 0, OUT_STATS, NULL, "job counts per topic and in total, as a table",
     "  --topic T             only this topic (default: every topic)\n"},
    {"health", 1, 0, 0, OUT_HEALTH, NULL, "check that the service and its Redis answer", ""},
    {"schedule", 0, 0, B(ID) | B(TOPIC) | CLI_BODY_FLAGS, OUT_ID, "scheduled",
     "create or replace a periodic job: each fire adds the job ID@T",
     "  --id ID               the schedule (required; no '@')\n"
     "  --topic T             topic of each fire's job (required)\n"
     "  --cron EXPR           five cron fields or @hourly, @daily, ... (or --every)\n"
     "  --every SECONDS       fire every this many seconds, 1..31622400 (or --cron)\n"
     "  --tz ZONE             IANA time zone of --cron (default UTC)\n"
     "  --start UNIX_SECONDS  no fire before this; --every counts from it\n"
     "  --end UNIX_SECONDS    no fire after this\n"
     "  --ttr SECONDS, --retries N, --backoff STEPS, --callback URL: each fire's job, as add\n"
     "  --body JSON ...       each fire's body (one body flag is required, as for add)\n"},
    {"unschedule", 0, 0, B(ID), OUT_ID, "unscheduled", "remove a schedule (fires made stay)",
     "  --id ID               the schedule (required)\n"},
    {"schedules", 0, 0, 0, OUT_SCHEDULES, NULL,
     "list schedules: id, topic, cron or every, zone, next fire, missed fires",
     "  --id ID               only this one (with its body)\n"
     "  --preview N           and its next N fire times (1..100; needs --id)\n"},
    {"pause", 0, 0, B(TOPIC), OUT_PAUSE, NULL,
     "stop pop and callbacks of a topic (due jobs still become ready)",
     "  --topic T             the topic (required)\n"},
    {"resume", 0, 0, B(TOPIC), OUT_PAUSE, NULL,
     "let a paused topic's jobs be popped and sent again",
     "  --topic T             the topic (required)\n"},
    {"purge", 0, 0, B(TOPIC), OUT_PURGE, NULL,
     "delete all of a topic's jobs in one state, or in every state; prints how many",
     "  --topic T             the topic (required)\n"
     "  --state S             delay, ready, reserved or buried (default: every state)\n"},
    {"policy", 0, 0, B(TOPIC), OUT_POLICY, NULL,
     "set a topic's flow limits (omitted: kept; none: removed); prints the policy",
     "  --topic T             the topic (required)\n"
     "  --concurrency N       most jobs of the topic reserved or in flight at once\n"
     "  --rate N              most deliveries (pops, callbacks) per --period\n"
     "  --period SECONDS      the window of --rate (0.001..86400; default 1)\n"
     "  --key-concurrency N   the same per key; 1 makes each key serial\n"
     "  --key-rate N          most deliveries per key per --key-period\n"
     "  --key-period SECONDS  the window of --key-rate (default 1)\n"
     "  --keep SECONDS        keep the records of finished and deleted jobs this long\n"
     "  (each takes 'none' to remove that limit)\n"},
    {"policies", 0, B(LIMIT) | B(CURSOR), 0, OUT_POLICIES, NULL,
     "topics' flow limits and their use (reserved, throttled), as a table",
     "  --topic T             only this topic (default: every topic with a policy)\n"},
    {"metrics", 1, 0, 0, OUT_METRICS, NULL,
     "print the Prometheus metrics of the backend that answers", ""},
};


/* Each command's fields, from its row in the server's command table. */
static const struct {
    const char *name;
    uint64_t fields;
} wire_commands[] = {
#define FB(f) ((uint64_t)1 << CLI_WIRE_##f)
#define DQ_COMMAND(e, name, flags, fields, parser, handler) {name, fields},
#include "protocol/commands.def"
#undef DQ_COMMAND
#undef FB
};

#undef B

#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* The flags c takes: those that fill its fields, less those this CLI
 * withholds. */
static cli_flags command_flags(const cli_command *c)
{
    for (size_t i = 0; i < sizeof wire_commands / sizeof wire_commands[0]; i++) {
        if (strcmp(wire_commands[i].name, c->name) == 0)
            return cli_flags_filling(wire_commands[i].fields) & ~c->withheld;
    }
    return 0;
}

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

/* ---------------------------------------------------------------- help */

static const char global_flags[] =
    "Global flags:\n"
    "  --url URL             delayq's HTTP address (default: $DELAYQ_URL, else " DEFAULT_URL ")\n"
    "  --token TOKEN         bearer token (default: $DELAYQ_TOKEN)\n"
    "  --json                print the server's JSON answer as it is\n"
    "  --help, -h            this help; `delayq COMMAND --help` for a command's flags\n"
    "  --version             print the version\n";

static void usage(FILE *out)
{
    fprintf(out, "usage: delayq [--url URL] [--token TOKEN] [--json] COMMAND [flags]\n\nCommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n%s\n"
            "Exit status: 0 ok (also a pop that found no job), 1 usage, 2 bad_request,\n"
            "3 not_found, 4 conflict, 5 unauthorized, 6 too_large, 7 unavailable,\n"
            "8 timeout (outcome unknown: a 504, or no answer to a request that was sent),\n"
            "9 cannot connect, or another error. See delayq(1).\n",
            global_flags);
}

static void command_usage(FILE *out, const cli_command *c)
{
    fprintf(out, "usage: delayq %s [flags]\n%c%s.\n\n", c->name, toupper((unsigned char)c->summary[0]),
            c->summary + 1);
    if (c->usage[0])
        fprintf(out, "Flags:\n%s\n", c->usage);
    fprintf(out, "%s", global_flags);
}

/* ---------------------------------------------------------------- checks */

static int check_flags(const cli_command *c, const cli_args *a, char *err, size_t errlen)
{
    for (int f = 0; f < CLI_F_COUNT_OF; f++) {
        if ((a->given & CLI_BIT(f)) && !(command_flags(c) & CLI_BIT(f))) {
            snprintf(err, errlen, "%s takes no --%s (see delayq %s --help)", c->name,
                     cli_field_flag((cli_field)f), c->name);
            return -1;
        }
    }
    cli_flags bodies = a->given & CLI_BODY_FLAGS;
    if (bodies & (bodies - 1)) {
        snprintf(err, errlen, "give one of --body, --body-string, --body-file, --body-string-file");
        return -1;
    }
    for (int f = 0; f < CLI_F_COUNT_OF; f++) {
        cli_flags bit = CLI_BIT(f);
        if (!(c->required & bit) || (a->given & bit))
            continue;
        if ((bit & CLI_BODY_FLAGS) && bodies)
            continue;
        snprintf(err, errlen, "%s needs --%s", c->name,
                 (bit & CLI_BODY_FLAGS) ? "body (or --body-string, --body-file, --body-string-file)"
                                        : cli_field_flag((cli_field)f));
        return -1;
    }
    int by_id = !!(a->given & CLI_BIT(CLI_F_ID)) + !!(a->given & CLI_BIT(CLI_F_IDS));
    if (c->out == OUT_REMOVE && by_id != 1) {
        snprintf(err, errlen, "%s needs --id or --ids (one of them)", c->name);
        return -1;
    }
    if (c->out == OUT_KICK && by_id + !!(a->given & CLI_BIT(CLI_F_TOPIC)) != 1) {
        snprintf(err, errlen, "kick needs one of --topic, --id, --ids");
        return -1;
    }
    if (c->out == OUT_KICK && by_id && (a->given & CLI_BIT(CLI_F_COUNT))) {
        snprintf(err, errlen, "kick takes --count only with --topic");
        return -1;
    }
    if (c->out == OUT_RESCHEDULE &&
        !!(a->given & CLI_BIT(CLI_F_DELAY)) + !!(a->given & CLI_BIT(CLI_F_AT)) != 1) {
        snprintf(err, errlen, "reschedule needs --delay or --at (one of them)");
        return -1;
    }
    if (a->token && strpbrk(a->token, "\r\n")) {
        snprintf(err, errlen, "--token must be one line");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- output */

/* Prints a success answer for people; returns the exit status (a batch with
 * a failed item exits with that item's status). */
static int print_human(const cli_command *c, const cli_json *answer)
{
    json_object *ans = answer->tree;
    const char *failed;
    switch (c->out) {
    case OUT_ADD:
        cli_out_added(stdout, ans);
        break;
    case OUT_POP:
        /* The finishes happened first: their lines come first. A finish
         * that failed leaves nothing to do (the job was gone), while the
         * jobs printed are reserved and must be handled: the pop answered,
         * so the status is 0 (a script must not drop the jobs it got). */
        cli_out_finished(stdout, ans, c->verb);
        cli_out_pop(stdout, answer);
        return EXIT_OK;
    case OUT_REMOVE:
        if (json_object_object_get_ex(ans, "results", NULL)) {
            failed = cli_out_results(stdout, ans, c->verb);
            return failed ? exit_for(failed, 0) : EXIT_OK;
        }
        cli_out_id(stdout, ans, c->verb);
        break;
    case OUT_GET:
        cli_out_get(stdout, answer);
        break;
    case OUT_ID:
        cli_out_id(stdout, ans, c->verb);
        break;
    case OUT_TOUCH:
        cli_out_touch(stdout, ans);
        break;
    case OUT_RELEASE:
        cli_out_release(stdout, ans);
        break;
    case OUT_KICK:
        if (json_object_object_get_ex(ans, "results", NULL)) {
            failed = cli_out_results(stdout, ans, c->verb);
            return failed ? exit_for(failed, 0) : EXIT_OK;
        }
        if (json_object_object_get_ex(ans, "kicked", NULL))
            cli_out_kick(stdout, ans);
        else
            cli_out_id(stdout, ans, c->verb);
        break;
    case OUT_RESCHEDULE:
        cli_out_reschedule(stdout, ans);
        break;
    case OUT_JOBS:
        cli_out_jobs(stdout, answer);
        break;
    case OUT_STATS:
        cli_out_stats(stdout, ans);
        break;
    case OUT_HEALTH:
        cli_out_health(stdout, ans);
        break;
    case OUT_SCHEDULES:
        cli_out_schedules(stdout, ans);
        break;
    case OUT_PAUSE:
        cli_out_pause(stdout, ans);
        break;
    case OUT_PURGE:
        cli_out_purge(stdout, ans);
        break;
    case OUT_METRICS: /* printed as text by run() */
        break;
    case OUT_POLICY:
        cli_out_policy(stdout, ans);
        break;
    case OUT_POLICIES:
        cli_out_policies(stdout, ans);
        break;
    }
    return EXIT_OK;
}

/* The exit status of a batch answer printed with --json: that of the first
 * failed item of "results" (a pop's "finished" does not count: see
 * print_human). */
static int batch_status(json_object *ans)
{
    json_object *results;
    if (!json_object_object_get_ex(ans, "results", &results) ||
        !json_object_is_type(results, json_type_array))
        return EXIT_OK;
    for (size_t i = 0; i < json_object_array_length(results); i++) {
        json_object *r = json_object_array_get_idx(results, i), *ok, *code;
        if (json_object_object_get_ex(r, "success", &ok) && json_object_get_boolean(ok))
            continue;
        return exit_for(json_object_object_get_ex(r, "code", &code) ? json_object_get_string(code)
                                                                     : NULL,
                        0);
    }
    return EXIT_OK;
}

/* ---------------------------------------------------------------- run */

static int run(const cli_command *c, const cli_args *a)
{
    int status = EXIT_OTHER;
    char err[512];
    char path[32];
    dq_buf body, answer;
    cli_http *http = NULL;
    cli_json parsed;
    json_object *ans = NULL;
    long http_status = 0;
    memset(&parsed, 0, sizeof parsed);
    buf_init(&body);
    buf_init(&answer);

    if (!c->get && cli_request_build(a, &body, err, sizeof err) < 0) {
        fprintf(stderr, "delayq: %s\n", err);
        status = EXIT_USAGE;
        goto out;
    }
    const char *url = a->url ? a->url : getenv("DELAYQ_URL");
    const char *token = a->token ? a->token : getenv("DELAYQ_TOKEN");
    if (!url || !*url)
        url = DEFAULT_URL;
    if (token && !*token)
        token = NULL;
    http = cli_http_new(url, token, err, sizeof err);
    if (!http) {
        fprintf(stderr, "delayq: %s\n", err);
        goto out;
    }
    snprintf(path, sizeof path, "/%s", c->name);
    int sent = cli_http_request(http, path, c->get ? NULL : body.data, body.len, &http_status,
                                &answer, err, sizeof err);
    if (sent == CLI_HTTP_UNKNOWN) {
        fprintf(stderr, "delayq: no answer from %s (the request was sent: its outcome is unknown)\n",
                err);
        status = EXIT_TIMEOUT;
        goto out;
    }
    if (sent != CLI_HTTP_ANSWERED) {
        fprintf(stderr, "delayq: cannot reach delayq at %s\n", err);
        goto out;
    }

    /* /metrics answers Prometheus text, and JSON only for an error. */
    if (c->out == OUT_METRICS && http_status == 200 && answer.len > 0 && answer.data[0] != '{') {
        fwrite(answer.data, 1, answer.len, stdout);
        status = EXIT_OK;
        goto out;
    }
    char why[256];
    if (cli_json_parse(&parsed, answer.data ? answer.data : "", answer.len, why, sizeof why) < 0 ||
        !json_object_is_type(parsed.tree, json_type_object)) {
        fprintf(stderr, "delayq: %s%s answered HTTP %ld with something that is not a delayq answer\n",
                url, path, http_status);
        goto out;
    }
    ans = parsed.tree;
    json_object *success = NULL, *code = NULL;
    json_object_object_get_ex(ans, "success", &success);
    int ok = json_object_is_type(success, json_type_boolean) && json_object_get_boolean(success);
    if (a->json) {
        fwrite(answer.data, 1, answer.len, stdout);
        if (answer.data[answer.len - 1] != '\n')
            putchar('\n');
    }
    if (!ok) {
        if (!a->json)
            cli_out_error(stderr, ans);
        status = exit_for(json_object_object_get_ex(ans, "code", &code) ? json_object_get_string(code)
                                                                         : NULL,
                          http_status);
        goto out;
    }
    status = a->json ? batch_status(ans) : print_human(c, &parsed);

out:
    if (fflush(stdout) != 0 && status == EXIT_OK) {
        perror("delayq: writing output");
        status = EXIT_OTHER;
    }
    cli_json_free(&parsed);
    cli_http_free(http);
    buf_free(&body);
    buf_free(&answer);
    return status;
}

int main(int argc, char **argv)
{
    cli_args a;
    char err[512];
    if (cli_args_parse(argc, argv, &a, err, sizeof err) < 0) {
        fprintf(stderr, "delayq: %s\n(delayq --help lists commands and flags)\n", err);
        return EXIT_USAGE;
    }
    if (a.version) {
        printf("delayq %s\n", PACKAGE_VERSION);
        return EXIT_OK;
    }
    const char *name = a.command;
    int help = a.help;
    if (name && strcmp(name, "help") == 0) {
        name = a.help_command;
        help = 1;
    }
    if (!name) {
        usage(help ? stdout : stderr);
        return help ? EXIT_OK : EXIT_USAGE;
    }
    const cli_command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "delayq: unknown command '%s'\n\n", name);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (help) {
        command_usage(stdout, c);
        return EXIT_OK;
    }
    if (check_flags(c, &a, err, sizeof err) < 0) {
        fprintf(stderr, "delayq: %s\n", err);
        return EXIT_USAGE;
    }
    return run(c, &a);
}
