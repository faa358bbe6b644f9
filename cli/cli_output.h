/* cli_output: the delayq command line's human-readable output, one printer
 * per shape of answer. Each takes a parsed success answer (borrowed, not
 * freed) and writes to out; --json output bypasses this module. */
#ifndef DQ_CLI_OUTPUT_H
#define DQ_CLI_OUTPUT_H

#include <json-c/json.h>
#include <stdio.h>

#include "cli_json.h"

/* "added ID" style: the answer's id after a verb; add prints the bare id. */
void cli_out_id(FILE *out, json_object *ans, const char *verb);
/* add's answer: the id; an upsert's: "replaced ID" or "added ID". */
void cli_out_added(FILE *out, json_object *ans);
/* A pop answer, one job or "jobs": id, topic, attempts, ttr, value; "no job"
 * when empty. */
void cli_out_pop(FILE *out, const cli_json *answer);
/* A get answer: every field, times as UTC ISO 8601. */
void cli_out_get(FILE *out, const cli_json *answer);
/* A batch answer ("results"): one line per id. Returns the code of the first
 * item that failed (borrowed from ans), or NULL when all succeeded. */
const char *cli_out_results(FILE *out, json_object *ans, const char *verb);
/* The same for the "finished" list of a pop that carried finish (nothing
 * when the answer has none). */
const char *cli_out_finished(FILE *out, json_object *ans, const char *verb);
void cli_out_touch(FILE *out, json_object *ans);
void cli_out_release(FILE *out, json_object *ans);
/* "paused T" or "resumed T". */
void cli_out_pause(FILE *out, json_object *ans);
/* policy: the topic's policy, one "name value" line per field ("-": unset). */
void cli_out_policy(FILE *out, json_object *ans);
/* policies: one line per topic: its set limits, reserved and throttled. */
void cli_out_policies(FILE *out, json_object *ans);
void cli_out_kick(FILE *out, json_object *ans);
/* "purged N jobs of T". */
void cli_out_purge(FILE *out, json_object *ans);
/* "rescheduled ID, now STATE[, due TIME]". */
void cli_out_reschedule(FILE *out, json_object *ans);
/* A jobs page: one line per job (id, state, due, attempts, value), then
 * "cursor C" when a page follows, or "no job" for an empty page. */
void cli_out_jobs(FILE *out, const cli_json *answer);
/* A stats answer as a table: one row per topic (sorted), then "total". */
void cli_out_stats(FILE *out, json_object *ans);
void cli_out_health(FILE *out, json_object *ans);
/* One line per schedule: id, topic, cron or "every Ns", zone, next fire
 * (UTC), missed fires; then the upcoming fire times of a preview. */
void cli_out_schedules(FILE *out, json_object *ans);
/* A failure answer: "delayq: <error> (<code>)". */
void cli_out_error(FILE *out, json_object *ans);

#endif
