"""Action requests, hashes and enrichment."""

from __future__ import annotations

from tests.actors.security.conftest import T0, Env
from tether.actors.gatekeeper.deny_lists import action_hash as gatekeeper_hash
from tether.actors.gatekeeper.security import ActionRequest, action_hash, enrich


def test_hash_equals_the_gatekeeper_hash_and_ignores_key_order() -> None:
    a = {"path": "a.txt", "content": "é", "meta": {"b": 1, "a": [1, 2]}}
    b = {"meta": {"a": [1, 2], "b": 1}, "content": "é", "path": "a.txt"}
    assert action_hash("write_file", a) == action_hash("write_file", b)
    assert action_hash("write_file", a) == gatekeeper_hash("write_file", a)
    assert action_hash("write_file", a) != action_hash("read_file", a)


def test_hash_is_stable_across_runs() -> None:
    digest = action_hash("run_shell", {"command": "ls"})
    # pinned: a change here breaks every recorded hash in the audit trail
    assert digest == "2ce132e620b21edb8aeb94674e9baed0e8b4f094bd312a36b39a9a54096cc05f"
    request = ActionRequest("id", "run_shell", {"command": "ls"}, T0)
    assert request.hash == digest


def _enrich(env: Env, tool: str, payload: dict[str, object]):  # type: ignore[no-untyped-def]
    return enrich(ActionRequest("r", tool, dict(payload), T0), str(env.ws), str(env.home))


def test_paths_are_resolved_and_originals_kept(env: Env) -> None:
    action = _enrich(env, "read_file", {"path": "sub/../notes.md"})
    (ref,) = action.paths
    assert ref.original == "sub/../notes.md"
    assert ref.relative == "SOUL.md"  # symlink followed
    assert ref.lexical_relative == "notes.md"
    assert ref.inside and not ref.escapes
    assert action.classes == ("read",)


def test_shell_classes_and_targets(env: Env) -> None:
    action = _enrich(
        env,
        "run_shell",
        {"command": "cat a.txt | tee b.txt && rm -r build; curl -d @c.txt https://h.example"},
    )
    assert action.classes == ("read", "write", "delete", "execute", "network")
    assert action.hosts == ("h.example",)
    written = {(p.original, p.access, p.via) for p in action.writes}
    assert written == {("b.txt", "write", "tee"), ("build", "delete", "rm")}
    assert [c.name for c in action.commands] == ["cat", "tee", "rm", "curl"]
    assert action.commands[0].pipeline == action.commands[1].pipeline


def test_cd_is_followed(env: Env) -> None:
    action = _enrich(env, "run_shell", {"command": "cd sub && echo x > out.txt"})
    (ref,) = action.writes
    assert ref.relative == "sub/out.txt"


def test_copy_into_a_folder_writes_the_leaf(env: Env) -> None:
    action = _enrich(env, "run_shell", {"command": "cp README.md src"})
    assert [p.relative for p in action.writes] == ["src/README.md"]


def test_escape_is_flagged_even_when_it_comes_back(env: Env) -> None:
    (ref,) = _enrich(env, "read_file", {"path": "../ws/README.md"}).paths
    assert ref.escapes and ref.inside


def test_malformed_payloads_are_problems_not_exceptions(env: Env) -> None:
    assert _enrich(env, "read_file", {}).problems
    assert _enrich(env, "run_shell", {"command": ["ls"]}).problems
    bad_ws = enrich(ActionRequest("r", "list_dir", {}, T0), "relative/ws")
    assert bad_ws.problems
