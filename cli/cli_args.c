/* cli_args: argv -> cli_args. The flags are named after the protocol fields
 * they fill, so the man page and docs/PROTOCOL.md read the same. */
#include "cli_args.h"

#include <stdio.h>
#include <string.h>

static const char *const field_flags[CLI_F_COUNT_OF] = {
#define CLI_FLAG(e, flag, field) [CLI_F_##e] = flag,
#include "cli_flags.def"
#undef CLI_FLAG
};

/* The protocol field each flag fills, and the fields' names on the wire. */
static const cli_wire_field field_of_flag[CLI_F_COUNT_OF] = {
#define CLI_FLAG(e, flag, field) [CLI_F_##e] = CLI_WIRE_##field,
#include "cli_flags.def"
#undef CLI_FLAG
};

static const char *const wire_names[CLI_WIRE_COUNT_OF] = {
#define DQ_FIELD(e, name) [CLI_WIRE_##e] = name,
#include "protocol/fields.def"
#undef DQ_FIELD
};

_Static_assert(CLI_WIRE_COUNT_OF <= 64, "a command's fields are a 64-bit set");
_Static_assert(CLI_F_COUNT_OF <= 64, "cli_flags is a 64-bit set");

const char *cli_field_flag(cli_field f)
{
    return (unsigned)f < CLI_F_COUNT_OF ? field_flags[f] : "?";
}

const char *cli_field_name(cli_field f)
{
    return (unsigned)f < CLI_F_COUNT_OF ? wire_names[field_of_flag[f]] : "?";
}

cli_flags cli_flags_filling(uint64_t fields)
{
    cli_flags flags = 0;
    for (int f = 0; f < CLI_F_COUNT_OF; f++) {
        if (fields & ((uint64_t)1 << field_of_flag[f]))
            flags |= CLI_BIT(f);
    }
    return flags;
}

static int field_by_name(const char *name, size_t n)
{
    for (int f = 0; f < CLI_F_COUNT_OF; f++) {
        if (strlen(field_flags[f]) == n && strncmp(field_flags[f], name, n) == 0)
            return f;
    }
    return -1;
}

int cli_field_is_switch(cli_field f)
{
    return f == CLI_F_REPLACE;
}

/* Switches take no value; "--json=1" is a mistake worth reporting. */
static int set_switch(cli_args *a, const char *name, size_t n)
{
    if (n == 4 && strncmp(name, "json", 4) == 0)
        a->json = 1;
    else if (n == 4 && strncmp(name, "help", 4) == 0)
        a->help = 1;
    else if (n == 7 && strncmp(name, "version", 7) == 0)
        a->version = 1;
    else
        return -1;
    return 0;
}

/* Handles argv[*i], a word starting with "--"; may consume argv[*i + 1]. */
static int parse_flag(int argc, char **argv, int *i, cli_args *a, char *err, size_t errlen)
{
    const char *arg = argv[*i];
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);

    if (set_switch(a, name, n) == 0) {
        if (eq) {
            snprintf(err, errlen, "--%.*s takes no value", (int)n, name);
            return -1;
        }
        return 0;
    }

    const char **slot = NULL;
    int field = field_by_name(name, n);
    if (field >= 0)
        slot = &a->value[field];
    else if (n == 3 && strncmp(name, "url", 3) == 0)
        slot = &a->url;
    else if (n == 5 && strncmp(name, "token", 5) == 0)
        slot = &a->token;
    if (!slot) {
        snprintf(err, errlen, "unknown flag '--%.*s'", (int)n, name);
        return -1;
    }
    if (*slot) {
        snprintf(err, errlen, "--%.*s given twice", (int)n, name);
        return -1;
    }
    if (field >= 0 && cli_field_is_switch((cli_field)field)) {
        if (eq) {
            snprintf(err, errlen, "--%.*s takes no value", (int)n, name);
            return -1;
        }
        *slot = "true";
    } else if (eq) {
        *slot = eq + 1;
    } else if (*i + 1 < argc) {
        /* The next word is the value even if it starts with "-": a body
         * string or a negative delay must be passable as it is. */
        *slot = argv[++*i];
    } else {
        snprintf(err, errlen, "--%.*s needs a value", (int)n, name);
        return -1;
    }
    if (field >= 0)
        a->given |= CLI_BIT(field);
    return 0;
}

int cli_args_parse(int argc, char **argv, cli_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0) {
            a->help = 1;
        } else if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0') {
            if (parse_flag(argc, argv, &i, a, err, errlen) < 0)
                return -1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            snprintf(err, errlen, "unknown flag '%s' (flags are long: --topic, --id, ...)", arg);
            return -1;
        } else if (!a->command) {
            a->command = arg;
        } else if (strcmp(a->command, "help") == 0 && !a->help_command) {
            a->help_command = arg;
        } else {
            snprintf(err, errlen, "unexpected argument '%s' (values go after a flag, e.g. --id %s)",
                     arg, arg);
            return -1;
        }
    }
    return 0;
}
