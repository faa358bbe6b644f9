/* scripts: lookup of the embedded Lua sources by enum. */
#include "scripts.h"

#include <assert.h>
#include <string.h>

#include "lua_scripts.inc"

static const char *const names[SCRIPT_COUNT] = {
    [SCRIPT_ADD] = "add",         [SCRIPT_POP] = "pop",   [SCRIPT_REMOVE] = "remove",
    [SCRIPT_GET] = "get",         [SCRIPT_TOUCH] = "touch", [SCRIPT_RELEASE] = "release",
    [SCRIPT_BURY] = "bury",       [SCRIPT_KICK] = "kick", [SCRIPT_STATS] = "stats",
    [SCRIPT_MOVE] = "move",       [SCRIPT_LOCK] = "lock",   [SCRIPT_TOPICS] = "topics",
};

const char *script_name(dq_script s)
{
    assert(s < SCRIPT_COUNT);
    return names[s];
}

const char *script_source(dq_script s)
{
    assert(s < SCRIPT_COUNT);
    for (size_t i = 0; i < sizeof lua_scripts / sizeof lua_scripts[0]; i++) {
        if (strcmp(lua_scripts[i].name, names[s]) == 0)
            return lua_scripts[i].source;
    }
    assert(!"script missing from src/lua");
    return NULL;
}
