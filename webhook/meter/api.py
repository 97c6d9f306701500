"""The ledger's ConfigMap client (webhook/ledger/apiclient.py, used as is) with every answer's `Date` header fed to a ServerClock."""

from __future__ import annotations

import logging
import time
from typing import Any

from webhook.ledger.apiclient import AsyncApi, unsupported
from webhook.meter.clock import ServerClock

log = logging.getLogger("allot.meter")


class DatedApi(AsyncApi):
    """AsyncApi whose sessions trace each answer's `Date` into `clock`."""

    def __init__(self, cfg: Any, headers: dict[str, str], clock: ServerClock) -> None:
        super().__init__(cfg, headers)
        self.clock = clock

    def _new_session(self):
        import aiohttp

        trace = aiohttp.TraceConfig()

        async def started(session, ctx, params):
            ctx.sent = time.time()

        async def ended(session, ctx, params):
            self.clock.observe(params.response.headers.get("Date"), ctx.sent, time.time())

        trace.on_request_start.append(started)
        trace.on_request_end.append(ended)
        connector = aiohttp.TCPConnector(limit=0, ssl=self.ssl if self.ssl is not None else False)
        return aiohttp.ClientSession(connector=connector, trace_configs=[trace])


def dated_api(api_client: Any, clock: ServerClock) -> DatedApi | None:
    """A DatedApi speaking as `api_client` does, or None (logged) when its configuration is one AsyncApi does not reproduce."""
    cfg = api_client.configuration
    reason = unsupported(cfg)
    if reason is not None:
        log.warning("the budget meter stays local to this replica: %s", reason)
        return None
    return DatedApi(cfg, dict(getattr(api_client, "default_headers", None) or {}), clock)
