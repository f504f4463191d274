"""Signal handlers that cannot deadlock the worker they stop (``worker/signals.py``).

A handler runs in the main thread between two bytecodes. When the main thread is inside
``Event.wait()`` it may hold the event's lock at that instant; a handler that calls ``set()`` on
that event then waits for itself forever. Each scenario runs in a child interpreter with a time
limit: the naive handler hangs (which is why the relay exists), the relay does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.support import REPO_ROOT

ENV = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}

# The main thread holds the event's lock when the signal lands, as inside Event.wait().
SCENARIO = """
import os, signal, threading, time
event = threading.Event()
{install}
with event._cond:
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.2)  # the handler runs here, between two bytecodes
print("set" if event.wait(5) else "not set", flush=True)
"""
NAIVE = "signal.signal(signal.SIGUSR1, lambda signum, frame: event.set())"
RELAYED = (
    "import django; django.setup()\n"
    "from django_durable_jobs.worker.signals import relay_signals\n"
    "relay_signals({signal.SIGUSR1: lambda signum: event.set()})"
)


def _run(install: str) -> str | None:
    """Return what the scenario printed, or None when it hung."""
    script = textwrap.dedent(SCENARIO).format(install=install)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=REPO_ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        return None
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_setting_an_event_inside_a_handler_hangs_the_main_thread():
    assert _run(NAIVE) is None


def test_a_relayed_signal_sets_the_event_once_the_main_thread_lets_go():
    assert _run(RELAYED) == "set"


def test_relayed_signals_are_acted_on_in_order_and_handlers_restored():
    script = textwrap.dedent("""
        import os, signal, threading, time
        import django; django.setup()
        from django_durable_jobs.worker.signals import relay_signals
        seen, done = [], threading.Event()
        def note(signum):
            seen.append(signal.Signals(signum).name)
            if len(seen) == 3:
                done.set()
        restore = relay_signals({signal.SIGUSR1: note, signal.SIGUSR2: note})
        for signum in (signal.SIGUSR2, signal.SIGUSR1, signal.SIGUSR2):
            os.kill(os.getpid(), signum)
            time.sleep(0.05)
        assert done.wait(5), seen
        restore()
        relays = [t for t in threading.enumerate() if t.name == "durable-jobs-signals"]
        assert relays == [], relays  # ended: a fork that follows runs no other thread
        print(",".join(seen), signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL, flush=True)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SIGUSR2,SIGUSR1,SIGUSR2 True"
