"""Smoke runs of the benchmarks in ``--quick`` mode: they complete and print their ratios.

No timing is asserted: figures depend on the machine. Each benchmark runs in its own
interpreter, as a user runs it, against the test session's NATS server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tether.adapters.sandbox import probe

ROOT = Path(__file__).resolve().parents[2]
RATIO = r"RATIO {} tether/raw = \d+\.\d\d$"


def run_bench(*args: str) -> str:
    """Run ``python -m <args>`` from the project root; return stdout (fails on exit != 0)."""
    env = dict(os.environ)
    env.pop("TETHER_NATS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_ask_quick_prints_its_ratio(nats_url: str) -> None:
    out = run_bench("bench.ask", "--quick", "--nats", nats_url)
    assert re.search(RATIO.format("ask"), out, re.MULTILINE), out
    assert "tether ask" in out and "raw nats-py" in out


def test_append_quick_prints_its_ratio() -> None:
    out = run_bench("bench.append", "--quick")
    assert re.search(RATIO.format("append"), out, re.MULTILINE), out
    assert "TetherApplication.session" in out


def test_turn_quick_prints_its_ratios(nats_url: str) -> None:
    out = run_bench("bench.turn", "--quick", "--nats", nats_url)
    for name in ("turn", "toolturn", "turn back-to-back", "toolturn back-to-back"):
        assert re.search(RATIO.format(name), out, re.MULTILINE), out
    assert "engine overhead (p50, settled)" in out


def test_interrupt_quick_prints_its_ratio(nats_url: str) -> None:
    out = run_bench("bench.interrupt", "--quick", "--nats", nats_url)
    assert re.search(r"RATIO kill streaming/idle = \d+\.\d\d$", out, re.MULTILINE), out
    assert "kill mid-stream" in out


def test_ttsr_quick_prints_its_ratio() -> None:
    out = run_bench("bench.ttsr", "--quick")
    assert re.search(r"RATIO ttsr monitor/naive @ 4 KB = \d+\.\d{4}$", out, re.MULTILINE), out
    assert "monitor us" in out and "naive us" in out


def test_gate_quick_prints_its_ratios(nats_url: str) -> None:
    out = run_bench("bench.gate", "--quick", "--nats", nats_url)
    for name in ("gate judge/raw-policy", "gate nats/raw", "redact stream/raw"):
        assert re.search(rf"RATIO {name} = \d+\.\d\d$", out, re.MULTILINE), out


def test_fanout_quick_prints_its_ratio(nats_url: str) -> None:
    out = run_bench("bench.fanout", "--quick", "--nats", nats_url)
    assert re.search(r"RATIO fanout router/raw = \d+\.\d\d$", out, re.MULTILINE), out
    assert "sustained:" in out and "per idle session" in out


def test_context_quick_prints_its_ratio() -> None:
    out = run_bench("bench.context", "--quick")
    assert re.search(r"RATIO context build/reload @100 = \d+\.\d\d$", out, re.MULTILINE), out
    assert "reload+build ms" in out and "catch-up ms" in out


def test_sandbox_quick_prints_its_ratios() -> None:
    out = run_bench("bench.sandbox", "--quick")
    if not probe().usable:
        assert "SKIPPED, bubblewrap is not usable here" in out and "RATIO" not in out, out
        return
    commands = ["true", "ls"] + (["git status"] if shutil.which("git") else [])
    for command in commands:
        for path in ("", "run_shell "):
            assert re.search(rf"RATIO sandbox/plain {path}{command} = \d+\.\d\d$", out,
                             re.MULTILINE), out
    assert re.search(r"^GOAL sandbox under 10 ms added per call: (met|NOT met)", out,
                     re.MULTILINE), out
    assert "where a sandboxed `true` goes" in out and "placeholders made and removed" in out


def test_all_benchmarks_quick(nats_url: str) -> None:
    out = run_bench("bench", "--quick", "--nats", nats_url, "--only", "ask", "--only", "append")
    for name in ("ask", "append"):
        assert re.search(RATIO.format(name), out, re.MULTILINE), out


def test_help_describes_the_options() -> None:
    out = run_bench("bench", "--help")
    assert "--quick" in out and "--nats" in out
