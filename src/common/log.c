/* log: stderr logging; scripts/run and systemd collect stderr. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

static const char *process_name = "delayq";
static log_level min_level = DQ_LOG_INFO;

void log_init(const char *process, const char *level)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    process_name = process;
    for (int i = 0; i < 4; i++) {
        if (level && strcmp(level, names[i]) == 0)
            min_level = (log_level)i;
    }
}

void log_msg(log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (level < min_level)
        return;
    char line[1024], when[32];
    util_format_utc_ms(util_wall_ms(), when, sizeof when);
    int n = snprintf(line, sizeof line, "%s %s[%d] %s ", when, process_name, (int)getpid(),
                     tags[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line, so lines of concurrent workers do not interleave. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
