"""Internal: `scaler_ui MONITOR_ADDRESS --port 8081`: a live web page of a scheduler and its workers (`pip install
"scaler[ui]"`).

One asyncio thread runs both the aiohttp server and the reader of the monitor socket, so the history needs no lock.
The page (static/, no CDN: it works offline) polls GET /api/state?since=N once a second, as often as the scheduler
publishes, and gets the newest status plus the chart samples it has not seen. With --metrics, GET /metrics serves the
same status to Prometheus (metrics.py; `pip install "scaler[metrics]"`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, List, Optional

from scaler.config import SETTINGS
from scaler.logs import setup_logging
from scaler.settings_spec import MONITOR, HelpFormatter

if TYPE_CHECKING:
    from scaler.io.curve_keys import CurvePeerKeys
    from scaler.io.sockets import TcpKeepalive

DEFAULT_HOST = "127.0.0.1"  # a monitor shows cluster internals: only this machine, unless asked otherwise
DEFAULT_PORT = 8081
DEFAULT_METRICS_MAX_WORKERS = 100  # per-worker series in one scrape (9 each): bounds what a large cluster costs
METRICS_EXTRA_MESSAGE = 'scaler_ui: --metrics needs prometheus-client: pip install "scaler[metrics]"'
_POLL_SECONDS = 0.1  # how often the monitor socket is read; a status arrives about once a second
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

logger = logging.getLogger(__name__)


def build_app(
    address: str,
    timeout_seconds: float,
    curve: Optional[CurvePeerKeys] = None,
    metrics_max_workers: Optional[int] = None,
    keepalive: Optional[TcpKeepalive] = None,
):  # -> web.Application
    """The web application; with `metrics_max_workers` (0 or more) it also serves /metrics, with per-worker series
    for at most that many workers. ImportError if /metrics is asked for without prometheus-client."""
    from aiohttp import web

    from scaler.io.sockets import DEFAULT_KEEPALIVE
    from scaler.monitor.subscriber import StatusSubscriber
    from scaler.monitor.ui.history import COLUMNS_JSON, StatusHistory

    subscriber = StatusSubscriber(address, timeout_seconds, curve, keepalive or DEFAULT_KEEPALIVE)
    history = StatusHistory()

    async def read_monitor() -> None:
        while True:
            status = subscriber.receive()
            if status is not None:
                history.add(status)
            await asyncio.sleep(_POLL_SECONDS)

    async def reader_context(app: web.Application):
        task = asyncio.get_running_loop().create_task(read_monitor())
        yield
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        subscriber.close()

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(os.path.join(STATIC_DIR, "index.html"))

    async def columns(request: web.Request) -> web.Response:
        return web.json_response(COLUMNS_JSON)

    async def state(request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            raise web.HTTPBadRequest(text="since must be an integer sequence number") from None
        return web.json_response(
            history.state(since, subscriber.address, subscriber.silence_seconds(), subscriber.timeout_seconds),
            headers={"Cache-Control": "no-store"},
        )

    app = web.Application()
    app.cleanup_ctx.append(reader_context)
    app.router.add_get("/", index)
    app.router.add_get("/api/columns", columns)
    app.router.add_get("/api/state", state)
    if metrics_max_workers is not None:
        from scaler.monitor.ui.metrics import MetricsExporter, Snapshot

        def snapshot() -> Snapshot:
            return Snapshot(
                history.latest,
                subscriber.silence_seconds(),
                subscriber.timeout_seconds,
                history.tasks_per_second,
                subscriber.malformed,
            )

        exporter = MetricsExporter(snapshot, metrics_max_workers)

        async def metrics(request: web.Request) -> web.Response:
            body, content_type = exporter.render(request.headers.get("Accept"))
            return web.Response(body=body, headers={"Content-Type": content_type})

        app.router.add_get("/metrics", metrics)
    app.router.add_static("/static/", STATIC_DIR)
    return app


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be an integer, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {port}")
    return port


def _worker_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {count}")
    return count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_ui",
        description="Serve a live web page of a Scaler scheduler and its workers, read from its monitor address.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("address", help="the scheduler's monitor address, e.g. ipc:///tmp/127.0.0.1_2345_monitor")
    parser.add_argument(
        "--port", "-p", type=_port, default=DEFAULT_PORT, help=f"port of the web page (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"interface to serve on; 0.0.0.0 shows the cluster to the network (default: {DEFAULT_HOST})",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help='also serve the status to Prometheus at /metrics (needs prometheus-client: pip install "scaler[metrics]")',
    )
    parser.add_argument(
        "--metrics-max-workers",
        type=_worker_count,
        default=DEFAULT_METRICS_MAX_WORKERS,
        metavar="N",
        help="per-worker series for at most N workers (the first by name); totals always count every worker",
    )
    SETTINGS.add_arguments(parser, MONITOR)
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        from aiohttp import web
    except ImportError:
        sys.exit('scaler_ui: needs aiohttp: pip install "scaler[ui]"')
    if args.metrics:
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            sys.exit(METRICS_EXTRA_MESSAGE)
    try:
        from scaler.io.curve_keys import load_peer_keys
        from scaler.io.sockets import TcpKeepalive

        curve = load_peer_keys(args.curve_secret_key_file, args.curve_server_key_file)
        metrics_max_workers = args.metrics_max_workers if args.metrics else None
        app = build_app(args.address, args.status_timeout_seconds, curve, metrics_max_workers, TcpKeepalive.of(args))
    except (TypeError, ValueError) as error:
        sys.exit(f"scaler_ui: {error}")
    setup_logging(("/dev/stderr",), "INFO")  # after the checks above, whose messages are the only output
    url = f"http://{args.host}:{args.port}/"

    def announce(*_: object) -> None:
        logger.info("scaler_ui: serving %s for monitor address %s", url, args.address)
        if args.metrics:
            logger.info("scaler_ui: Prometheus metrics at %smetrics", url)

    try:
        web.run_app(app, host=args.host, port=args.port, print=announce, access_log=None)
    except OSError as error:
        sys.exit(f"scaler_ui: cannot serve on {args.host}:{args.port}: {error}")


if __name__ == "__main__":
    main()
