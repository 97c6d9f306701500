"""The aiohttp application: /mutate, /validate, /healthz, /readyz, /metrics.

Handlers are decode -> decide -> encode (webhook.review). A decision runs inline
on the loop when the engine has proven fast; otherwise in a thread, awaited with
the API server's `?timeout=` minus a margin, so the answer is always sent in time
(the `--on-error` decision if the engine is late) rather than cut off. Every decision
holds the state's gate (gate.py); the loop only try-acquires it, so a thread that
hangs inside a decision never stalls the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from typing import Awaitable, Callable

import orjson
from aiohttp import web

from webhook.server import review as rv

log = logging.getLogger("allot.server")
STATE = web.AppKey("allot_state", object)
JSON = "application/json"


def margin(timeout: float) -> float:
    """Seconds kept in reserve before the API server's deadline for the network and encoding."""
    return max(0.05, min(1.0, timeout * 0.1))


def _timeout_param(query: str) -> str | None:
    """The `timeout` query parameter without building a MultiDict (the API server sends only this one)."""
    if not query:
        return None
    for part in query.split("&"):
        if part.startswith("timeout="):
            return part[8:]
    return None


_ALLOWANCES: dict[str, float | None] = {}  # query string -> its timeout minus margin (one value per webhook)


def _allowance(query: str) -> float | None:
    """Seconds the `?timeout=` in `query` leaves for deciding after the margin; None if absent or bad."""
    try:
        return _ALLOWANCES[query]
    except KeyError:
        pass
    timeout = rv.parse_timeout(_timeout_param(query))
    value = None if timeout is None else timeout - margin(timeout)
    if len(_ALLOWANCES) < 64:
        _ALLOWANCES[query] = value
    return value


def _json(doc: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(doc), status=status, content_type=JSON)


def _timed_answer(review, mutate: bool, state, now: float):
    t = time.perf_counter()
    try:
        return rv.answer(review, mutate=mutate, state=state, now=now)
    finally:
        state.timer.observe(time.perf_counter() - t)


def _thread_answer(review, mutate: bool, state, now: float):
    """A decision on a worker thread: holds the gate, so it never interleaves with another or with loop updates."""
    return state.gate.decide(_timed_answer, review, mutate, state, now)


def _inline_answer(review, mutate: bool, state, now: float):
    """A decision on the loop if no thread holds the gate (never waits for one); None when it must go to a thread."""
    gate = state.gate
    if not gate.try_enter():
        return None
    try:
        return _timed_answer(review, mutate, state, now)
    finally:
        gate.leave()


async def _decide(review, *, mutate: bool, state, now: float, budget: float, executor):
    """(decision, doc, cause) within `budget` seconds, inline or in a thread."""
    if budget <= 0:
        return (*rv.failure(review, mutate=mutate, state=state, cause="timeout", message="no time left to decide"), "timeout")
    if state.timer.inline_ok(budget):
        answer = _inline_answer(review, mutate, state, now)
        if answer is not None:
            return answer
    fut = asyncio.get_running_loop().run_in_executor(executor, _thread_answer, review, mutate, state, now)
    fut.add_done_callback(lambda _: state.gate.drain())  # on the loop, even after a timeout: updates queued behind it go
    try:
        return await asyncio.wait_for(asyncio.shield(fut), budget)
    except asyncio.TimeoutError:
        state.log.error(ts=now, uid=review.uid, stage="timeout", message=f"decision exceeded {budget:.3f}s")
        msg = f"decision took longer than {budget:.2f}s"
        return (*rv.failure(review, mutate=mutate, state=state, cause="timeout", message=msg), "timeout")


def _account(review, decision, endpoint: str, state, now: float, seconds: float, cause) -> None:
    try:
        rv.account(review, decision, endpoint=endpoint, state=state, now=now, seconds=seconds, cause=cause)
    except Exception:  # noqa: BLE001 - the answer is already sent; a logging bug must not kill the loop
        log.exception("accounting failed for uid=%s", review.uid)


