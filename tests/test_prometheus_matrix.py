"""Range answers read from their text (`client.split_matrix`, `Grid.from_text`) give exactly
the columns JSON gives (`json.loads`, `Grid.from_raw`), whatever the labels hold, and answers in
any other layout are read as JSON. The answers are generated: label values drawn from
characters that matter to JSON and to the layout (quotes, backslashes, brackets, braces, the
layout's own keys, non-ASCII), series missing points, starting late, NaN and infinite values,
warnings, native histograms and another server's spacing."""

from __future__ import annotations

import json
import random

import pytest

from gputop_diag.fleet.query import Grid, run_jobs
from gputop_diag.prometheus.client import Prometheus, PrometheusError, split_matrix

GRID = Grid(start=1_796_568_000.0, step=15.0, n=26)
PIECES = ['"', "\\", "]]}", '{"metric":', '},"values":[', ",", "[", "}", "é", "\n", "a", "7", " "]


def _label(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6)))


def _value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.05:
        return rng.choice(["NaN", "+Inf", "-Inf"])
    if roll < 0.3:
        return str(rng.randrange(0, 101))
    return repr(round(rng.uniform(-1e6, 1e9), rng.randrange(0, 12)))


def _series(rng: random.Random, k: int) -> dict:
    labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": str(k)}
    labels |= {f"l{j}": _label(rng) for j in range(rng.randrange(0, 4))}
    shape = rng.random()
    points = range(GRID.n)
    if shape < 0.2:  # starts late
        points = range(rng.randrange(1, GRID.n), GRID.n)
    elif shape < 0.35:  # gaps
        points = [p for p in points if rng.random() < 0.7] or [0]
    values = [[GRID.start + p * GRID.step, _value(rng)] for p in points]
    if rng.random() < 0.1:  # a timestamp with its milliseconds, as Prometheus writes them
        values = [[t + 0.001, v] for t, v in values]
    return {"metric": labels, "values": values}


def _answer(series: list[dict], *, extra: dict | None = None, compact: bool = True) -> bytes:
    doc = {"status": "success", "data": {"resultType": "matrix", "result": series}}
    doc |= extra or {}
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps(doc, ensure_ascii=False, separators=seps).encode()


def _by_json(body: bytes) -> list[tuple[dict, list]]:
    return [(c.labels, c.values) for c in map(GRID.from_raw, json.loads(body)["data"]["result"])]


def _by_text(split: list[tuple[dict, str]]) -> list[tuple[dict, list]]:
    floats: dict[str, float] = {}
    return [(c.labels, c.values) for c in (GRID.from_text(lab, t, floats) for lab, t in split)]


@pytest.mark.parametrize("seed", range(40))
def test_prometheus_layout_is_read_from_its_text_as_json_reads_it(seed):
    rng = random.Random(seed)
    series = [_series(rng, k) for k in range(rng.randrange(0, 30))]
    extra = {"warnings": ['a "]]}" warning']} if seed % 4 == 0 else None
    body = _answer(series, extra=extra)
    split = split_matrix(body)
    assert split is not None
    assert [lab for lab, _ in split] == [s["metric"] for s in series]
    assert _by_text(split) == _by_json(body)


def test_an_empty_result_is_no_series():
    assert split_matrix(_answer([])) == []
    assert split_matrix(_answer([], extra={"warnings": ["w"]})) == []


_TWO = _answer([_series(random.Random(3), 0), _series(random.Random(4), 1)])
_ONE_PAIR = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":'


