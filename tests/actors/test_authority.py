"""Who may decide for a session: its owner, and the approvers named for the chat."""

from __future__ import annotations

from tether.actors.authority import may_decide

APPROVERS = {"team": ["carol"], "*": ["root-admin"]}


def test_the_owner_and_the_chats_approvers_may_decide() -> None:
    assert may_decide("ana", "ana", "team", APPROVERS)
    assert may_decide("carol", "ana", "team", APPROVERS)
    assert may_decide("root-admin", "ana", "elsewhere", APPROVERS)  # "*": every chat


def test_everyone_else_may_not() -> None:
    assert not may_decide("bo", "ana", "team", APPROVERS)
    assert not may_decide("carol", "ana", "elsewhere", APPROVERS)  # another chat's approver
    assert not may_decide("", "", "team", APPROVERS)  # no principal is nobody's owner
    assert not may_decide("Ana", "ana", "team", APPROVERS)  # principals are exact
    assert not may_decide("*", "ana", "team", APPROVERS)  # "*" is a channel, not a user
