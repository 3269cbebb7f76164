"""`fleet --prometheus https://…`: a real Prometheus serving its API over TLS (its
--web.config.file, with a certificate the test signs with its own CA through openssl), and an
authenticating proxy in front of it that checks a bearer token, as sites put one.

Skipped only where the `prometheus` or `openssl` binary is missing.
"""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from test_fleet_prometheus import GPUTOP_DIAG, PROMETHEUS, Procs, _logs, exporter_port, free_port

OPENSSL = shutil.which("openssl")
TOKEN = "s3cr3t-t0ken-for-the-test"

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or OPENSSL is None,
    reason="needs the prometheus and openssl binaries (Debian: apt-get install prometheus openssl)",
)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> None:
    """A CA, and a server certificate it signs for 127.0.0.1."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=gputop-diag test CA", cwd=d)  # fmt: skip
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext",
            cwd=d)  # fmt: skip


class TokenProxy(http.server.ThreadingHTTPServer):
    """Forwards requests with the right bearer token to Prometheus; 401 otherwise."""

    def __init__(self, upstream: str, ca: Path) -> None:
        self.upstream = upstream
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.seen: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: TokenProxy

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.server.seen.append(auth.split(" ", 1)[0])
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if auth != f"Bearer {TOKEN}":
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Bearer")
            self.end_headers()
            self.wfile.write(b"unauthorized\n")
            return
        req = urllib.request.Request(
            self.server.upstream + self.path,
            data=body,
            headers={"Content-Type": self.headers.get("Content-Type", "")},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.server.ctx) as r:
                code, out = r.status, r.read()
        except urllib.error.HTTPError as e:
            code, out = e.code, e.read()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture(scope="module")
def tls_prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    make_certs(tmp)
    procs = Procs(tmp)
    proxy = None
    try:
        log = procs.start(
            "exporter",
            [*GPUTOP_DIAG, "--demo", "compute-bound", "exporter", "--listen", "127.0.0.1:0"],
        )
        port = exporter_port(log, time.monotonic() + 30)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "gpu", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            ],
        }
        (tmp / "prometheus.yml").write_text(json.dumps(config))
        web = {"tls_server_config": {"cert_file": "server.pem", "key_file": "server.key"}}
        (tmp / "web.yml").write_text(json.dumps(web))
        prom_port = free_port()
        procs.start(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--web.config.file={tmp / 'web.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
        )
        url = f"https://127.0.0.1:{prom_port}"
        ctx = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                q = urllib.parse.urlencode(
                    {"query": 'count_over_time(DCGM_FI_DEV_FB_USED{gpu="0"}[60s])'}
                )
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5, context=ctx) as r:
                    res = json.loads(r.read())["data"]["result"]
                if res and float(res[0]["value"][1]) >= 6:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("Prometheus over TLS did not gather samples: " + _logs(tmp))
        proxy = TokenProxy(url, tmp / "ca.pem")
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        (tmp / "token").write_text(TOKEN + "\n")
        (tmp / "wrong-token").write_text("not-the-token\n")
        yield {
            "url": url,
            "proxy": f"http://127.0.0.1:{proxy.server_address[1]}",
            "proxy_server": proxy,
            "tmp": tmp,
        }
    finally:
        if proxy is not None:
            proxy.shutdown()
            proxy.server_close()
        procs.stop()


def fleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GPUTOP_DIAG, "fleet", "--window", "10s", "--step", "1s", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_self_signed_certificate_is_refused_with_the_next_step(tls_prometheus):
    r = fleet("--prometheus", tls_prometheus["url"])
    assert r.returncode == 4, r.stderr
    assert "TLS certificate is not trusted" in r.stderr and "--ca-file" in r.stderr


def test_the_ca_file_verifies_it_and_the_fleet_is_judged(tls_prometheus):
    r = fleet(
        "--prometheus", tls_prometheus["url"], "--ca-file", str(tls_prometheus["tmp"] / "ca.pem")
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["prometheus"] == tls_prometheus["url"]
    assert len(doc["nodes"]) == 1 and doc["nodes"][0]["gpus"] == 8


def test_insecure_skip_verify_skips_the_check(tls_prometheus):
    r = fleet("--prometheus", tls_prometheus["url"], "--insecure-skip-verify")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["nodes"]) == 1


def test_plain_http_to_the_tls_port_says_to_use_https(tls_prometheus):
    r = fleet("--prometheus", tls_prometheus["url"].replace("https://", "http://"))
    assert r.returncode == 4
    assert "serves TLS only" in r.stderr and "https://" in r.stderr


def test_bearer_token_through_an_authenticating_proxy(tls_prometheus):
    proxy, tmp = tls_prometheus["proxy"], tls_prometheus["tmp"]
    r = fleet("--prometheus", proxy)
    assert r.returncode == 4
    assert "refused access (HTTP 401)" in r.stderr and "--bearer-token-file" in r.stderr
    r = fleet("--prometheus", proxy, "--bearer-token-file", str(tmp / "wrong-token"))
    assert r.returncode == 4 and "with the bearer credentials given" in r.stderr
    r = fleet("--prometheus", proxy, "--bearer-token-file", str(tmp / "token"))
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["nodes"]) == 1
    assert "Bearer" in tls_prometheus["proxy_server"].seen
    for out in (r.stdout, r.stderr):
        assert TOKEN not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ca-file", "ca.pem"], "need an https:// URL"),
        (["--bearer-token-file", "missing"], "--bearer-token-file"),
        (["--bearer-token-file", "empty"], "is empty"),
        (["--ca-file", "token"], "--ca-file"),
    ],
)
def test_bad_access_options_are_usage_errors(tls_prometheus, args, message):
    tmp = tls_prometheus["tmp"]
    (tmp / "empty").write_text("")
    args = [str(tmp / a) if (tmp / a).exists() or a == "missing" else a for a in args]
    url = tls_prometheus["url"]
    if "ca.pem" in args[-1]:
        url = url.replace("https://", "http://")
    r = fleet("--prometheus", url, *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
