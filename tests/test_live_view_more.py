"""The live view's later fixes: the tree view's launcher row names its user (and that name is
sanitized like every user name), and the other items of the live view's review."""

from __future__ import annotations

import dataclasses
import random
import string

from gputop_diag import sim
from gputop_diag.monitor.core import Monitor
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sanitize.snapshot import sanitized_snapshot_json


def _name(rng: random.Random) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randint(3, 9))
    )


def test_a_launchers_user_is_sanitized_on_every_form():
    snap = Monitor(sim.build("comm-bound")).tick().snapshot
    rng = random.Random(20261203)
    for _ in range(20):
        owner = _name(rng)
        procs = tuple(
            dataclasses.replace(p, parent_user=owner if k % 2 else owner.upper())
            for k, p in enumerate(snap.processes)
        )
        doc = sanitized_snapshot_json(dataclasses.replace(snap, processes=procs))
        shown = [p["parent_user"] for p in doc["processes"]]
        assert all(u.startswith("user-") for u in shown), shown
        assert len(set(shown)) == 1  # one name, one pseudonym, whatever its case
        assert owner not in str(doc).lower()
        clean = Sanitizer().model(dataclasses.replace(snap, processes=procs))
        assert all(p.parent_user.startswith("user-") for p in clean.processes)
