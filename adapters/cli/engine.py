"""Commands that run an engine or a connector: serve, chat, demo, telegram, and the
settings, sandbox and token they use."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from tether.adapters.cli.common import (
    provider_of,
    remote_bus,
    settings_of,
    wait_for_signal,
)
from tether.adapters.config import (
    ConfigError,
    Settings,
    load_settings_with_sources,
    render_settings,
)
from tether.adapters.heap import freeze_startup_objects


def cmd_config(args: argparse.Namespace) -> int:
    loaded = load_settings_with_sources(config_path=args.config)
    print(render_settings(loaded.settings, loaded.sources))
    print(_sandbox_text(loaded.settings).splitlines()[0])
    return 0


def _sandbox_text(settings: Settings) -> str:
    from tether.adapters.sandbox import probe, render_report

    return render_report(None if settings.sandbox == "off" else probe())


def cmd_sandbox(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    text = _sandbox_text(settings)
    print(text)
    return 0 if settings.sandbox == "off" or "UNAVAILABLE" not in text else 1


def cmd_token(args: argparse.Namespace) -> int:
    from tether.adapters.http_token import TokenError, load_token, rotate_token, token_path

    settings = settings_of(args)
    try:
        token = rotate_token(settings.state_dir) if args.rotate else load_token(
            settings.state_dir)
    except (TokenError, OSError) as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 1
    print(token)
    if args.rotate:
        print(f"tether: a new token is in {token_path(settings.state_dir)}; a running "
              "`tether serve` takes it at its next start", file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from tether.adapters.host import Host

    settings = settings_of(args)
    if args.http is not None:
        settings = msgspec.structs.replace(settings, http_port=args.http)
    provider = provider_of(settings)
    host = Host(settings, provider=provider, serve_http=True)
    host.start()
    freeze_startup_objects()  # the engine lives as long as the process
    try:
        from tether.adapters.sandbox import render_report

        print(
            f"tether: serving on {host.nats_url} (namespace {host.subjects.namespace}); "
            f"send UserMessage JSON to {host.subjects.inbox}; Ctrl-C stops",
            flush=True,
        )
        print(f"tether: {render_report(host.sandbox_report).splitlines()[0]}", flush=True)
        if settings.http_port:
            print(f"tether: HTTP connector on {host.http.url} (POST /messages, "
                  "GET /sessions/ID/events, GET /metrics; `tether token` shows the bearer "
                  "token)", flush=True)
        wait_for_signal()
    finally:
        host.stop()
    print("tether: stopped", flush=True)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from tether.actors.commands import COMMANDS
    from tether.adapters.engine_lock import running_engine
    from tether.adapters.line_editor import line_readers
    from tether.adapters.terminal import CHAT_ONLY, TerminalConnector

    settings = settings_of(args)
    host: Any = None
    running = None if args.remote else running_engine(settings.state_dir, settings.namespace)
    if running is not None:
        print(f"tether chat: an engine is running here (pid {running.get('pid', '?')}): "
              "talking to it", flush=True)
    if args.remote or running is not None:
        bus, subjects = remote_bus(settings)
        close: Callable[[], None] = bus.close
    else:
        from tether.adapters.host import Host

        host = Host(settings, provider=provider_of(settings)).start()
        freeze_startup_objects()
        bus, subjects, close = host.bus, host.subjects, host.stop
    read_message, read_answer = line_readers(
        os.path.join(settings.state_dir, "chat_history"), {**COMMANDS, **CHAT_ONLY})
    terminal = TerminalConnector(bus, subjects, workspace=settings.workspace,
                                 answer=read_answer)
    terminal.session_id = args.session or ""
    print("tether chat: type a message, Enter to send (Tab completes a /command, the arrows "
          "recall earlier messages); Ctrl-D or /quit to leave.", flush=True)
    try:
        while True:
            try:
                text = read_message("you> ").strip()
            except EOFError:
                break
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            terminal.say(text)
            terminal.print_turn(timeout=args.timeout)
    except KeyboardInterrupt:
        pass
    finally:
        terminal.close()
        close()
    if terminal.session_id:
        print(f"\nsession {terminal.session_id}; continue with: tether chat --session "
              f"{terminal.session_id}")
    return 0


def cmd_telegram(args: argparse.Namespace) -> int:
    from telegram.error import TelegramError

    from tether.adapters.telegram import TelegramConnector, allowlist_problem

    settings = settings_of(args)
    if not settings.telegram_token:
        raise ConfigError("no Telegram bot token: set telegram_token in tether.toml or "
                          "TETHER_TELEGRAM_TOKEN (BotFather gives one)")
    problem = allowlist_problem(settings.middleware)
    if problem is not None and not args.open:
        raise ConfigError(f"{problem}; add an allowlist under [middleware] allow "
                          "(e.g. \"telegram-*\" = [\"YOUR_USER_ID\"]) or pass --open")
    # It publishes its chats' messages on the bare inbox, naming each Telegram user: a
    # connector that authenticates its users itself signs in as the engine.
    bus, subjects = remote_bus(settings, role="engine")
    connector = TelegramConnector(
        bus, subjects, token=settings.telegram_token,
        base_url=settings.telegram_base_url or None, throttle=settings.telegram_throttle,
        can_edit=settings.telegram_can_edit, workspace=settings.workspace)
    try:
        try:
            connector.start()
        except TelegramError as exc:  # a wrong token, an unreachable Bot API
            why = str(exc).replace(settings.telegram_token, "***")  # never print the token
            raise ConfigError(f"the Telegram bot could not start: {why}") from None
        print(f"tether: Telegram connector running for namespace {subjects.namespace}; "
              "Ctrl-C stops", flush=True)
        wait_for_signal()
    finally:
        connector.stop()
        bus.close()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tether.adapters.demo import run_demo

    return run_demo(settings_of(args))


def cmd_fake_llm(args: argparse.Namespace, rest: list[str]) -> int:
    from tether.adapters.fake_llm import main as fake_llm_main

    return fake_llm_main(rest)
