"""Settings: tether.toml, environment overrides, errors users see, masking, postgres_env."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.adapters.config import (
    ConfigError,
    Settings,
    describe,
    load_settings,
    load_settings_with_sources,
    mask_url,
    postgres_env,
    render_settings,
    sqlite_path,
)

SECRET = "sk-ant-api03-very-secret-value-1234567890"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_file_or_env(tmp_path: Path) -> None:
    loaded = load_settings_with_sources(env={}, cwd=str(tmp_path))
    s = loaded.settings
    assert s.nats_url == "" and s.database_url == ""
    assert s.namespace == "tether" and s.model == "claude-sonnet-4-6"
    assert s.round_limit == 25 and s.max_tokens == 4096
    assert s.deny_tools == [] and s.deny_commands is None
    assert s.workspace == str(tmp_path)
    assert s.rules_dir == os.path.join(str(tmp_path), ".tether", "rules")
    assert s.state_dir == os.path.join(os.path.expanduser("~"), ".local", "state", "tether")
    assert set(loaded.sources.values()) == {"default"}


def test_xdg_state_home(tmp_path: Path) -> None:
    s = load_settings(env={"XDG_STATE_HOME": str(tmp_path / "xdg")}, cwd=str(tmp_path))
    assert s.state_dir == str(tmp_path / "xdg" / "tether")


def test_toml_then_env_precedence(tmp_path: Path) -> None:
    write(
        tmp_path / "tether.toml",
        'namespace = "from_file"\nround_limit = 7\nmodel = "file-model"\n'
        'deny_tools = ["shell"]\ndeny_commands = ["rm -rf /"]\nstate_dir = "state"\n',
    )
    env = {"TETHER_ROUND_LIMIT": "9", "TETHER_MODEL": "", "ANTHROPIC_API_KEY": SECRET}
    loaded = load_settings_with_sources(env=env, cwd=str(tmp_path))
    s = loaded.settings
    assert s.namespace == "from_file"
    assert s.round_limit == 9  # env wins over the file
    assert s.model == "file-model"  # an empty env var counts as unset
    assert s.deny_tools == ["shell"] and s.deny_commands == ["rm -rf /"]
    assert s.state_dir == str(tmp_path / "state")  # relative to the file's directory
    assert s.anthropic_api_key == SECRET
    assert loaded.sources["namespace"] == "tether.toml"
    assert loaded.sources["round_limit"] == "env TETHER_ROUND_LIMIT"
    assert loaded.sources["anthropic_api_key"] == "env ANTHROPIC_API_KEY"
    assert loaded.sources["nats_url"] == "default"


def test_config_path_and_tether_config(tmp_path: Path) -> None:
    other = write(tmp_path / "other.toml", 'namespace = "explicit"\n')
    write(tmp_path / "tether.toml", 'namespace = "implicit"\n')
    env = {"TETHER_CONFIG": str(write(tmp_path / "env.toml", 'namespace = "via_env"\n'))}
    assert load_settings(env=env, config_path=str(other), cwd=str(tmp_path)).namespace == (
        "explicit"
    )
    assert load_settings(env=env, cwd=str(tmp_path)).namespace == "via_env"
    assert load_settings(env={}, cwd=str(tmp_path)).namespace == "implicit"
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(env={"TETHER_CONFIG": str(tmp_path / "missing.toml")}, cwd=str(tmp_path))


def test_env_values_are_converted(tmp_path: Path) -> None:
    env = {
        "TETHER_ROUND_LIMIT": "3",
        "TETHER_ASK_TIMEOUT": "1.5",
        "TETHER_DENY_TOOLS": "shell, write_file",
        "TETHER_NATS_URL": "nats://127.0.0.1:4999",
        "TETHER_DATABASE_URL": "postgresql://u:p@db:5433/tether",
        "TETHER_WORKSPACE": "ws",
    }
    s = load_settings(env=env, cwd=str(tmp_path))
    assert s.round_limit == 3 and s.ask_timeout == 1.5
    assert s.deny_tools == ["shell", "write_file"]
    assert s.nats_url == "nats://127.0.0.1:4999"
    assert s.workspace == str(tmp_path / "ws")
    assert s.rules_dir == str(tmp_path / "ws" / ".tether" / "rules")


def test_bad_env_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={"TETHER_ROUND_LIMIT": "x"}, cwd=str(tmp_path))
    assert str(info.value).startswith("TETHER_ROUND_LIMIT: ")
    assert str(info.value) == "TETHER_ROUND_LIMIT: Expected int, got 'x'"
    with pytest.raises(ConfigError, match=r"^TETHER_ROUND_LIMIT: .*>= 1"):
        load_settings(env={"TETHER_ROUND_LIMIT": "0"}, cwd=str(tmp_path))
    with pytest.raises(ConfigError, match=r"^TETHER_NAMESPACE: "):
        load_settings(env={"TETHER_NAMESPACE": "a.b"}, cwd=str(tmp_path))


def test_bad_toml_value_names_file_and_key(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", 'round_limit = "x"\n')
    with pytest.raises(ConfigError, match=r"^tether\.toml: round_limit: Expected int, got 'x'$"):
        load_settings(env={}, cwd=str(tmp_path))
    write(tmp_path / "tether.toml", "round_limit = 0\n")
    with pytest.raises(ConfigError, match=r"^tether\.toml: round_limit: Expected int >= 1, got 0$"):
        load_settings(env={}, cwd=str(tmp_path))
    write(tmp_path / "tether.toml", 'namespace = "has space"\n')
    with pytest.raises(ConfigError, match=r"^tether\.toml: namespace: "):
        load_settings(env={}, cwd=str(tmp_path))
    write(tmp_path / "tether.toml", "round_limit = \n")
    with pytest.raises(ConfigError, match=r"^tether\.toml: not valid TOML"):
        load_settings(env={}, cwd=str(tmp_path))


def test_unknown_toml_key(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", "round_limt = 3\n")
    with pytest.raises(ConfigError) as info:
        load_settings(env={}, cwd=str(tmp_path))
    assert str(info.value).startswith("tether.toml: unknown key 'round_limt'")
    assert "did you mean 'round_limit'" in str(info.value)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("sqlite:///tmp/x.db", True),
        ("postgresql://u:p@localhost/tether", True),
        ("postgres://u@localhost:5432/tether?schema=s", True),
        ("mysql://u:p@localhost/tether", False),
        ("/just/a/path.db", False),
        ("postgresql://u:p@localhost/", False),
    ],
)
def test_database_url_validation(tmp_path: Path, url: str, ok: bool) -> None:
    env = {"TETHER_DATABASE_URL": url}
    if ok:
        assert load_settings(env=env, cwd=str(tmp_path)).database_url == url
    else:
        with pytest.raises(ConfigError, match=r"^TETHER_DATABASE_URL: ") as info:
            load_settings(env=env, cwd=str(tmp_path))
        assert ":p@" not in str(info.value)  # the password never appears in the error


def test_bad_nats_url(tmp_path: Path) -> None:
    write(tmp_path / "tether.toml", 'nats_url = "http://user:hunter2@x:4222"\n')
    with pytest.raises(ConfigError, match=r"^tether\.toml: nats_url: ") as info:
        load_settings(env={}, cwd=str(tmp_path))
    assert "hunter2" not in str(info.value)


def test_masking_never_shows_secrets(tmp_path: Path) -> None:
    env = {
        "ANTHROPIC_API_KEY": SECRET,
        "TETHER_DATABASE_URL": "postgresql://alice:pg-s3cret@db:5432/tether",
        "TETHER_NATS_URL": "nats://bob:nats-s3cret@a:4222,nats://tok3n-secret@b:4222",
    }
    loaded = load_settings_with_sources(env=env, cwd=str(tmp_path))
    text = render_settings(loaded.settings, loaded.sources)
    rows = {key: (value, src) for key, value, src in describe(loaded.settings, loaded.sources)}
    for secret in (SECRET, SECRET[4:12], "pg-s3cret", "nats-s3cret", "tok3n-secret"):
        assert secret not in text
        assert all(secret not in value for value, _ in rows.values())
    assert rows["anthropic_api_key"] == ("sk-a…(masked)", "env ANTHROPIC_API_KEY")
    assert rows["database_url"][0] == "postgresql://alice:***@db:5432/tether"
    assert rows["nats_url"][0] == "nats://bob:***@a:4222,nats://***@b:4222"
    # one line per setting, each naming its source
    assert len(text.splitlines()) == len(rows)
    assert "(env ANTHROPIC_API_KEY)" in text and "(default)" in text
    assert "round_limit" in text


def test_short_secret_shows_no_prefix() -> None:
    rows = dict((k, v) for k, v, _ in describe(Settings(anthropic_api_key="short")))
    assert rows["anthropic_api_key"] == "…(masked)"
    assert mask_url("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


def test_postgres_env() -> None:
    env = postgres_env("postgresql://tether:p%40ss@db.example:5433/events?schema=tenant_a")
    assert env == {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": "events",
        "POSTGRES_HOST": "db.example",
        "POSTGRES_PORT": "5433",
        "POSTGRES_USER": "tether",
        "POSTGRES_PASSWORD": "p@ss",
        "POSTGRES_SCHEMA": "tenant_a",
    }
    bare = postgres_env("postgresql://tether@localhost/events")
    assert bare["POSTGRES_PASSWORD"] == "" and bare["POSTGRES_PORT"] == "5432"
    assert "POSTGRES_SCHEMA" not in bare
    assert postgres_env("postgresql://u@h/d?pool_size=3")["POSTGRES_POOL_SIZE"] == "3"
    with pytest.raises(ConfigError, match="unknown database_url parameter 'bogus'"):
        postgres_env("postgresql://u@h/d?bogus=1")
    with pytest.raises(ConfigError, match="no database name"):
        postgres_env("postgresql://u:p@h:5432")
    with pytest.raises(ConfigError, match="postgresql://"):
        postgres_env("sqlite:///x.db")


def test_sqlite_path() -> None:
    assert sqlite_path("sqlite:///var/lib/tether/events.db") == "/var/lib/tether/events.db"
    assert sqlite_path("sqlite:rel/events.db") == "rel/events.db"
    with pytest.raises(ConfigError):
        sqlite_path("sqlite://")
