"""Snapshot subscriptions that do not keep their subscriber alive.

`ClusterSnapshot.subscribe` holds callbacks forever; the webhook builds a new Engine
on every policy reload, so a strong subscription would keep every old engine's
indexes alive and updating. The forwarder holds a weak reference and goes quiet
once its subscriber is gone.
"""

from __future__ import annotations

import weakref
from typing import Callable


def subscribe_weakly(snapshot, method: Callable[[str, object, object], None]) -> None:
    """Subscribe a bound `method` to `snapshot` without keeping its object alive."""
    ref = weakref.WeakMethod(method)

    def forward(event, old, new):
        target = ref()
        if target is not None:
            target(event, old, new)

    snapshot.subscribe(forward)
