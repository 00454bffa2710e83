"""``cloudqueue dashboard``: serve the live dashboard (``cloudqueue.workers.dashboard``) until
Ctrl-C.

Starlette and uvicorn come with the optional ``dashboard`` extra; they are imported only when
the command runs, so the rest of the command line works without them.
"""

from __future__ import annotations

from contextlib import closing

import click

from cloudqueue.listener.imports import import_extra
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.cli.common import checked_queue, current_settings, opened_storage
from cloudqueue.workers.host.partitioning import LayoutViews

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
EXTRA_MODULES = ("starlette", "uvicorn")
"""What the ``dashboard`` extra installs: checked first, so a missing one exits 2 with the hint."""


@click.command()
@click.argument("queues", nargs=-1)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--interval",
    "interval_s",
    type=click.FloatRange(min=0.2),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes (each costs two to four storage transactions a queue).",
)
def dashboard(queues: tuple[str, ...], host: str, port: int, interval_s: float) -> None:
    """Serve a live web dashboard of QUEUES and of every queue a running worker publishes.

    Charts of the last minutes (visible depth, in flight, threads per worker and in all, target
    threads, messages/s), counters, and the poison queue with a requeue action. The page reads
    /api/state, which scripts may read too.

    It listens on 127.0.0.1 only, unless --host says otherwise: then every request needs a
    token, the dashboard.token setting (CLOUDQUEUE_DASHBOARD__TOKEN), else one generated now and
    printed in the address to open.

    \b
    Examples:
      cloudqueue dashboard
      cloudqueue dashboard invoices --port 8080
      CLOUDQUEUE_DASHBOARD__TOKEN=... cloudqueue dashboard --host 0.0.0.0
    """
    for queue in queues:
        checked_queue(queue)
    for module in EXTRA_MODULES:
        import_extra(module, extra="dashboard", needed_by="cloudqueue dashboard")
    import uvicorn

    from cloudqueue.workers.dashboard.access import Access, chosen_token, is_loopback
    from cloudqueue.workers.dashboard.app import create_app
    from cloudqueue.workers.views.sampler import Sampler

    settings = current_settings()
    configured = settings.dashboard.token
    secret = None if configured is None else configured.get_secret_value()
    token, generated = chosen_token(secret, host)
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    with opened_storage(settings) as storage, closing(LayoutViews(storage, settings)) as views:
        sampler = Sampler(
            storage,
            queues=queues,
            state_dir=settings.state_dir,
            where=where,
            policy=settings.scaling_policy(),
            interval_s=interval_s,
            view_of=views.view,
            groups=group_ledger_for(storage),
        )
        app = create_app(sampler, Access(token=token, loopback_only=is_loopback(host)))
        address = f"http://{_url_host(host)}:{port}/"
        if generated:
            address += f"?token={token}"  # printed once, for whoever started it
        click.echo(f"cloudqueue dashboard of {where}: open {address}", err=True)
        # No access log: a sign-in request's address carries the token.
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
