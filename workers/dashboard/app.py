"""The dashboard's web app: one page, its static files, ``/api/state`` and the requeue action.

Routes (every one behind ``access.Access``):

* ``GET /``: the page (``static/index.html``); it polls ``/api/state`` every ``interval_s``.
* ``GET /api/state``: JSON, ``{"at", "storage", "interval_s", "history_s", "queues": [...]}``; each
  queue: ``queue``, ``depth``, ``visible_depth``, ``in_flight``, ``oldest_message_age_s``,
  ``threads``, ``target_threads``, ``processed_per_s``, ``counters`` (``processed`` messages,
  ``items_processed``, ``failed``, ``poisoned``, ``dequeue_errors``,
  ``storage_transactions_per_hour``, ``projected_cost_per_month_usd``), ``workers`` (as
  ``cloudqueue status --json`` has them, with an ``id``), ``poison`` (``count``, ``latest`` records
  as ``cloudqueue poison list --json``) and ``history`` (columns over the last ``history_s``: ``t``
  in epoch seconds, ``visible_depth``, ``in_flight``, ``threads``, ``target_threads``,
  ``processed_per_s``, ``worker_threads`` by worker id); or just ``queue`` and ``error`` while the
  queue cannot be read.
* ``POST /api/queues/{queue}/poison/requeue``: JSON ``{"id": ORIGINAL_ID}`` moves that message
  back, ``{"limit": N}`` (or ``{}`` for all) the oldest N; answers ``{"moved": COUNT, "skipped":
  [POISON_ID, ...]}`` (records that are not readable stay in the poison queue), or 503 with
  ``error`` when storage fails (whatever was taken and not moved is visible again at once).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from cloudqueue.listener.errors import StorageError, UnreadableRecordError
from cloudqueue.listener.poison.requeue import Requeued, requeue_all, requeue_poisoned_by_id
from cloudqueue.listener.redaction import redact
from cloudqueue.workers.dashboard.access import TOKEN_COOKIE, TOKEN_QUERY, Access, presented_token
from cloudqueue.workers.views.sampler import Sampler

STATIC_DIR = Path(str(files("cloudqueue.workers.dashboard") / "static"))


def create_app(sampler: Sampler, access: Access, *, run_sampler: bool = True) -> Starlette:
    """The app; with ``run_sampler`` it starts and stops the sampler's thread with itself."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if run_sampler:
            await run_in_threadpool(sampler.start)
        try:
            yield
        finally:
            if run_sampler:
                await run_in_threadpool(sampler.stop)

    async def state(_: Request) -> Response:
        return JSONResponse(await run_in_threadpool(sampler.state))

    async def requeue(request: Request) -> Response:
        return await _requeue(sampler, request)

    routes = [
        Route("/", _page),
        Route("/api/state", state),
        Route("/api/queues/{queue}/poison/requeue", requeue, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    guard = Middleware(_Guard, access=access)
    return Starlette(routes=routes, middleware=[guard], lifespan=lifespan)


async def _page(_: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})


async def _requeue(sampler: Sampler, request: Request) -> Response:
    queue = request.path_params["queue"]
    if not sampler.watches(queue):
        return _refused(404, f"the dashboard does not watch queue {queue}")
    asked = await _requeue_request(request)
    if isinstance(asked, Response):
        return asked
    wanted_id, limit = asked

    def move() -> Requeued:
        storage = sampler.view_of(queue)  # back to each message's own partition and account
        if wanted_id is None:
            return requeue_all(storage, queue, limit=limit)
        try:
            return Requeued(moved=int(requeue_poisoned_by_id(storage, queue, wanted_id)))
        except UnreadableRecordError:
            return Requeued(skipped=[wanted_id])

    try:
        done = await run_in_threadpool(move)
    except StorageError as error:
        return _refused(503, f"not requeued: {redact(str(error))}")
    await run_in_threadpool(sampler.sample)  # the next page refresh shows the result
    return JSONResponse({"moved": done.moved, "skipped": done.skipped})


async def _requeue_request(request: Request) -> tuple[str | None, int | None] | Response:
    """The id and limit a requeue asks for, or the refusal of a malformed body."""
    try:
        body = await request.json()
    except ValueError:
        return _refused(400, 'the body must be JSON: {} or {"id": ...} or {"limit": N}')
    if not isinstance(body, dict):
        return _refused(400, "the body must be a JSON object")
    wanted_id, limit = body.get("id"), body.get("limit")
    if wanted_id is not None and not isinstance(wanted_id, str):
        return _refused(400, "id must be a string")
    if limit is not None and (type(limit) is not int or limit < 1):  # true is no limit
        return _refused(400, "limit must be a whole number of at least 1")
    return wanted_id, limit


def _refused(status: int, reason: str) -> Response:
    return JSONResponse({"error": reason}, status_code=status)


# On every answer, refusals included: no other page may frame the dashboard (a page on another
# localhost port framed it and got a click-through "requeue"), browsers must not guess content
# types, and no address (which may carry ?token=) leaks to another site as a referrer.
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class _Guard(BaseHTTPMiddleware):
    """Applies ``Access`` to every request before any route sees it, and ``SECURITY_HEADERS`` to
    every response."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        super().__init__(app)
        self.access = access

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await self._checked(request, call_next)
        response.headers.update(SECURITY_HEADERS)
        return response

    async def _checked(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        host = request.headers.get("host")
        if not self.access.host_allowed(host):
            return _refused(421, "the dashboard answers to localhost / 127.0.0.1 only")
        if request.method == "GET" and TOKEN_QUERY in request.query_params:
            return self._sign_in(request.query_params[TOKEN_QUERY])
        presented = presented_token(
            request.headers.get("authorization"), request.cookies.get(TOKEN_COOKIE)
        )
        if not self.access.token_accepted(presented):
            return _refused(401, "a token is required: open the URL the dashboard printed")
        if request.method not in ("GET", "HEAD"):
            refusal = self._change_refusal(request, host)
            if refusal is not None:
                return refusal
        return await call_next(request)

    def _sign_in(self, token: str) -> Response:
        """``/?token=...``: remember the token in a cookie, and take it out of the address bar."""
        if not self.access.token_accepted(token):
            return _refused(401, "wrong token")
        response = RedirectResponse("/", status_code=303)
        if self.access.token is not None:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response

    def _change_refusal(self, request: Request, host: str | None) -> Response | None:
        content_type = request.headers.get("content-type", "").partition(";")[0].strip()
        if content_type != "application/json":
            return _refused(415, "changes take a JSON body (Content-Type: application/json)")
        if not self.access.same_origin(request.headers.get("origin"), host):
            return _refused(403, "changes come from the dashboard's own page only")
        return None


__all__ = ["SECURITY_HEADERS", "STATIC_DIR", "create_app"]
