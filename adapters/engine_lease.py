"""One engine per namespace on a shared NATS server, enforced by a lease in a KV bucket.

The file lock (:mod:`adapters.engine_lock`) keeps a second engine off one state directory
on one machine. Engines on other machines (or with other state directories) that share a
NATS server and a namespace would still run side by side; the lease stops that:

* the engine creates key ``<namespace>`` in the KV bucket ``tether_engines`` (created with
  a maximum age, :data:`LEASE_TTL` by default), which fails when the key is there: the
  engine then refuses to start with :class:`~adapters.engine_lock.EngineRunning`, naming
  the holder (host name, pid, state directory, since when);
* it writes the key again every third of the bucket's maximum age, so it never expires
  while the engine runs, and deletes it on a clean stop;
* when the holder dies, its key expires with the bucket's maximum age and the next engine
  takes it. A lease held for this host name and this state directory is taken at once:
  the file lock this engine already holds proves its holder gone.

Should the lease be lost anyway (the engine stalled longer than the maximum age and
another took it), the engine says so in the log (ERROR) and :attr:`EngineLease.lost`
turns true; it does not take it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import socket
import sys
from typing import Any, Final

from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from tether.actors.ports import BusError
from tether.adapters.engine_lock import EngineRunning
from tether.adapters.nats_bus import NatsBus
from tether.events.subjects import check_token

log = logging.getLogger(__name__)

LEASE_BUCKET: Final = "tether_engines"
LEASE_TTL: Final = 15.0
"""Seconds a lease outlives its last refresh (the bucket's maximum age)."""


class EngineLease:
    """The lease of ``namespace`` on the bus's server: :meth:`acquire`, then
    :meth:`release`. ``ttl`` is used when this lease creates the bucket; an existing
    bucket keeps its own maximum age (refreshes follow it)."""

    def __init__(self, bus: NatsBus, namespace: str, state_dir: str, *,
                 bucket: str = LEASE_BUCKET, ttl: float = LEASE_TTL) -> None:
        self.bus = bus
        self.namespace = check_token(namespace, "namespace")
        self.state_dir = os.path.abspath(state_dir)
        self.bucket = bucket
        self.ttl = ttl
        self.lost = False
        self.holder: dict[str, Any] = {}
        """Who this engine is, as written in the lease."""
        self._kv: KeyValue | None = None
        self._revision = 0
        self._period = ttl / 3
        self._keeper: Any = None

    def acquire(self) -> EngineLease:
        """Take the lease or raise :class:`EngineRunning` naming its holder; then keep it
        fresh until :meth:`release`. Raises :class:`~actors.ports.BusError` when the
        server has no JetStream or refuses the bucket."""
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(),
                       "state_dir": self.state_dir, "command": " ".join(sys.argv[:3]),
                       "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        try:
            self.bus.call(self._acquire, timeout=15)
        except EngineRunning:
            raise
        except Exception as exc:
            raise BusError(f"cannot take the engine lease of namespace {self.namespace!r} "
                           f"in KV bucket {self.bucket!r}: {exc or type(exc).__name__}"
                           ) from exc
        self._keeper = self.bus.spawn(self._keep)
        return self

    async def _bucket(self) -> KeyValue:
        js = self.bus.js
        try:
            kv = await js.key_value(self.bucket)
        except BucketNotFoundError:
            try:
                kv = await js.create_key_value(bucket=self.bucket, history=1, ttl=self.ttl,
                                               description="Tether: one engine per namespace")
            except Exception:  # made by another engine meanwhile
                kv = await js.key_value(self.bucket)
        age = (await kv.status()).ttl
        self._period = max(0.05, (age or self.ttl) / 3)
        return kv

    async def _acquire(self) -> None:
        kv = self._kv = await self._bucket()
        value = json.dumps(self.holder).encode()
        try:
            self._revision = await kv.create(self.namespace, value)
            return
        except KeyWrongLastSequenceError:
            pass
        try:
            entry = await kv.get(self.namespace)
        except NotFoundError:  # KeyNotFoundError, KeyDeletedError
            entry = None
        if entry is None or entry.value is None:  # expired or deleted meanwhile
            self._revision = await kv.create(self.namespace, value)
            return
        holder = _decode(entry.value)
        if (holder.get("host") == self.holder["host"]
                and holder.get("state_dir") == self.state_dir):
            # Ours by the file lock this engine holds: its last holder died here.
            log.warning("taking over the engine lease of namespace %r from pid %s, which "
                        "stopped without giving it back", self.namespace, holder.get("pid"))
            self._revision = await kv.update(self.namespace, value, last=entry.revision)
            return
        raise EngineRunning(
            f"an engine already runs for namespace {self.namespace!r} on this NATS server "
            f"({describe(holder)}); stop it first, or talk to it (`tether chat --remote`)",
            holder)

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            try:
                await self._refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server away for a moment: try again soon
                log.warning("could not refresh the engine lease of namespace %r: %s",
                            self.namespace, exc)
            if self.lost:
                return

    async def _refresh(self) -> None:
        assert self._kv is not None
        value = json.dumps(self.holder).encode()
        try:
            self._revision = await self._kv.update(self.namespace, value, last=self._revision)
            return
        except KeyWrongLastSequenceError:
            pass
        try:  # expired while this engine stalled: take it again if nobody else did
            self._revision = await self._kv.create(self.namespace, value)
            log.warning("the engine lease of namespace %r had expired; taken again",
                        self.namespace)
        except KeyWrongLastSequenceError:
            self.lost = True
            log.error("the engine lease of namespace %r was taken by another engine: two "
                      "engines may now run for it; stop this one", self.namespace)

    def release(self) -> None:
        """Stop refreshing and delete the lease (only when this engine still holds it)."""
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None
        if self._kv is None or self.lost or self.bus.closed:
            return
        kv, revision = self._kv, self._revision
        self._kv = None
        try:
            self.bus.call(lambda: kv.delete(self.namespace, last=revision), timeout=5)
        except Exception as exc:  # it expires by itself
            log.warning("could not give back the engine lease of namespace %r: %s",
                        self.namespace, exc)


def holder_of(bus: NatsBus, namespace: str, bucket: str = LEASE_BUCKET) -> dict[str, Any] | None:
    """Who holds the lease of ``namespace`` now, or None when nobody does."""

    async def read() -> dict[str, Any] | None:
        try:
            kv = await bus.js.key_value(bucket)
            entry = await kv.get(namespace)
        except (BucketNotFoundError, NotFoundError):
            return None
        return _decode(entry.value) if entry.value else None

    result: dict[str, Any] | None = bus.call(read, timeout=10)
    return result


def _decode(value: bytes) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        decoded = json.loads(value)
        if isinstance(decoded, dict):
            return decoded
    return {}


def describe(holder: dict[str, Any]) -> str:
    """The holder of a lease in a few words."""
    if not holder:
        return "its holder did not say who it is"
    return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, state directory "
            f"{holder.get('state_dir', '?')}, since {holder.get('since', '?')}")
