/* cli_json: an answer (or a value the user typed) as strict JSON. The
 * scanner the server uses (src/common/json_scan.c) decides what is valid; json-c
 * then builds a tree, which is convenient for reading an answer's fields.
 * A job's body is never printed from the tree (json-c would round its
 * numbers): cli_json_raw gives the exact text the server sent. */
#ifndef DQ_CLI_JSON_H
#define DQ_CLI_JSON_H

#include <json-c/json.h>
#include <stddef.h>

#include "common/json_scan.h"

typedef struct {
    const char *text;
    size_t len;
    json_doc doc;      /* tokens over text */
    json_object *tree; /* the same value as a json-c tree */
} cli_json;

/* Parses text[0..len) (kept, not copied: it must outlive j). Returns 0, or
 * -1 with err naming the problem ("body is not valid JSON: ..."). */
int cli_json_parse(cli_json *j, const char *text, size_t len, char *err, size_t errlen);
void cli_json_free(cli_json *j);
/* Only checks that text is strict JSON. */
int cli_json_valid(const char *text, size_t len, char *err, size_t errlen);

/* The exact text of `key` in the answer's top-level object (index < 0) or
 * in element `index` of its top-level array member `array`; NULL if none.
 * *n gets its length. */
const char *cli_json_raw(const cli_json *j, const char *array, long index, const char *key,
                         size_t *n);

#endif
