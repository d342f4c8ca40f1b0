"""One engine per namespace and state directory: a second is refused, naming the first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.engine_lock import EngineLock, EngineRunning, lock_path, running_engine

HOLD = """
import sys, time
from adapters.engine_lock import EngineLock
EngineLock(sys.argv[1], "ns").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_engine_is_refused_until_the_first_dies(tmp_path: Path) -> None:
    state = str(tmp_path)
    first = subprocess.Popen([sys.executable, "-c", HOLD, state], stdout=subprocess.PIPE,
                             text=True, cwd=os.getcwd())
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        with pytest.raises(EngineRunning) as refused:
            EngineLock(state, "ns").acquire()
        assert f"pid {first.pid}" in str(refused.value)
        assert (running_engine(state, "ns") or {}).get("pid") == first.pid
        EngineLock(state, "other").acquire().release()  # another namespace is another engine
    finally:
        os.kill(first.pid, signal.SIGKILL)  # however it dies, the lock goes with it
        first.wait()
    assert running_engine(state, "ns") is None
    lock = EngineLock(state, "ns").acquire()
    assert (running_engine(state, "ns") or {}).get("pid") == os.getpid()
    lock.release()
    assert os.path.exists(lock_path(state, "ns"))  # nobody deletes it
