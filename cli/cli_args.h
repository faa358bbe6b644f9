/* cli_args: the delayq command line's flags. Pure: turns argv into a
 * cli_args and knows nothing of commands, HTTP or JSON. */
#ifndef DQ_CLI_ARGS_H
#define DQ_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* Flags that become (or supply) a protocol field, named after it
 * (cli_flags.def). */
typedef enum {
#define CLI_FLAG(e, flag, field) CLI_F_##e,
#include "cli_flags.def"
#undef CLI_FLAG
    CLI_F_COUNT_OF
} cli_field;

/* The protocol's fields, in src/protocol/fields.def's order. */
typedef enum {
#define DQ_FIELD(e, name) CLI_WIRE_##e,
#include "protocol/fields.def"
#undef DQ_FIELD
    CLI_WIRE_COUNT_OF
} cli_wire_field;

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

/* Does flag f take no value (a switch that sends true)? */
int cli_field_is_switch(cli_field f);
/* The flag's name without dashes ("topic", "body-file"). */
const char *cli_field_flag(cli_field f);
/* The protocol field flag f fills ("callback" fills "url", every body flag
 * "body"). */
const char *cli_field_name(cli_field f);
/* The flags that fill any of the protocol fields in `fields`, a set of
 * bits by cli_wire_field (commands.def's fields column). */
cli_flags cli_flags_filling(uint64_t fields);

#endif
