/* cli_json: strict JSON for the command line (see cli_json.h). */
#include "cli_json.h"

#include <stdlib.h>
#include <string.h>

int cli_json_valid(const char *text, size_t len, char *err, size_t errlen)
{
    json_doc d;
    json_doc_init(&d);
    int rc = json_scan(&d, text, len, err, errlen);
    json_doc_free(&d);
    return rc;
}

int cli_json_parse(cli_json *j, const char *text, size_t len, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    j->text = text;
    j->len = len;
    json_doc_init(&j->doc);
    if (json_scan(&j->doc, text, len, err, errlen) < 0)
        return -1;
    json_tokener *tok = json_tokener_new_ex(JSON_SCAN_MAX_DEPTH + 1);
    if (!tok)
        abort();
    j->tree = json_tokener_parse_ex(tok, text, (int)len);
    if (json_tokener_get_error(tok) == json_tokener_continue) {
        /* A top-level number ends only at a delimiter: give json-c one. */
        j->tree = json_tokener_parse_ex(tok, "", 1);
    }
    json_tokener_free(tok);
    return 0;
}

void cli_json_free(cli_json *j)
{
    json_object_put(j->tree);
    json_doc_free(&j->doc);
    memset(j, 0, sizeof *j);
}

const char *cli_json_raw(const cli_json *j, const char *array, long index, const char *key,
                         size_t *n)
{
    size_t obj = 0;
    if (j->doc.n == 0 || j->doc.toks[0].type != JSON_OBJECT)
        return NULL;
    if (index >= 0) {
        size_t arr = json_member(&j->doc, j->text, 0, array);
        if (!arr || j->doc.toks[arr].type != JSON_ARRAY || (size_t)index >= j->doc.toks[arr].count)
            return NULL;
        obj = arr + 1;
        for (long i = 0; i < index; i++)
            obj = j->doc.toks[obj].skip;
        if (j->doc.toks[obj].type != JSON_OBJECT)
            return NULL;
    }
    size_t v = json_member(&j->doc, j->text, obj, key);
    if (!v)
        return NULL;
    size_t start, end;
    json_raw(&j->doc, v, &start, &end);
    *n = end - start;
    return j->text + start;
}
