"""The hosts of tests/proof/netns.py: the relay carries TCP, a cut drops everything (a live
connection too), a heal brings that same connection back, and close leaves nothing behind.

No database: a tiny echo server in this process stands in for it, and a Python child in the
namespace is the client.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proof import netns
from tests.proof.netns import Host

pytestmark = [pytest.mark.proof]

# A client in the namespace: connect, then for each line on stdin send it and wait up to
# TIMEOUT seconds for its echo; print "ok <line>" or "timeout <line>". Echoes that arrive
# late count for a later wait (the stream is TCP's, nothing is lost after a heal).
CLIENT = r"""
import socket, sys
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sock = socket.create_connection((host, port), timeout=5)
sock.settimeout(timeout)
received = b""
print("connected", flush=True)
for line in sys.stdin:
    word = line.strip().encode()
    sock.sendall(word + b"\n")
    try:
        while word + b"\n" not in received:
            received += sock.recv(4096)
        print("ok", word.decode(), flush=True)
    except TimeoutError:
        print("timeout", word.decode(), flush=True)
"""


@pytest.fixture
def host() -> Iterator[Host]:
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with Host(f"t{os.getpid() % 1000}") as made:
        yield made


@pytest.fixture
def echo() -> Iterator[int]:
    """Serve an echo on 127.0.0.1 (like the database servers: loopback only); yield its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def start_client(host: Host, address: tuple[str, int], timeout: float) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", CLIENT, address[0], str(address[1]), str(timeout)]
    client = subprocess.Popen(
        host.command(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert client.stdout.readline().strip() == "connected"
    return client


def ask(client: subprocess.Popen[str], word: str) -> str:
    client.stdin.write(word + "\n")
    client.stdin.flush()
    return client.stdout.readline().strip()


def connect_from(host: Host, address: tuple[str, int], timeout: float) -> str:
    """Open a new connection from the namespace; return "ok" or the error's name."""
    code = (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection({address!r}, timeout={timeout}).close(); print('ok')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    result = subprocess.run(
        host.command([sys.executable, "-c", code]), capture_output=True, text=True, timeout=30
    )
    return result.stdout.strip()


def test_relay_cut_and_heal(host: Host, echo: int) -> None:
    address = host.forward(echo)
    assert address == (host.gateway, echo)
    # The server listens on loopback only: without the relay the namespace cannot reach it.
    assert connect_from(host, ("127.0.0.1", echo), 1) == "ConnectionRefusedError"
    client = start_client(host, address, timeout=1.0)
    try:
        assert ask(client, "before") == "ok before"
        host.cut()
        # The established connection gets nothing through, and neither end is told.
        assert ask(client, "during") == "timeout during"
        assert host.relayed_connections() == 2
        # A new connection cannot be made either: its SYN is dropped, it times out.
        assert connect_from(host, address, 1) == "TimeoutError"
        host.heal()
        # The same connection works again: the kernel's retransmissions get through.
        client.stdin.write("after\n")
        client.stdin.flush()
        deadline = time.monotonic() + 20
        line = client.stdout.readline().strip()
        while line != "ok after" and time.monotonic() < deadline:
            line = client.stdout.readline().strip()
        assert line == "ok after"
        assert connect_from(host, address, 2) == "ok"
    finally:
        client.kill()
        client.wait()


def test_degrade_slows_without_cutting(host: Host, echo: int) -> None:
    address = host.forward(echo)
    client = start_client(host, address, timeout=10.0)
    try:
        started = time.monotonic()
        assert ask(client, "fast") == "ok fast"
        fast = time.monotonic() - started
        host.degrade(loss=0.2, delay=0.3)
        started = time.monotonic()
        for n in range(3):
            assert ask(client, f"slow{n}") == f"ok slow{n}"
        slow = time.monotonic() - started
        assert slow >= 3 * 2 * 0.3, (fast, slow)  # the relay's delay, each way
        host.degrade()
        assert ask(client, "whole") == "ok whole"
    finally:
        client.kill()
        client.wait()


def test_close_leaves_nothing(host: Host, echo: int) -> None:
    address = host.forward(echo)
    host.cut()
    host.close()
    host.close()  # idempotent
    assert (
        host.name
        not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert host.root_link not in links
    assert (
        host.gateway
        not in subprocess.run(
            ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True
        ).stdout
    )
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=1).close()
    assert host.relayed_connections() == 0


def test_stale_namespaces_of_dead_processes_are_removed(host: Host) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{netns.PREFIX}-{dead.pid}-stale"
    link = f"{netns.PREFIX}{dead.pid}x0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    peer = f"{netns.PREFIX}{dead.pid}y0"
    subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name", peer], check=True)
    removed = netns.remove_stale()
    assert name in removed and link in removed
    assert (
        name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    assert link not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    # Our own (live) host is left alone.
    assert (
        host.name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )


def test_sysctl_is_the_namespaces_own(host: Host) -> None:
    path = Path("/proc/sys/net/ipv4/tcp_retries2")
    root = path.read_text().strip()
    previous = host.sysctl("ipv4.tcp_retries2", 5)
    assert previous == root
    inside = subprocess.run(host.command(["cat", str(path)]), capture_output=True, text=True)
    assert inside.stdout.strip() == "5"
    assert path.read_text().strip() == root  # the root namespace's is untouched
