/* scripts: the Lua scripts embedded at build time from src/lua. Every
 * state change is one of these, run atomically by Redis. */
#ifndef DQ_SCRIPTS_H
#define DQ_SCRIPTS_H

typedef enum {
    SCRIPT_ADD,
    SCRIPT_POP,
    SCRIPT_REMOVE,
    SCRIPT_GET,
    SCRIPT_TOUCH,
    SCRIPT_RELEASE,
    SCRIPT_BURY,
    SCRIPT_KICK,
    SCRIPT_STATS,
    SCRIPT_MOVE,
    SCRIPT_LOCK,
    SCRIPT_TOPICS,
    SCRIPT_COUNT
} dq_script;

const char *script_name(dq_script s);
/* The full source (common helpers included). Owned by the program. */
const char *script_source(dq_script s);

#endif
