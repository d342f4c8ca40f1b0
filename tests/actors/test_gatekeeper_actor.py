"""The gatekeeper actor over NATS: every decision recorded, each call judged on its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tether.actors.gatekeeper.deny_lists import action_hash
from tether.actors.runtime import ask
from tether.adapters.fake_llm import FakeLLM
from tether.adapters.host import Host
from tether.events.decisions import ToolDecision, decision_uuid
from tether.events.messages import ToolProposal, Verdict


def _propose(host: Host, sid: str, call: str, tool: str, tool_input: dict[str, str],
             workspace: Path) -> Verdict:
    proposal = ToolProposal(session_id=sid, call_id=call, tool=tool, input=tool_input,
                            workspace=str(workspace),
                            action_hash=action_hash(tool, tool_input))
    return ask(host.bus, host.subjects.gatekeeper, proposal, Verdict, timeout=10)


def test_a_reused_call_id_is_judged_again_and_recorded_apart(
    database_url: str,
    workspace: Path,
    fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
) -> None:
    host = make_host(fake_llm("responses: []"), database_url=database_url)
    denied = _propose(host, "s1", "toolu_1", "read_file", {"path": "/etc/passwd"}, workspace)
    assert denied.decision == "deny" and "outside the workspace" in denied.reason
    # The same id for a different call (another session, or the same after a restart of
    # whatever numbers the calls) gets its own judgement, not the old one.
    allowed = _propose(host, "s1", "toolu_1", "list_dir", {"path": "."}, workspace)
    assert allowed.decision == "allow"
    other = _propose(host, "s2", "toolu_1", "list_dir", {"path": "."}, workspace)
    assert other.decision == "allow"
    # A proposal re-sent unchanged keeps its first, recorded decision.
    again = _propose(host, "s1", "toolu_1", "read_file", {"path": "/etc/passwd"}, workspace)
    assert again.decision == "deny" and again.reason == denied.reason

    recorded = [
        host.app.load(decision_uuid(sid, "toolu_1", digest), ToolDecision)
        for sid, digest in (
            ("s1", action_hash("read_file", {"path": "/etc/passwd"})),
            ("s1", action_hash("list_dir", {"path": "."})),
            ("s2", action_hash("list_dir", {"path": "."})),
        )
    ]
    assert [d.decision if d else None for d in recorded] == ["deny", "allow", "allow"]
    assert recorded[0] is not None and recorded[0].session_id == "s1"


def test_a_call_decided_before_gets_its_first_decision_whatever_it_would_get_now(
    database_url: str, workspace: Path, fake_llm: Callable[[str], FakeLLM],
    make_host: Callable[..., Host],
) -> None:
    """The audit record is immutable: the save of the new decision conflicts with the
    stored one, and the stored one is given (and stays the only one)."""
    host = make_host(fake_llm("responses: []"), database_url=database_url)
    digest = action_hash("list_dir", {"path": "."})
    first = ToolDecision(call_id="toolu_9", session_id="s9", tool="list_dir",
                         tool_input={"path": "."}, action_hash=digest, decision="deny",
                         reason="decided by an earlier policy", tier="policy")
    host.app.save(first)
    verdict = _propose(host, "s9", "toolu_9", "list_dir", {"path": "."}, workspace)
    assert (verdict.decision, verdict.reason) == ("deny", "decided by an earlier policy")
    stored = host.app.load(decision_uuid("s9", "toolu_9", digest), ToolDecision)
    assert stored is not None and stored.version == 1 and stored.decision == "deny"
    assert host.system.failures == 0


def test_a_proposal_whose_hash_does_not_match_is_denied(
    workspace: Path, fake_llm: Callable[[str], FakeLLM], make_host: Callable[..., Host]
) -> None:
    host = make_host(fake_llm("responses: []"))
    proposal = ToolProposal(session_id="s1", call_id="c1", tool="list_dir", input={"path": "."},
                            workspace=str(workspace), action_hash="0" * 64)
    verdict = ask(host.bus, host.subjects.gatekeeper, proposal, Verdict, timeout=10)
    assert verdict.decision == "deny" and "hash" in verdict.reason
