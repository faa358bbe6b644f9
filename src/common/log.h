/* log: one-line messages to stderr with time, process name and pid. */
#ifndef DQ_LOG_H
#define DQ_LOG_H

typedef enum { DQ_LOG_DEBUG, DQ_LOG_INFO, DQ_LOG_WARN, DQ_LOG_ERROR } log_level;

void log_init(const char *process, const char *level);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(DQ_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(DQ_LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(DQ_LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(DQ_LOG_ERROR, __VA_ARGS__)

#endif
