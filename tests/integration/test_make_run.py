"""`make run` on a clean checkout: creates its virtual environment, runs the demo, exits 0."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.fail("make run test needs a git checkout to copy from")
    return [line for line in out.splitlines() if line]


def test_make_run_on_a_clean_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    for name in _tracked_files():
        target = checkout / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, target)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TETHER_", "ANTHROPIC_", "VIRTUAL_ENV"))}
    env["TETHER_STATE_DIR"] = str(tmp_path / "state")
    env["HOME"] = str(tmp_path / "home")
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    result = subprocess.run(["make", "run"], cwd=checkout, env=env, capture_output=True,
                            text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    # The packaging is clean: setuptools has nothing to warn about.
    assert "is deprecated" not in output and "is absent from the `packages`" not in output
    assert "rule no-todo interrupted the reply" in output
    assert "denied" in output and "outside the workspace" in output
    assert "== event timeline" in output and "TurnCompleted" in output
    assert "is ready for review" in output and "PlanReviewed" in output
    assert "def multiply(a, b):" in output  # implemented after the plan was approved
