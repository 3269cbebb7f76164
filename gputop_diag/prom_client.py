"""A small Prometheus HTTP API client (urllib only): instant and range queries, with failures
said in words a user can act on.

The HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/) answers
`{"status": "success", "data": {"resultType": ..., "result": [...]}}`; a range query's result is
a list of `{"metric": {labels}, "values": [[unix_time, "value"], ...]}`.
"""

from __future__ import annotations

import base64
import json
import math
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
        self.kind = kind  # "unreachable", "timeout", "http", "query", "bad_answer"


@dataclass(frozen=True, slots=True)
class Series:
    """One range-query series: its labels and its samples (NaN values left out)."""

    labels: dict[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]


class Prometheus:
    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
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
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        query = urllib.parse.urlencode(params)
        # POST keeps long selectors out of the URL (the API takes form-encoded POSTs).
        req = urllib.request.Request(
            f"{self.url}/api/v1/{path}",
            data=query.encode(),
            headers=self.headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as e:
            detail = _error_text(e.read())
            if e.code in (400, 422):
                raise PrometheusError(
                    f"Prometheus at {self.url} refused the query: {detail or e.reason}",
                    "check --match (a PromQL label matcher such as '{cluster=\"a\"}')",
                    "query",
                ) from None
            if e.code in (401, 403):
                raise PrometheusError(
                    f"Prometheus at {self.url} refused access (HTTP {e.code})",
                    "give the credentials in the URL (http://USER:PASSWORD@HOST:9090)",
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
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(
                f"{self.url} did not answer with Prometheus' JSON",
                "check the URL points at Prometheus' HTTP API (port 9090 by default)",
                "bad_answer",
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise PrometheusError(
                f"Prometheus at {self.url} refused the query: "
                f"{doc.get('error') if isinstance(doc, dict) else doc}",
                "check --match (a PromQL label matcher such as '{cluster=\"a\"}')",
                "query",
            )
        return doc.get("data")

    def query(self, promql: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector: (labels, value) per series."""
        params: dict[str, Any] = {"query": promql, "timeout": f"{self.timeout:g}s"}
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

    def query_range_raw(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        """A range query's result as Prometheus sends it: `{"metric": {labels}, "values":
        [[unix_time, "value"], ...]}` per series."""
        data = self._get(
            "query_range",
            {
                "query": promql,
                "start": f"{start:.3f}",
                "end": f"{end:.3f}",
                "step": f"{step:g}",
                "timeout": f"{self.timeout:g}s",
            },
        )
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(
                f"unexpected answer to {promql!r}",
                "report this with the Prometheus version",
                "bad_answer",
            )
        return data["result"]

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


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        return str(doc.get("error") or "")
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace").strip()
