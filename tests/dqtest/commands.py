"""The protocol's commands as src/protocol/commands.def and fields.def
declare them, read as data, so tests that must cover every command (the
rights matrix in test_auth, the foreign-page test in test_ui) are generated
from the declaration and fail when a command is added without its sample."""

import os
import re

from .deployment import SRC_DIR

SRC = os.path.join(SRC_DIR, "src", "protocol")


def read_declarations():
    """commands.def and fields.def as data: {command: (enum, flags)},
    [(command, field name, right command)], and the rights a tokens file
    may list (every command but those that come with another's right)."""
    text = open(os.path.join(SRC, "commands.def")).read()
    fields = dict(re.findall(r'^DQ_FIELD\((\w+),\s*"(\w+)"\)',
                             open(os.path.join(SRC, "fields.def")).read(), re.M))
    commands = {name: (enum, flags) for enum, name, flags in
                re.findall(r'^DQ_COMMAND\((\w+),\s*"(\w+)",\s*([^,]+),', text, re.M)}
    by_enum = {enum: name for name, (enum, _) in commands.items()}
    field_rights = [(by_enum[c], fields[f], by_enum[r]) for c, f, r in
                    re.findall(r"^DQ_FIELD_RIGHT\((\w+),\s*(\w+),\s*(\w+)\)", text, re.M)]
    rights = [n for n, (_, flags) in commands.items() if "CMDF_DELETE_RIGHT" not in flags
              and "CMDF_PUBLIC" not in flags]
    return commands, field_rights, rights


COMMANDS, FIELD_RIGHTS, RIGHTS = read_declarations()
WRITES = [name for name, (_, flags) in COMMANDS.items() if "CMDF_READ_ONLY" not in flags]

# A valid request of each command of commands.def, on ids and topics of its
# own (a missing id answers 404, which is not 401: the right was granted).
SAMPLES = {
    "add": {"topic": "sample.a", "body": 1},
    "pop": {"topic": "sample.a", "timeout": 0},
    "finish": {"id": "sample-1"},
    "delete": {"id": "sample-1"},
    "get": {"id": "sample-1"},
    "touch": {"id": "sample-1"},
    "release": {"id": "sample-1"},
    "bury": {"id": "sample-1"},
    "kick": {"topic": "sample.a", "count": 1},
    "stats": {},
    "health": {},
    "metrics": {},
    "schedule": {"id": "sample-s", "topic": "sample.s", "every": 3600, "body": 1},
    "unschedule": {"id": "sample-1"},
    "schedules": {},
    "jobs": {"topic": "sample.a", "state": "ready"},
    "reschedule": {"id": "sample-1", "delay": 1},
    "pause": {"topic": "sample.p"},
    "resume": {"topic": "sample.p"},
    "purge": {"topic": "sample.p"},
    "policy": {"topic": "sample.p", "concurrency": 1000},
    "policies": {},
}
