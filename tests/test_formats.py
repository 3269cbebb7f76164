"""The one formatter every surface uses: each form where its rounding or its unit turns."""

from __future__ import annotations

from gputop_diag.model import GIB, MIB
from gputop_diag.model import formats as F


def test_bytes_in_every_form():
    assert F.gib(None) == "n/a" and F.gib(None, none="—") == "—"
    assert F.gib(int(1.25 * GIB)) == "1.2" and F.gib(80 * GIB) == "80.0"
    assert F.gib_unit(3 * GIB) == "3.0 GiB"
    assert F.gib_number(int(1.26 * GIB)) == 1.3 and F.gib_number(None) is None
    assert F.size(512 * MIB) == "512 MiB"
    assert F.size(GIB - 1) == "1024 MiB"  # below a GiB: still MiB
    assert F.size(GIB) == "1.0 GiB" and F.size(None, none="—") == "—"


def test_percentages():
    assert F.pct(41.6) == "42 %" and F.pct(41.6, unit=False) == "42" and F.pct(None) == "n/a"


def test_spans_turn_unit_at_a_minute_and_an_hour():
    assert F.span(59.4) == "59 s" and F.span(60) == "1 min" and F.span(3599) == "60 min"
    assert F.span(3600) == "1.0 h" and F.span(-120) == "-2 min" and F.span(None) == "n/a"


def test_clock_rounds_to_the_second_and_names_days():
    assert F.clock(4.4) == "0:04" and F.clock(4.6) == "0:05" and F.clock(-3) == "0:00"
    assert F.clock(3599.6) == "1:00:00" and F.clock(3723) == "1:02:03"
    assert F.clock(86_400 + 3 * 3600) == "1d 3h" and F.clock(None) == "?"


def test_clip_words_never_cuts_a_word_in_half():
    from gputop_diag.model.formats import clip_words

    line = "NCCL WARN connect to ip-10-20-30-41.ec2.internal<43011> failed: Connection refused"
    assert clip_words(line, 200) == line
    for limit in range(1, len(line)):
        out = clip_words(line, limit)
        assert len(out) <= limit and out.endswith("…")
        kept = out[:-1].split()
        assert kept == line.split()[: len(kept)]  # whole words, in order
    assert clip_words("x" * 50, 10) == "…"  # one long token: left out, not cut
