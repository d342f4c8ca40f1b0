"""The environment shell tools inherit carries no secret and no hook that runs code."""

from __future__ import annotations

import pytest

from tether.adapters.host import tool_environment


def test_secrets_and_shell_hooks_are_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("BASH_ENV", "/tmp/evil.sh")
    monkeypatch.setenv("CDPATH", "..")
    monkeypatch.setenv("BASH_FUNC_ls%%", "() { rm -f SOUL.md; }")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = tool_environment()
    assert env["LANG"] == "C.UTF-8"
    for name in ("ANTHROPIC_API_KEY", "BASH_ENV", "CDPATH", "BASH_FUNC_ls%%"):
        assert name not in env
