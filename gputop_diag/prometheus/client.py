"""A small Prometheus HTTP API client (urllib only): instant and range queries, with failures
said in words a user can act on.

The HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/) answers
`{"status": "success", "data": {"resultType": ..., "result": [...]}}`; a range query's result is
a list of `{"metric": {labels}, "values": [[unix_time, "value"], ...]}`.

Access follows Prometheus' own client configuration (`http_config`: `authorization.
credentials_file`, `tls_config.ca_file`, `cert_file`, `key_file`, `insecure_skip_verify`):
`Access` carries a bearer token read from a file, a CA bundle, a client certificate and
whether to skip verification; credentials in the URL are sent as basic auth. No secret is ever
part of a message or a document.
"""

from __future__ import annotations

import base64
import json
import math
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 10.0


class PrometheusError(Exception):
    """Prometheus could not answer: unreachable, too slow, or it refused the query."""

    def __init__(self, message: str, next_step: str, kind: str) -> None:
        super().__init__(message)
        self.message = message
        self.next_step = next_step
        self.kind = kind  # "unreachable", "timeout", "tls", "http", "query", "bad_answer"

    def __reduce__(self):  # raised in a worker process, re-raised in the one that asked
        return (type(self), (self.message, self.next_step, self.kind))


@dataclass(frozen=True, slots=True)
class Series:
    """One range-query series: its labels and its samples (NaN values left out)."""

    labels: dict[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Access:
    """How to reach a Prometheus behind TLS or an authenticating proxy."""

    bearer_token_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None  # a client certificate (mutual TLS), with key_file
    key_file: str | None = None
    insecure_skip_verify: bool = False

    @property
    def uses_tls(self) -> bool:
        return bool(self.ca_file or self.cert_file or self.insecure_skip_verify)


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ValueError(f"--bearer-token-file {path!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--bearer-token-file {path!r}: not a text file") from None
    if not token:
        raise ValueError(f"--bearer-token-file {path!r} is empty")
    if any(c in token for c in "\r\n"):
        raise ValueError(f"--bearer-token-file {path!r}: expected one line (the token)")
    return token


def _ssl_context(access: Access) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    try:
        if access.ca_file:
            ctx.load_verify_locations(cafile=access.ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(
            f"--ca-file {access.ca_file!r}: {getattr(e, 'strerror', None) or e} (expected "
            "PEM certificates)"
        ) from None
    if access.cert_file or access.key_file:
        if not access.cert_file:
            raise ValueError("--key-file needs --cert-file")
        try:
            ctx.load_cert_chain(access.cert_file, access.key_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(
                f"--cert-file {access.cert_file!r}: {getattr(e, 'strerror', None) or e} "
                "(expected a PEM certificate, and its key in it or in --key-file)"
            ) from None
    if access.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Prometheus:
    def __init__(
        self, url: str, timeout: float = DEFAULT_TIMEOUT_S, access: Access | None = None
    ) -> None:
        access = access or Access()
        self._given = (url, timeout, access)  # what a worker process rebuilds it from
        url = url.strip()
        if "://" not in url:
            url = "http://" + url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--prometheus {url!r}: expected a URL such as http://HOST:9090")
        self.headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if parts.username is not None:  # http://USER:PASSWORD@HOST: basic auth, kept out of
            # every message and document (`url` is the address without them)
            token = f"{urllib.parse.unquote(parts.username)}:"
            token += urllib.parse.unquote(parts.password or "")
            self.headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
            netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
            parts = parts._replace(netloc=netloc)
        if access.bearer_token_file:
            if "Authorization" in self.headers:
                raise ValueError(
                    "--bearer-token-file and credentials in the URL: give one of the two"
                )
            self.headers["Authorization"] = "Bearer " + _read_token(access.bearer_token_file)
        if access.uses_tls and parts.scheme != "https":
            raise ValueError(
                "--ca-file, --cert-file and --insecure-skip-verify need an https:// URL"
            )
        self.context = _ssl_context(access) if parts.scheme == "https" else None
        self.access = access
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")
        self.timeout = timeout

    def __reduce__(self):
        # a worker process (`fleet/workers.py`) builds its own: an SSL context does not pickle
        return (type(self), self._given)

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        return self._data(self._body(path, params))

    def _body(self, path: str, params: dict[str, Any]) -> bytes:
        """The answer's bytes; PrometheusError where there is none to read."""
        query = urllib.parse.urlencode(params)
        # POST keeps long selectors out of the URL (the API takes form-encoded POSTs).
        req = urllib.request.Request(
            f"{self.url}/api/v1/{path}",
            data=query.encode(),
            headers=self.headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
                body = resp.read()
        except urllib.error.HTTPError as e:
            cut = False
            try:
                detail = _error_text(e.read())
            except OSError:  # the server closed the connection after its status line
                detail, cut = "", True
            plain = self.url.startswith("http://")
            # Go's TLS server answers plain HTTP with a 400 saying so, then hangs up.
            if e.code == 400 and ("HTTPS server" in detail or (cut and plain)):
                raise PrometheusError(
                    f"Prometheus at {self.url} serves TLS only",
                    "use an https:// URL (with --ca-file CA.pem where its certificate is "
                    "self-signed)",
                    "tls",
                ) from None
            if e.code in (400, 422):
                raise PrometheusError(
                    f"Prometheus at {self.url} refused the query: {detail or e.reason}",
                    refusal_hint(detail),
                    "query",
                ) from None
            if e.code in (401, 403):
                given = self.headers.get("Authorization", "").split(" ", 1)[0]
                raise PrometheusError(
                    f"Prometheus at {self.url} refused access (HTTP {e.code}"
                    + (f", with the {given.lower()} credentials given)" if given else ")"),
                    "give a bearer token (--bearer-token-file FILE) or the credentials in "
                    "the URL (https://USER:PASSWORD@HOST:9090)"
                    + (", and check they are the ones it expects" if given else ""),
                    "http",
                ) from None
            if e.code in (503, 504):
                raise PrometheusError(
                    f"Prometheus at {self.url} is overloaded or timed out the query "
                    f"(HTTP {e.code}{': ' + detail if detail else ''})",
                    "retry with a shorter --window or a narrower --match",
                    "timeout",
                ) from None
            raise PrometheusError(
                f"Prometheus at {self.url} answered HTTP {e.code} {e.reason}"
                + (f": {detail}" if detail else ""),
                "check the URL points at Prometheus itself (port 9090 by default), not an "
                "exporter or a proxy that needs a login",
                "http",
            ) from None
        except TimeoutError:
            raise PrometheusError(
                f"Prometheus at {self.url} did not answer within {self.timeout:g} s",
                "retry with a longer --timeout, a shorter --window or a narrower --match",
                "timeout",
            ) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise PrometheusError(
                    f"Prometheus at {self.url}: its TLS certificate is not trusted "
                    f"({reason.verify_message or reason})",
                    "give the CA that signed it (--ca-file CA.pem), or --insecure-skip-verify "
                    "to skip the check",
                    "tls",
                ) from None
            if isinstance(reason, ssl.SSLError):
                raise PrometheusError(
                    f"Prometheus at {self.url}: TLS failed ({reason.reason or reason})",
                    "check the URL's scheme (https:// for a TLS endpoint, http:// otherwise) "
                    "and, where it asks for one, the client certificate (--cert-file)",
                    "tls",
                ) from None
            if isinstance(reason, TimeoutError):
                raise PrometheusError(
                    f"Prometheus at {self.url} did not answer within {self.timeout:g} s",
                    "retry with a longer --timeout, a shorter --window or a narrower --match",
                    "timeout",
                ) from None
            text = getattr(reason, "strerror", None) or str(reason)
            raise PrometheusError(
                f"cannot reach Prometheus at {self.url}: {text}",
                "check the address and that Prometheus runs (`curl URL/-/ready`)",
                "unreachable",
            ) from None
        except (ConnectionError, OSError) as e:
            raise PrometheusError(
                f"cannot reach Prometheus at {self.url}: {e.strerror or e}",
                "check the address and that Prometheus runs (`curl URL/-/ready`)",
                "unreachable",
            ) from None
        return body

    def _data(self, body: bytes) -> Any:
        """The `data` of a successful answer; PrometheusError for any other."""
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(
                f"{self.url} did not answer with Prometheus' JSON",
                "check the URL points at Prometheus' HTTP API (port 9090 by default)",
                "bad_answer",
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            detail = str(doc.get("error") if isinstance(doc, dict) else doc)
            raise PrometheusError(
                f"Prometheus at {self.url} refused the query: {detail}",
                refusal_hint(detail),
                "query",
            )
        return doc.get("data")

    def query(self, promql: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector: (labels, value) per series."""
        params: dict[str, Any] = {"query": promql, "timeout": api_duration(self.timeout)}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("query", params)
        if not isinstance(data, dict) or data.get("resultType") not in ("vector", "scalar"):
            raise PrometheusError(
                f"unexpected answer to {promql!r}",
                "report this with the Prometheus version",
                "bad_answer",
            )
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def _range_params(self, promql: str, start: float, end: float, step: float) -> dict:
        return {
            "query": promql,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
            "timeout": api_duration(self.timeout),
        }

    def query_range_raw(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        """A range query's result as Prometheus sends it: `{"metric": {labels}, "values":
        [[unix_time, "value"], ...]}` per series."""
        data = self._get("query_range", self._range_params(promql, start, end, step))
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(
                f"unexpected answer to {promql!r}",
                "report this with the Prometheus version",
                "bad_answer",
            )
        return data["result"]

    def query_range_texts(
        self, promql: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], str]]:
        """A range query's series as (labels, the text of its values array inside its
        brackets: `[t,"v"],[t,"v"]`), the values left for the caller to read: the fleet reads
        ~20,000 series a batch, where building every [time, "value"] pair costs more than
        reading the values it needs from the text (`split_matrix`). An answer that is not in
        Prometheus' own layout is read as JSON, and its values written back as that text."""
        body = self._body("query_range", self._range_params(promql, start, end, step))
        split = split_matrix(body)
        if split is not None:
            return split
        data = self._data(body)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(
                f"unexpected answer to {promql!r}",
                "report this with the Prometheus version",
                "bad_answer",
            )
        try:
            return [
                (dict(r["metric"]), json.dumps(r.get("values", []), separators=(",", ":"))[1:-1])
                for r in data["result"]
            ]
        except (KeyError, TypeError, ValueError):
            raise PrometheusError(
                f"Prometheus at {self.url} answered {promql!r} with a result that is not a "
                "list of series",
                "check the URL points at Prometheus' HTTP API (port 9090 by default)",
                "bad_answer",
            ) from None

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        """A range query: one Series per result, NaN samples dropped."""
        out = []
        for r in self.query_range_raw(promql, start, end, step):
            times, values = [], []
            for t, v in r["values"]:
                x = float(v)
                if not math.isnan(x):
                    times.append(float(t))
                    values.append(x)
            out.append(Series(r["metric"], tuple(times), tuple(values)))
        return out


# A successful range query as Prometheus writes it (its API's JSON, keys in this order, no
# spaces): https://github.com/prometheus/prometheus/blob/main/web/api/v1/json_codec.go
_MATRIX_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_SERIES_OPEN = '{"metric":'
_VALUES_OPEN = '},"values":['


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (a repeated key would hide what the
    series before it say: JSON readers keep the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key given twice")
    return out


def split_matrix(body: bytes) -> list[tuple[dict[str, str], str]] | None:
    """(labels, values text) per series of a successful range query written in Prometheus'
    own layout; None for any other answer (an error, native histograms, another server's
    spacing, a cut or trailing text), which is then read as JSON.

    A JSON string escapes its quotes, so `{"metric":` and `},"values":[` can only be the
    layout's own keys, and a values array of [number,"text"] pairs ends at its first `]]}`.
    Each series must end where the next begins, and what follows the last must close the
    result and the answer as JSON (warnings and infos may come between)."""
    if not body.startswith(_MATRIX_HEAD) or b'"histograms"' in body:
        return None
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return None
    parts = text.split(_SERIES_OPEN)
    if len(parts) > 1 and len(parts[0]) != len(_MATRIX_HEAD):
        return None
    metrics: list[str] = []
    values: list[str] = []
    tail = text[len(_MATRIX_HEAD) :]  # after the last series: the result's end
    for k, part in enumerate(parts[1:], 1):
        i = part.find(_VALUES_OPEN)
        j = part.find("]]}", i)
        if i < 0 or j < 0:
            return None
        tail = part[j + 3 :]
        if tail != "," and k != len(parts) - 1:
            return None
        pairs = part[i + len(_VALUES_OPEN) : j + 1]
        if "]]" in pairs:  # another key's array of pairs after the values: not the layout
            return None
        metrics.append(part[: i + 1])
        values.append(pairs)
    if not metrics and not tail.startswith("]"):
        return None  # entries that are not series of this layout
    try:
        labels = json.loads("[" + ",".join(metrics) + "]")
        end = json.loads(_MATRIX_HEAD.decode() + tail, object_pairs_hook=_no_duplicates)
    except ValueError:
        return None
    data = end.get("data") if isinstance(end, dict) else None
    if (
        end.get("status") != "success"
        or not isinstance(data, dict)
        or data.get("resultType") != "matrix"
        or data.get("result") != []
    ):
        return None  # what follows the series is not the end of a successful matrix
    if len(labels) != len(values) or not all(isinstance(x, dict) for x in labels):
        return None  # a series' labels were not one object
    return list(zip(labels, values, strict=True))


def api_duration(seconds: float) -> str:
    """A duration as Prometheus' API parses it: whole seconds (`10s`), else milliseconds
    (`2500ms`; Prometheus refuses a fractional `2.5s`)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


_REFUSALS = (
    ('"timeout"', "give --timeout in seconds, e.g. --timeout 10"),
    ('"step"', "give --step as a duration such as 15s (or leave it out: the scrape interval)"),
    (
        "maximum resolution",
        "use a larger --step or a shorter --window (at most 11,000 points per series)",
    ),  # fmt: skip
    ("too many samples", "use a shorter --window, a larger --step or a narrower --match"),
    ('"start"', "check --at and --window: the window's start is not a time Prometheus accepts"),
    ('"end"', "check --at: it is not a time Prometheus accepts"),
    ('"time"', "check --at: it is not a time Prometheus accepts"),
)


def refusal_hint(detail: str) -> str:
    """The next step for a query Prometheus refused, from what it said was wrong."""
    for said, hint in _REFUSALS:
        if said in detail:
            return hint
    if "parse error" in detail or "unexpected" in detail or "label matcher" in detail:
        return "check --match (a PromQL label matcher such as '{cluster=\"a\"}')"
    return "check --match, --window and --step; the message above is Prometheus' own"


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")
ERROR_TEXT_MAX = 120  # an error body said in one short line


def _error_text(body: bytes) -> str:
    """What an error answer says, in one short line: Prometheus' own `error`, else a web
    page's title (its markup dropped), else the start of the text."""
    try:
        doc = json.loads(body)
        return _one_line(str(doc.get("error") or ""), 400)
    except (ValueError, AttributeError):
        pass
    head = body[:4096]
    if head.lstrip()[:1] == b"<":
        m = _TITLE.search(head)
        text = m.group(1).decode("utf-8", "replace") if m else ""
    else:
        text = head.decode("utf-8", "replace")
    return _one_line(_TAG.sub(" ", text), ERROR_TEXT_MAX)


def _one_line(text: str, most: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"
