"""`Sources.send_signal`: the process the user chose, or nothing. A pid that now names another
process (the chosen one ended and the pid was given out again, or the view was paused) is not
signalled, and who may signal is asked again when `y` is pressed."""

from __future__ import annotations

import signal
import subprocess
import sys

from gputop_diag import sim
from gputop_diag.sources import Sources


def test_a_pid_started_at_another_time_is_not_signalled():
    src = sim.build("compute-bound")
    started = src.psutil.Process(41200).create_time()
    ok, said = src.send_signal(41200, signal.SIGTERM, started=started - 3600)
    assert not ok and "now another process" in said and "nothing sent" in said
    assert src.psutil.pid_exists(41200)
    ok, said = src.send_signal(41200, signal.SIGTERM, started=started)
    assert ok and said == "sent SIGTERM to pid 41200"


def test_another_users_process_is_refused_when_y_is_pressed_too():
    src = sim.build("compute-bound")  # bob's notebook: 41440
    ok, said = src.send_signal(41440, signal.SIGKILL)
    assert not ok and "belongs to bob" in said and "nothing sent" in said
    assert src.psutil.pid_exists(41440)


def test_a_real_child_is_signalled_only_while_it_is_the_one_chosen():
    real = Sources.real()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = real.psutil.Process(child.pid).create_time()
        ok, said = real.send_signal(child.pid, signal.SIGTERM, started=started + 5)
        assert not ok and child.poll() is None  # not the process chosen: left alone
        ok, said = real.send_signal(child.pid, signal.SIGTERM, started=started)
        assert ok and child.wait(timeout=10) == -signal.SIGTERM
        ok, said = real.send_signal(child.pid, signal.SIGTERM, started=started)
        assert not ok and "ended" in said  # reaped: nothing to signal
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
