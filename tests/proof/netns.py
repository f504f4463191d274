"""Make real hosts out of Linux network namespaces, and cut the network between them.

A :class:`Host` is a network namespace joined to the root namespace by a veth pair on a
``10.231.N.0/30`` of its own: the root side is ``gateway`` (``10.231.N.1``), the namespace side
is ``address`` (``10.231.N.2``). The database servers listen on 127.0.0.1 only, so
:meth:`Host.forward` starts a small TCP relay in this process on ``(gateway, port)`` that
carries each connection on to the server; a process started with :meth:`Host.command` and
``DURABLE_JOBS_DB_HOST=gateway`` then reaches the database over the link and nothing else.

:meth:`Host.cut` drops every packet both ways, established connections included, without
telling either end: the sender's kernel keeps retransmitting, as it would behind a dead
switch. It uses iptables ``DROP`` inside the namespace (INPUT and OUTPUT on its veth);
without iptables, ``tc netem loss 100%``; without either, the link goes down. Which one is
``Host.method``. :meth:`Host.heal` takes the cut back.

Namespaces are named ``djj-<pid>-<name>`` and veths ``djj<pid>x<N>``: parallel runs never
collide, and the first Host of a process removes the ones whose process is dead (a run that
was killed outright). Everything else is removed by :meth:`Host.close`, which the
``__exit__`` of a ``with Host(...)`` block, a fixture finalizer and, last, ``atexit`` call.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import select
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

PREFIX = "djj"
SUBNET = "10.231"
LOCK_PATH = Path("/tmp/durable-jobs-netns.lock")
NAME_LIMIT = 15  # IFNAMSIZ - 1: the longest interface name Linux takes
CHUNK = 65536

_open_hosts: set[Host] = set()
_stale_removed = False
_registry_lock = threading.Lock()


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unavailable_reason() -> str | None:
    """Return None when namespaces, veth pairs and cuts can be made here, else why not.

    The answer is for skip reasons: it tries the real thing (a namespace with a veth pair
    and a cut) once per process and remembers the outcome.
    """
    global _unavailable
    if _unavailable is not _UNKNOWN:
        return _unavailable
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        _unavailable = "network namespaces need root (run the tests as root)"
    elif shutil.which("ip") is None:
        _unavailable = "iproute2's ip is not installed (scripts/ensure-netns installs it)"
    else:
        try:
            with Host("probe") as host:
                host.cut()
                host.heal()
        except Exception as exc:  # any failure to make a host is the reason to skip
            _unavailable = f"cannot make a network namespace with a veth pair here: {exc}"
        else:
            _unavailable = None
    return _unavailable


_UNKNOWN = object()
_unavailable: object = _UNKNOWN


def remove_stale() -> list[str]:
    """Delete the namespaces and veths of ours whose process is dead; return their names."""
    removed = []
    listing = _run(["ip", "netns", "list"], check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{PREFIX}-(\d+)-.+", name)
        if match and not _pid_alive(int(match.group(1))):
            _run(["ip", "netns", "delete", name], check=False)
            removed.append(name)
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    for name in re.findall(rf"^\d+: ({PREFIX}\d+x\d+)[@:]", links, re.MULTILINE):
        pid = int(re.fullmatch(rf"{PREFIX}(\d+)x\d+", name).group(1))
        if not _pid_alive(pid):
            _run(["ip", "link", "delete", name], check=False)
            removed.append(name)
    return removed


def _used_subnets() -> set[int]:
    text = _run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
    return {int(n) for n in re.findall(rf"inet {re.escape(SUBNET)}\.(\d+)\.", text)}


class _Relay:
    """A threaded TCP relay: accept on ``listen``, connect each client on to ``target``.

    ``delay`` (seconds) holds every chunk back before passing it on, both ways: a slow link.
    """

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.delay = 0.0
        self.server = socket.create_server(listen)
        self.address = self.server.getsockname()[:2]
        self.sockets: set[socket.socket] = set()
        self.upstreams: dict[socket.socket, int] = {}
        self.lock = threading.Lock()
        self.closed = False
        self.wake_r, self.wake_w = os.pipe()
        self.thread = threading.Thread(target=self._accept, name=f"relay {listen}", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            ready, _, _ = select.select([self.server, self.wake_r], [], [])
            if self.wake_r in ready or self.closed:
                return
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.closed:
                    client.close()
                    upstream.close()
                    return
                self.sockets.update((client, upstream))
                self.upstreams[upstream] = upstream.getsockname()[1]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                if self.delay:
                    time.sleep(self.delay)
                sink.sendall(data)
        except OSError:
            # One side is gone (reset, closed by close()): so is the connection, as the
            # server would see it when its client's socket closes.
            for sock in (source, sink):
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.discard(sock)
            self.upstreams.pop(sock, None)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def connections(self) -> int:
        """Return how many sockets (client and server sides) the relay holds open."""
        with self.lock:
            return len(self.sockets)

    def ports(self) -> list[int]:
        """Return the local ports of the open connections to the target."""
        with self.lock:
            return sorted(self.upstreams.values())

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            sockets = list(self.sockets)
        os.write(self.wake_w, b"x")
        self.thread.join(timeout=5)
        self.server.close()
        for sock in sockets:
            self._drop(sock)
        os.close(self.wake_r)
        os.close(self.wake_w)


class Host:
    """A network namespace joined to the root namespace by a veth pair, with TCP relays."""

    name: str
    gateway: str
    address: str
    method: str

    def __init__(self, name: str) -> None:
        """Make the namespace ``djj-<pid>-<name>``, its veth pair and addresses; lo up."""
        global _stale_removed
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"Host name {name!r}: use letters, digits, '_', '.' and '-'.")
        pid = os.getpid()
        self.name = f"{PREFIX}-{pid}-{name}"
        self.relays: list[_Relay] = []
        self.cut_rules: list[list[str]] = []
        self.loss_rules: list[list[str]] = []
        self.closed = False
        self.made_namespace = False
        self.root_link = ""
        with open(LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one subnet per host, even across processes
            try:
                if not _stale_removed:
                    remove_stale()
                    _stale_removed = True
                used = _used_subnets()
                free = [n for n in range(1, 255) if n not in used]
                if not free:
                    raise RuntimeError(f"no free {SUBNET}.N.0/30 subnet is left")
                number = free[0]
                self.gateway = f"{SUBNET}.{number}.1"
                self.address = f"{SUBNET}.{number}.2"
                self.root_link = f"{PREFIX}{pid}x{number}"
                self.link = f"{PREFIX}{pid}y{number}"
                assert len(self.link) <= NAME_LIMIT, self.link
                with _registry_lock:
                    _open_hosts.add(self)
                try:
                    self._make()
                except BaseException:
                    self.close()
                    raise
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        self.method = self._choose_method()

    def __repr__(self) -> str:
        return f"<Host {self.name} {self.address} via {self.gateway} cut by {self.method}>"

    def _make(self) -> None:
        _run(["ip", "netns", "add", self.name])
        self.made_namespace = True
        _run(["ip", "link", "add", self.root_link, "type", "veth", "peer", "name", self.link])
        _run(["ip", "link", "set", self.link, "netns", self.name])
        _run(["ip", "addr", "add", f"{self.gateway}/30", "dev", self.root_link])
        _run(["ip", "link", "set", self.root_link, "up"])
        _run(self.command(["ip", "addr", "add", f"{self.address}/30", "dev", self.link]))
        _run(self.command(["ip", "link", "set", self.link, "up"]))
        _run(self.command(["ip", "link", "set", "lo", "up"]))

    def _choose_method(self) -> str:
        if (
            shutil.which("iptables")
            and _run(self.command(["iptables", "-S"]), check=False).returncode == 0
        ):
            return "iptables"
        if shutil.which("tc"):
            probe = ["tc", "qdisc", "add", "dev", self.link, "root", "netem", "delay", "0ms"]
            if _run(self.command(probe), check=False).returncode == 0:
                _run(self.command(["tc", "qdisc", "del", "dev", self.link, "root"]), check=False)
                return "netem"
        return "link"

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self, argv: list[str]) -> list[str]:
        """Return ``argv`` prefixed to run inside the namespace (``ip netns exec`` execs it)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def forward(self, port: int, target: tuple[str, int] | None = None) -> tuple[str, int]:
        """Listen on (gateway, port) in the root namespace and relay each connection to target.

        ``target`` defaults to ("127.0.0.1", port). Return (gateway, port), the address a
        process in the namespace connects to.
        """
        relay = _Relay((self.gateway, port), target or ("127.0.0.1", port))
        self.relays.append(relay)
        return relay.address

    def relayed_connections(self) -> int:
        """Return how many sockets the relays hold open (two per relayed connection)."""
        return sum(relay.connections() for relay in self.relays)

    def sysctl(self, name: str, value: str | int) -> str:
        """Set a sysctl of the namespace's own network stack; return its previous value.

        For example ``net.ipv4.tcp_retries2``: how long this host's TCP keeps retransmitting
        unacknowledged data before it gives the connection up (the kernel-wide stand-in for a
        client's ``tcp_user_timeout``).
        """
        # /proc/sys/net shows the network namespace of the process that opens it; no procps.
        path = "/proc/sys/net/" + name.removeprefix("net.").replace(".", "/")
        previous = _run(self.command(["cat", path])).stdout.strip()
        _run(self.command(["sh", "-c", 'echo "$1" > "$2"', "sysctl", str(value), path]))
        return previous

    def relayed_ports(self) -> list[int]:
        """Return the client ports the server sees for the connections relayed from this host.

        The relay connects from 127.0.0.1, so these ports are how to pick this host's sessions
        out of ``pg_stat_activity.client_port`` or MariaDB's processlist.
        """
        return sorted(port for relay in self.relays for port in relay.ports())

    def cut(self) -> None:
        """Drop every packet both ways, established connections included."""
        if self.cut_rules:
            return
        if self.method == "iptables":
            for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
                rule = [chain, flag, self.link, "-j", "DROP"]
                _run(self.command(["iptables", "-I", *rule]))
                self.cut_rules.append(rule)
        elif self.method == "netem":
            _run(
                self.command(
                    ["tc", "qdisc", "add", "dev", self.link, "root", "netem", "loss", "100%"]
                )
            )
            _run(["tc", "qdisc", "add", "dev", self.root_link, "root", "netem", "loss", "100%"])
            self.cut_rules.append(["netem"])
        else:
            _run(self.command(["ip", "link", "set", self.link, "down"]))
            self.cut_rules.append(["link"])

    def heal(self) -> None:
        """Take the cut back: packets flow again (retransmissions get through)."""
        for rule in self.cut_rules:
            if rule == ["netem"]:
                _run(self.command(["tc", "qdisc", "del", "dev", self.link, "root"]), check=False)
                _run(["tc", "qdisc", "del", "dev", self.root_link, "root"], check=False)
            elif rule == ["link"]:
                _run(self.command(["ip", "link", "set", self.link, "up"]))
            else:
                _run(self.command(["iptables", "-D", *rule]))
        self.cut_rules = []

    def degrade(self, *, loss: float = 0.0, delay: float = 0.0) -> None:
        """Make the link slow and lossy without cutting it.

        ``loss`` (0..1) of the packets are dropped each way at random (iptables' statistic
        match, or netem); ``delay`` seconds are added to every chunk the relays pass on, each
        way. ``degrade()`` with no arguments makes the link whole again.
        """
        for relay in self.relays:
            relay.delay = delay
        for rule in self.loss_rules:
            _run(self.command(["iptables", "-D", *rule]), check=False)
        self.loss_rules = []
        if not loss:
            return
        if self.method != "iptables":
            raise RuntimeError(f"random loss needs iptables here, the host cuts by {self.method}")
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            rule = [chain, flag, self.link, "-m", "statistic", "--mode", "random"]
            rule += ["--probability", f"{loss:.4f}", "-j", "DROP"]
            _run(self.command(["iptables", "-I", *rule]))
            self.loss_rules.append(rule)

    def close(self) -> None:
        """Stop the relays, delete the namespace and the veth; safe to call again."""
        if self.closed:
            return
        self.closed = True
        for relay in self.relays:
            relay.close()
        self.relays = []
        if self.made_namespace:
            # Deleting the namespace kills its processes' network, not the processes: the
            # caller stops those first. The veth goes with the namespace, but asynchronously;
            # deleting the root side too means it is gone when close() returns.
            _run(["ip", "netns", "delete", self.name], check=False)
        if self.root_link:
            _run(["ip", "link", "delete", self.root_link], check=False)
        with _registry_lock:
            _open_hosts.discard(self)


@atexit.register
def _close_open_hosts() -> None:
    for host in list(_open_hosts):
        host.close()
