"""Tether's settings: one typed object, loaded from ``tether.toml`` and the environment.

Public API:

* :class:`Settings`: every setting, with its default (a msgspec Struct).
* :func:`load_settings`: ``tether.toml`` then environment overrides -> :class:`Settings`.
* :func:`load_settings_with_sources`: the same, returned as :class:`LoadedSettings`
  (``.settings`` plus ``.sources``, a mapping of field name -> where its value came from:
  ``"default"``, the config file's label such as ``"tether.toml"``, or ``"env TETHER_X"``).
* :func:`describe` / :func:`render_settings`: the effective settings for ``tether config``,
  secrets masked.
* :func:`postgres_env`: a ``postgresql://`` URL -> eventsourcing's ``POSTGRES_*`` settings.
* :func:`sqlite_path`: the file named by a ``sqlite:`` URL.

Every problem a user can cause is a :class:`ConfigError` whose message names the key and where
the bad value came from (``tether.toml: round_limit: ...`` or ``TETHER_ROUND_LIMIT: ...``); the
command line prints ``str(error)``, never a traceback.

Loading resolves the derived defaults, so a loaded :class:`Settings` always has absolute
``state_dir``, ``workspace`` and ``rules_dir``. Relative paths in ``tether.toml`` are relative to
the file's directory; relative paths in the environment are relative to ``cwd``. An environment
variable set to the empty string counts as unset.
"""

from __future__ import annotations

from tether.adapters.config.load import LoadedSettings, load_settings, load_settings_with_sources
from tether.adapters.config.render import (
    describe,
    describe_mcp,
    mask_secret,
    mask_url,
    render_settings,
)
from tether.adapters.config.settings import (
    ENV_VARS,
    ConfigError,
    McpServer,
    McpSettings,
    Settings,
    default_state_dir,
)
from tether.adapters.config.stores import postgres_env, sqlite_path

__all__ = [
    "ENV_VARS",
    "ConfigError",
    "LoadedSettings",
    "McpServer",
    "McpSettings",
    "Settings",
    "default_state_dir",
    "describe",
    "describe_mcp",
    "load_settings",
    "load_settings_with_sources",
    "mask_secret",
    "mask_url",
    "postgres_env",
    "render_settings",
    "sqlite_path",
]
