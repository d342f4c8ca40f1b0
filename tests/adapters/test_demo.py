"""The demo's settings: its scripted messages never meet the inbox's rate limit."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tether.adapters.config import Settings
from tether.adapters.demo import DEMO_MESSAGES, demo_settings


def test_the_demo_sends_faster_than_a_person_without_being_rate_limited(
        tmp_path: Path) -> None:
    settings = demo_settings(Settings(state_dir=str(tmp_path)), dt.datetime.now(dt.UTC))
    # Every message, the plan review's answer and the approvals, all at once.
    assert settings.middleware.burst >= 2 * len(DEMO_MESSAGES)
    assert Settings().middleware.burst == 5  # the person's limit is unchanged