async def _body(request: web.Request, state) -> bytes:
    """The request body within `--max-body`; raises BadReview (413) past it."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise rv.BadReview(413, "TooLarge", f"request body exceeds the limit of {state.max_body} bytes") from None


def _admission_handler(mutate: bool, executor) -> Callable[[web.Request], Awaitable[web.Response]]:
    endpoint = "mutate" if mutate else "validate"

    async def handle(request: web.Request) -> web.Response:
        start = time.perf_counter()
        now = time.time()
        state = request.app[STATE]
        try:
            review = rv.decode(await _body(request, state), state)
        except rv.BadReview as exc:
            state.metrics.bad_requests.labels(exc.reason).inc()
            state.log.error(ts=now, uid=exc.uid, stage=exc.reason, message=exc.message)
            return _json(exc.body(), exc.status)
        try:
            allowance = _allowance(request.query_string)
            if allowance is None:
                allowance = state.default_timeout - margin(state.default_timeout)
            budget = allowance - (time.perf_counter() - start)
            answer = None
            if budget > 0 and state.timer.inline_ok(budget):  # the common case: no coroutine, no thread
                answer = _inline_answer(review, mutate, state, now)  # None: a thread holds the gate
            if answer is None:
                answer = await _decide(review, mutate=mutate, state=state, now=now, budget=budget, executor=executor)
            decision, doc, cause = answer
            # Holds to commit before "allowed" leaves; with escrow, a denial may wait for other replicas' slices.
            if state.ledger is not None and state.ledger.involves(review, decision):
                end = start + allowance

                def redo():  # decided again like the first time: inline if the gate is free, else on a thread
                    return _decide(review, mutate=mutate, state=state, now=now,
                                   budget=end - time.perf_counter(), executor=executor)

                def fail(cause, message):  # the ledger cannot answer: the --on-error decision
                    return rv.failure(review, mutate=mutate, state=state, cause=cause, message=message)

                decision, doc, cause, review.attempts = await state.ledger.commit_decision(
                    review, decision, doc, cause, mutate=mutate, state=state, budget_end=end, redo=redo, fail=fail,
                )
            if decision.plan is not None and state.reclaim is not None and decision.allowed and not mutate and not review.dry_run:
                await state.reclaim.admitted(review.uid, review.raw, decision.plan)  # recorded before "allowed" leaves (webhook/reclaim)
            seconds = time.perf_counter() - start
            # Metrics and the log line are not part of the answer: they run on the loop's next
            # turn, after the response is written, while the API server reads it (~25 us that
            # otherwise sit on every request's latency). Same values, same order, same thread.
            loop = asyncio.get_running_loop()
            loop.call_soon(_account, review, decision, endpoint, state, now, seconds, cause)
            return _json(doc)
        except Exception as exc:  # noqa: BLE001 - last line of defence: still answer, never a traceback
            log.exception("unexpected error answering uid=%s", review.uid)
            state.log.error(ts=now, uid=review.uid, stage="server", message=f"{type(exc).__name__}: {exc}")
            _, doc = rv.failure(review, mutate=mutate, state=state, cause="exception", message=type(exc).__name__)
            return _json(doc)

    return handle


def _peer_handler(executor) -> Callable[[web.Request], Awaitable[web.Response]]:
    """`POST /peer/{validate,mutate}`: another replica's request, decided here and admitted only inside this replica's slice (webhook/ledger/peers.py)."""

    async def handle(request: web.Request) -> web.Response:
        start = time.perf_counter()
        now = time.time()
        state = request.app[STATE]
        ledger = state.ledger
        endpoint = request.match_info["endpoint"]
        if ledger is None or not ledger.peer_channel() or endpoint not in ("validate", "mutate"):
            return _json({"error": "NotFound", "message": "no peer channel here"}, 404)
        try:
            body = await _body(request, state)
        except rv.BadReview as exc:
            return _json(exc.body(), exc.status)
        try:
            asked = ledger.peer_ask(request.headers, request.path, body, now)
        except ValueError as exc:
            return _json({"error": "BadBudget", "message": str(exc)}, 400)
        if asked is None:
            state.metrics.bad_requests.labels("PeerUnsigned").inc()
            return _json({"error": "Forbidden", "message": "not signed with this replica set's serving key"}, 403)
        digest, allowance = asked
        if digest != state.policy.digest:  # another policy: its decision is not this replica's to make
            return _json(ledger.decline_peer())
        try:
            budget = allowance - (time.perf_counter() - start)
            review = rv.decode(body, state)
        except rv.BadReview as exc:
            state.metrics.bad_requests.labels(exc.reason).inc()
            return _json(exc.body(), exc.status)
        mutate = endpoint == "mutate"
        decision, doc, cause = await _decide(review, mutate=mutate, state=state, now=now, budget=budget, executor=executor)
        admitted, reply = ledger.answer_peer(review, decision, doc, cause)
        if admitted and decision.plan is not None and state.reclaim is not None and not mutate and not review.dry_run:
            await state.reclaim.admitted(review.uid, review.raw, decision.plan)  # the asker gets the doc, not the plan: recorded here
        loop = asyncio.get_running_loop()
        logged = decision if admitted else dataclasses.replace(decision, allowed=False)  # what the asker was told: no
        loop.call_soon(_account, review, logged, "peer", state, now, time.perf_counter() - start,
                       None if admitted else "peer_declined")
        return _json(reply)

    return handle


async def _healthz(request: web.Request) -> web.Response:
    return _json({"ok": True})


async def _readyz(request: web.Request) -> web.Response:
    ready, detail = request.app[STATE].ready()
    return _json(detail, 200 if ready else 503)


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.priority_drift()  # a gauge of live cluster state: computed when scraped (a handful of classes)
    state.metrics.gate(state.gate.detail())
    body, ctype = state.metrics.render()
    return web.Response(body=body, headers={"Content-Type": ctype})


def make_app(state, *, tasks: tuple[Callable[[], Awaitable[None]], ...] = (), workers: int = 4) -> web.Application:
    """The application for `state`; `tasks` are background coroutines (reload, TLS, watch) run while it serves."""
    app = web.Application(client_max_size=state.max_body)
    app[STATE] = state
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="allot-decide")
    app.router.add_post("/mutate", _admission_handler(True, executor))
    app.router.add_post("/validate", _admission_handler(False, executor))
    app.router.add_post("/peer/{endpoint}", _peer_handler(executor))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)

    async def background(app: web.Application):
        state.gate.loop = asyncio.get_running_loop()  # decision threads schedule the deferred updates' drain here
        running = [asyncio.create_task(t()) for t in tasks]
        yield
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if state.ledger is not None:
            await state.ledger.close()
        executor.shutdown(wait=False, cancel_futures=True)

    app.cleanup_ctx.append(background)
    return app
