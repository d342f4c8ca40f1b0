"""The heap of a process that runs one engine for its life (``tether serve``, ``tether chat``).

Once an engine has started, most of the objects the interpreter tracks (about 200,000:
the modules, the SDK and its schemas, the actors and their stores) live as long as the
process, and each full collection of the cyclic garbage collector walks them all again:
on the machine of issue 15, a pause of every thread for about 100 ms, one in about 60
tool turns. Frozen after the start, they are out of its reach, and a full collection
walks only what was made since (about 1 ms there).
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_objects"]


def freeze_startup_objects() -> int:
    """Collect, then move every object alive now out of the cyclic collector's reach;
    returns how many it holds frozen. A frozen object is still freed when its last
    reference goes; only a reference cycle among them is kept. For a process that starts
    its engine once, not one that starts and stops engines (the tests)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
