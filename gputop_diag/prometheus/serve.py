"""The exporter's HTTP server: every path answers the newest tick's families in Prometheus' text
format (0.0.4), the one format dcgm-exporter serves, gzipped when the scraper accepts it.

prometheus-client's own server would answer Prometheus in OpenMetrics, where a counter's samples
must be named NAME_total: dcgm-exporter's counters (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`)
keep their names only in the text format (`TickMetrics.exposition`).
"""

from __future__ import annotations

import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Exposition(Protocol):
    def exposition(self) -> bytes: ...


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.server.metrics.exposition()
        gz = "gzip" in self.headers.get("Accept-Encoding", "")
        if gz:
            body = gzip.compress(body, compresslevel=1)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        if gz:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # a scrape a second would flood the exporter's standard error


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: str, port: int, metrics: Exposition) -> None:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        self.address_family = infos[0][0]
        self.metrics = metrics
        super().__init__((addr, port), _Handler)


def start_server(
    port: int, addr: str, metrics: Exposition
) -> tuple[MetricsServer, threading.Thread]:
    """Serve `metrics` on addr:port from a daemon thread; OSError when it cannot listen."""
    server = MetricsServer(addr, port, metrics)
    thread = threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True)
    thread.start()
    return server, thread
