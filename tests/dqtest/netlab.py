"""A private network for partition tests: a bridge, network namespaces
joined to it by veth pairs, and cuts made of `iptables -j DROP` rules inside
a namespace (this kernel has no netem; a link set down is not a cut, and
a down link would let packets take the default route).

Every name carries the test's pid (`dqb<pid>`, `dq<pid>n<k>`, ...), the
subnet is a free 10.200.<x>.0/24, and the first thing made is a blackhole
route for that subnet (a metric above the bridge's own route), so no packet
for it ever leaves by the default route. All traffic stays on the bridge
and inside these namespaces. close() removes everything made, in reverse
order, and is registered with atexit; it is safe to call twice.

Needs root (CAP_NET_ADMIN), `ip` (iproute2) and `iptables`."""

import atexit
import os
import shutil
import subprocess

BLACKHOLE_METRIC = 4242


class NetLabError(Exception):
    pass


def available():
    """None when a NetLab can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "iptables"):
        if not shutil.which(tool):
            return "%s not installed" % tool
    return None


def _run(*argv, check=True):
    r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and r.returncode != 0:
        raise NetLabError("%s: %s" % (" ".join(argv), r.stdout.decode("utf-8", "replace")))
    return r


class NetLab:
    """lab = NetLab().start(); host, prefix = lab.place("redis1"): an
    address on the bridge and the argv prefix that runs a process in that
    namespace; lab.cut(a, b) / lab.heal(a, b) between two places (or
    lab.HOST, the test's own side of the bridge); lab.close()."""

    HOST = "host"  # the root namespace's side: the test itself, nginx, receivers

    def __init__(self):
        self.pid = os.getpid()
        self.bridge = "dqb%d" % self.pid
        self.subnet = None
        self.host_ip = None
        self.spaces = {}     # name -> (netns, ip)
        self.cuts = set()    # (netns, rule args) currently in place
        self._undo = []      # argv lists, run in reverse by close()
        self._next = 2

    def _free_subnet(self):
        routes = _run("ip", "-4", "route", "show", "table", "all").stdout.decode()
        for k in range(250):
            x = (self.pid + k) % 250 + 1
            net = "10.200.%d." % x
            if net not in routes:
                return "10.200.%d" % x
        raise NetLabError("no free 10.200.x.0/24 subnet")

    def start(self):
        atexit.register(self.close)
        self.subnet = self._free_subnet()
        # First: nothing for the subnet may leave by the default route.
        _run("ip", "route", "add", "blackhole", self.subnet + ".0/24",
             "metric", str(BLACKHOLE_METRIC))
        self._undo.append(["ip", "route", "del", "blackhole", self.subnet + ".0/24",
                           "metric", str(BLACKHOLE_METRIC)])
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._undo.append(["ip", "link", "del", self.bridge])
        self.host_ip = self.subnet + ".1"
        _run("ip", "addr", "add", self.host_ip + "/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        return self

    def place(self, name):
        """(ip, argv prefix) of the namespace `name`, made on first use."""
        if name == self.HOST:
            return self.host_ip, []
        if name not in self.spaces:
            k = self._next
            self._next += 1
            if k > 254:
                raise NetLabError("subnet full")
            ns = "dq%dn%d" % (self.pid, k)
            ip = "%s.%d" % (self.subnet, k)
            outer, inner = "dqv%dh%d" % (self.pid, k), "dqv%dn%d" % (self.pid, k)
            _run("ip", "netns", "add", ns)
            self._undo.append(["ip", "netns", "del", ns])
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self._undo.append(["ip", "link", "del", outer])  # takes its peer along
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "master", self.bridge)
            _run("ip", "link", "set", outer, "up")
            for argv in (["ip", "link", "set", "lo", "up"],
                         ["ip", "addr", "add", ip + "/24", "dev", inner],
                         ["ip", "link", "set", inner, "up"]):
                _run("ip", "netns", "exec", ns, *argv)
            self.spaces[name] = (ns, ip)
        ns, ip = self.spaces[name]
        return ip, ["ip", "netns", "exec", ns]

    def ip(self, name):
        return self.host_ip if name == self.HOST else self.spaces[name][1]

    def name_of(self, ip):
        """The place whose address is ip."""
        if ip == self.host_ip:
            return self.HOST
        return next(n for n, (_, i) in self.spaces.items() if i == ip)

    def _rules(self, a, b):
        """The DROP rules in a's namespace that cut a from b (both ways)."""
        if a == self.HOST:
            raise NetLabError("cut from inside a namespace, not from the host side")
        ns, ipb = self.spaces[a][0], self.ip(b)
        return [(ns, ("INPUT", "-s", ipb, "-j", "DROP")),
                (ns, ("OUTPUT", "-d", ipb, "-j", "DROP"))]

    def cut(self, a, b):
        """Drops every packet between places a and b (rules in a's netns)."""
        for ns, rule in self._rules(a, b):
            _run("ip", "netns", "exec", ns, "iptables", "-w", "-I", *rule)
            self.cuts.add((ns, rule))

    def heal(self, a, b):
        for ns, rule in self._rules(a, b):
            if (ns, rule) in self.cuts:
                _run("ip", "netns", "exec", ns, "iptables", "-w", "-D", *rule)
                self.cuts.discard((ns, rule))

    def close(self):
        """Removes every cut, namespace, veth, the bridge and the route.
        Processes still running in a namespace keep it alive until they
        exit (stop them first); the names are gone anyway."""
        for ns, rule in list(self.cuts):
            _run("ip", "netns", "exec", ns, "iptables", "-w", "-D", *rule, check=False)
        self.cuts.clear()
        while self._undo:
            _run(*self._undo.pop(), check=False)

    def leftovers(self):
        """Names of this lab still present (for a test of close())."""
        out = []
        links = _run("ip", "-o", "link").stdout.decode()
        out += [w for w in (self.bridge, "dqv%dh" % self.pid) if w in links]
        spaces = _run("ip", "netns", "list").stdout.decode()
        out += ["netns " + ns for ns, _ in self.spaces.values() if ns in spaces]
        routes = _run("ip", "route", "show", "table", "all").stdout.decode()
        if self.subnet and self.subnet + ".0/24" in routes:
            out.append("route " + self.subnet + ".0/24")
        return out
