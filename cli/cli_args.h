/* cli_args: the delayq command line's flags. Pure: turns argv into a
 * cli_args and knows nothing of commands, HTTP or JSON. */
#ifndef DQ_CLI_ARGS_H
#define DQ_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* Flags that become (or supply) a protocol field, named after it. */
typedef enum {
    CLI_F_TOPIC,
    CLI_F_ID,
    CLI_F_IDS,
    CLI_F_DELAY,
    CLI_F_AT,
    CLI_F_TTR,
    CLI_F_RETRIES,
    CLI_F_TIMEOUT,
    CLI_F_COUNT,
    CLI_F_URL,
    CLI_F_BACKOFF,
    CLI_F_CRON,
    CLI_F_EVERY,
    CLI_F_TZ,
    CLI_F_START,
    CLI_F_END,
    CLI_F_PREVIEW,
    CLI_F_STATE,
    CLI_F_LIMIT,
    CLI_F_CURSOR,
    CLI_F_FINISH,
    CLI_F_KEY,
    CLI_F_CONCURRENCY,
    CLI_F_RATE,
    CLI_F_PERIOD,
    CLI_F_KEY_CONCURRENCY,
    CLI_F_KEY_RATE,
    CLI_F_KEY_PERIOD,
    CLI_F_KEEP,
    CLI_F_BODY,
    CLI_F_BODY_STRING,
    CLI_F_BODY_FILE,
    CLI_F_BODY_STRING_FILE,
    CLI_F_COUNT_OF
} cli_field;

/* A set of flags: more than 32, so 64 bits. */
typedef uint64_t cli_flags;
#define CLI_BIT(f) ((cli_flags)1 << (f))
#define CLI_BODY_FLAGS                                                                      \
    (CLI_BIT(CLI_F_BODY) | CLI_BIT(CLI_F_BODY_STRING) | CLI_BIT(CLI_F_BODY_FILE) |          \
     CLI_BIT(CLI_F_BODY_STRING_FILE))

typedef struct {
    const char *command;              /* first word that is not a flag, or NULL */
    const char *help_command;          /* "help CMD": the CMD, else NULL */
    const char *value[CLI_F_COUNT_OF]; /* NULL unless given; point into argv */
    cli_flags given;                   /* CLI_BIT(f) for each field flag given */
    const char *url;                   /* --url, else NULL */
    const char *token;                 /* --token, else NULL */
    int json;                          /* --json */
    int help;                          /* --help or -h */
    int version;                       /* --version */
} cli_args;

/* Parses argv[1..argc). Flags may come before or after the command, as
 * `--flag value` or `--flag=value`. Returns 0, or -1 with a sentence in err
 * (an unknown flag, a missing value, a flag given twice, a stray word). */
int cli_args_parse(int argc, char **argv, cli_args *a, char *err, size_t errlen);

/* The flag's name without dashes ("topic", "body-file"). */
const char *cli_field_flag(cli_field f);

#endif
