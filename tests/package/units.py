"""Runs an installed systemd service unit's ExecStart without systemd, as
systemd would run it: the [Service] section's User, Group and
SupplementaryGroups, only its Environment, its RuntimeDirectory created
first. For machines where systemd is not PID 1 (CI containers), so the
package test still starts the very commands the units name.

Only the directives delayq's units use are read; a unit using one this
does not know how to honour (EnvironmentFile, ExecStartPre, ...) is
refused rather than run differently from systemd."""

import grp
import os
import pwd
import shlex
import socket
import subprocess

# [Service] directives that change how the command runs and are applied
# here; the rest (Restart, KillMode, the sandboxing) do not change what a
# single start does.
APPLIED = {"User", "Group", "SupplementaryGroups", "Environment", "ExecStart",
           "RuntimeDirectory", "RuntimeDirectoryMode"}
UNSUPPORTED = {"EnvironmentFile", "ExecStartPre", "ExecStartPost", "WorkingDirectory",
               "RootDirectory", "StateDirectory", "DynamicUser"}


class UnitError(Exception):
    pass


def parse(path):
    """{section: [(key, value), ...]} of a unit file (comments, blank lines
    and continuation lines as systemd.syntax(7) has them)."""
    sections, current, pending = {}, None, ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = pending + raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1], [])
            elif "=" in line and current is not None:
                key, value = line.split("=", 1)
                current.append((key.strip(), value.strip()))
            else:
                raise UnitError("%s: cannot read line %r" % (path, raw))
    return sections


def expand(value, instance):
    """The specifiers delayq's units use: %i (instance), %H (host name), %%."""
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "%" and i + 1 < len(value):
            spec = value[i + 1]
            if spec == "i":
                out.append(instance or "")
            elif spec == "H":
                out.append(socket.gethostname())
            elif spec == "%":
                out.append("%")
            else:
                raise UnitError("specifier %%%s is not supported" % spec)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Service:
    """One service unit (an instance of a template when `instance` is
    given), ready to start()."""

    def __init__(self, path, instance=None):
        self.path = path
        service = dict()
        for key, value in parse(path).get("Service", []):
            if key in UNSUPPORTED or (key == "Type" and value != "simple"):
                raise UnitError("%s: %s=%s is not supported here" % (path, key, value))
            if key == "Environment":
                service.setdefault(key, []).extend(shlex.split(expand(value, instance)))
            elif key in APPLIED:
                service[key] = expand(value, instance)
        if "ExecStart" not in service:
            raise UnitError("%s has no ExecStart" % path)
        if service["ExecStart"][:1] in "-@:+!":
            raise UnitError("%s: ExecStart prefixes are not supported" % path)
        self.argv = shlex.split(service["ExecStart"])
        self.user = pwd.getpwnam(service.get("User", "root"))
        self.group = grp.getgrnam(service.get("Group", self.user.pw_name))
        self.supplementary_gids = [grp.getgrnam(name).gr_gid
                                   for name in service.get("SupplementaryGroups", "").split()]
        # PATH as systemd sets it for system services; nothing of this
        # process's own environment leaks in.
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        for assignment in service.get("Environment", []):
            name, _, value = assignment.partition("=")
            self.env[name] = value
        self.runtime_dirs = ["/run/" + d for d in service.get("RuntimeDirectory", "").split()]
        self.runtime_mode = int(service.get("RuntimeDirectoryMode", "0755"), 8)

    def make_runtime_dirs(self):
        """As systemd does before the start: owned by the unit's user and
        group."""
        for d in self.runtime_dirs:
            os.makedirs(d, exist_ok=True)
            os.chown(d, self.user.pw_uid, self.group.gr_gid)
            os.chmod(d, self.runtime_mode)

    def remove_runtime_dirs(self):
        """As systemd does after the stop."""
        for d in self.runtime_dirs:
            subprocess.run(["rm", "-rf", "--one-file-system", d], check=True)

    def start(self, log_path):
        """Popen of ExecStart as the unit's user and group, output to
        log_path (systemd would send it to the journal)."""
        self.make_runtime_dirs()
        uid, gid, groups = self.user.pw_uid, self.group.gr_gid, self.supplementary_gids

        def drop_privileges():
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)

        with open(log_path, "ab") as log:
            return subprocess.Popen(self.argv, env=self.env, cwd="/", stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=drop_privileges)
