"""The HTTP connector's token: made once, owner-only, rotatable, refused when exposed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tether.adapters.http_token import TokenError, load_token, rotate_token, token_path


def test_the_token_is_made_once_and_only_its_owner_can_read_it(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    token = load_token(state)
    assert len(token) >= 40 and load_token(state) == token
    assert stat.S_IMODE(os.stat(token_path(state)).st_mode) == 0o600


def test_rotating_replaces_it(tmp_path: Path) -> None:
    state = str(tmp_path)
    old = load_token(state)
    new = rotate_token(state)
    assert new != old and load_token(state) == new
    assert stat.S_IMODE(os.stat(token_path(state)).st_mode) == 0o600


def test_a_token_others_can_read_is_refused(tmp_path: Path) -> None:
    state = str(tmp_path)
    load_token(state)
    os.chmod(token_path(state), 0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        load_token(state)


def test_a_link_in_place_of_the_token_is_not_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "elsewhere").write_text("guessable\n")
    os.symlink(tmp_path / "elsewhere", token_path(str(state)))
    with pytest.raises(OSError):
        load_token(str(state))
