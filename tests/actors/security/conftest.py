"""A real workspace with protected files, symlinks in and out, a hard link and a home."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tether.actors.gatekeeper.security import ActionRequest, Evaluation, PipelineConfig, evaluate

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@dataclass
class Env:
    """The test workspace, the folder outside it, the fake home and a pipeline config."""

    ws: Path
    out: Path
    home: Path
    config: PipelineConfig

    def run(self, tool: str, payload: dict[str, Any]) -> Evaluation:
        return evaluate(ActionRequest("req-1", tool, payload, T0), str(self.ws), self.config)

    def shell(self, command: str) -> Evaluation:
        return self.run("run_shell", {"command": command})


@pytest.fixture
def env(tmp_path: Path) -> Env:
    ws = tmp_path / "ws"
    out = tmp_path / "outside"
    home = tmp_path / "home"
    for folder in (
        ws / "src",
        ws / "sub" / "deep",
        ws / ".tether" / "rules",
        out,
        home / ".ssh",
        home / ".aws",
    ):
        folder.mkdir(parents=True)
    for name in (
        "SOUL.md",
        "IDENTITY.md",
        "GUARDRAILS.md",
        "AGENTS.md",
        "MEMORY.md",
        "USER.md",
        "README.md",
        "tether.toml",
    ):
        (ws / name).write_text(f"{name}\n")
    (ws / ".tether" / "config.toml").write_text("x = 1\n")
    (ws / ".tether" / "rules" / "style.md").write_text("rule\n")
    (ws / "src" / "main.py").write_text("print('hi')\n")
    (ws / ".env").write_text("TOKEN=x\n")
    (out / "secret.txt").write_text("secret\n")
    (out / "SOUL.md").write_text("evil soul\n")
    (home / ".ssh" / "id_rsa").write_text("KEY\n")
    (home / ".aws" / "credentials").write_text("[default]\n")
    os.symlink(ws / "SOUL.md", ws / "notes.md")  # symlink in the workspace to a protected file
    os.symlink("../SOUL.md", ws / "sub" / "up.md")  # relative symlink to it
    os.symlink(out, ws / "exit")  # folder symlink leading out
    os.symlink(out / "secret.txt", ws / "secret-link.txt")  # file symlink leading out
    os.symlink(ws / "MEMORY.md", ws / "mem-link.md")
    os.symlink(ws / "AGENTS.md", ws / "agents-link.md")
    os.link(ws / "SOUL.md", ws / "hard.md")  # a hard link to a protected file
    os.symlink(ws / "sub", out / "into-ws")  # outside link pointing into the workspace
    os.symlink(ws / "SOUL.md", out / "soul-alias")
    config = PipelineConfig(home=str(home))
    return Env(ws=ws, out=out, home=home, config=config)