@pytest.mark.parametrize(
    "body",
    [
        _TWO[:-2],  # cut before the answer closes
        _TWO + b"XYZ not json",
        _TWO + b'{"status":"error"}',
        _TWO[:-1] + b',"status":"error"}',  # JSON whose last word is an error
        _answer([])[:-1] + b',"status":"error"}',
        _ONE_PAIR + b'[[1,"1"]],"x":[[1,"2"]]}]}}',  # another array of pairs after the values
        _TWO[:-2] + b',"resultType":"vector"}}',  # keys after the series JSON reads otherwise
        _TWO[:-2] + b',"result":[]}}',
        _answer([])[:-2] + b"7]}}",  # entries that are not series
        _answer([7]),
        _answer([{"values": [[1, "2"]]}]),
        _answer([_series(random.Random(1), 0)], compact=False),  # another server's spacing
        _answer([_series(random.Random(2), 0) | {"histograms": [[1, {"count": "1"}]]}]),
        b'{"status":"error","errorType":"bad_data","error":"parse error"}',
        b'{"status":"success","data":{"resultType":"vector","result":[]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}',  # cut
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":'
        b'[[1,"2"]]}x{"metric":{},"values":[[1,"2"]]}]}}',  # not a comma between series
        b"\xff\xfe not text",
    ],
)
def test_any_other_layout_is_left_to_json(body):
    assert split_matrix(body) is None


@pytest.fixture
def answers(canned_http):
    """A server giving each request the next of `answers.bodies`, as JSON."""
    canned_http.bodies = []
    canned_http.answer = lambda path: (200, "application/json", canned_http.bodies.pop(0))
    return canned_http


def test_a_spaced_answer_through_the_client_gives_the_same_columns(answers):
    rng = random.Random(7)
    series = [_series(rng, k) for k in range(12)]
    answers.bodies = [_answer(series, compact=False), _answer(series)]
    prom = Prometheus(answers.url)
    spaced = prom.query_range_texts("q", GRID.start, GRID.end, GRID.step)
    plain = prom.query_range_texts("q", GRID.start, GRID.end, GRID.step)
    assert _by_text(spaced) == _by_text(plain) == _by_json(_answer(series))


def test_an_error_or_another_result_type_is_a_prometheus_error(answers):
    answers.bodies = [
        b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}',
        b'{"status":"success","data":{"resultType":"vector","result":[]}}',
    ]
    prom = Prometheus(answers.url)
    with pytest.raises(PrometheusError) as e:
        prom.query_range_texts("q", GRID.start, GRID.end, GRID.step)
    assert e.value.kind == "query" and "parse error at char 3" in e.value.message
    with pytest.raises(PrometheusError) as e:
        prom.query_range_texts("q", GRID.start, GRID.end, GRID.step)
    assert e.value.kind == "bad_answer"


def test_values_that_are_not_pairs_are_a_bad_answer_not_a_traceback(answers):
    bad = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":'
    answers.bodies = [bad + b'[["x","1"],[2]]}]}}']
    prom = Prometheus(answers.url)
    with pytest.raises(PrometheusError) as e:
        run_jobs(prom, GRID, {"q": ("series", "q")})
    assert e.value.kind == "bad_answer" and "not [time" in e.value.message


def test_infinities_and_nan_read_as_missing_samples():
    values = [[GRID.start + k * GRID.step, v] for k, v in enumerate(["+Inf", "-Inf", "NaN", "1"])]
    values += [[GRID.start + k * GRID.step, "2"] for k in range(4, GRID.n)]
    body = _answer([{"metric": {"gpu": "0"}, "values": values}])
    ((_, col),) = _by_text(split_matrix(body))
    assert col[:4] == [None, None, None, 1.0] and col[4:] == [2.0] * (GRID.n - 4)
    assert _by_json(body) == [({"gpu": "0"}, col)]


def test_a_result_that_is_not_series_is_a_bad_answer(answers):
    answers.bodies = [_answer([7], compact=False), _answer([{"values": []}], compact=False)]
    prom = Prometheus(answers.url)
    for _ in range(2):
        with pytest.raises(PrometheusError) as e:
            prom.query_range_texts("q", GRID.start, GRID.end, GRID.step)
        assert e.value.kind == "bad_answer" and "not a list of series" in e.value.message
