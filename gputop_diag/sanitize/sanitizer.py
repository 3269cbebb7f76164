"""The one sanitizer: everything gputop-diag lets leave the machine in public goes through it
(the report, `--sanitize` on every command, sanitized recordings, the live view's display mode).

It replaces identifiers with pseudonyms that stay the same within one report (`host-k3qz`,
`user-b7xa`, `GPU-m2dq`, `pci-9tfe`) and differ in every other: a pseudonym is its class's
prefix and a keyed hash (HMAC-SHA256) of the identifier under a random key made for each
`Sanitizer` (one per report, per recording, per live `--sanitize` session). The key is never
written, so nothing in a report reverses a pseudonym; `private_map()` is the reverse map for
the person who made the report (`report/private_map.py` writes it mode 0600).

A `Sanitizer` is its pseudonym table (`table.py`: the key, the pseudonyms, the counts, what is
allowed through, the seeds) with the rules over it as its methods. Each rule module takes the
table and imports only what lies below it, and none imports this front (from the bottom up;
`tests/test_sanitize_layers.py` checks it):
- `rules.py`, `vocabulary.py`, `work.py`, `compiled.py`: the classes, shapes, allow-lists and
  word sets as data and patterns;
- `table.py`: the pseudonym table and its seeds; `leaks.py` the final check over it;
- `paths.py` paths; `forms.py` the written forms real tools print; `run_names.py` the options
  that name a run; `text.py` the free-text rules, in order; `titles.py` command lines and
  process titles; `fields.py` values by field; `seeds.py` what an environment names;
  `health.py` health findings; `cgroups.py` cgroup paths and systemd units; `owners.py` who
  a process runs for; `documents.py` documents of the model's JSON shape;
  `snapshot.py` sanitized snapshots; `ranks.py` a distributed job's ranks (pids as pid-…).

Identifiers are found three ways:
- by field, in documents of the model's JSON shape (`document`): `hostname`, `uuid`, `serial`,
  `pci_bus_id`, `user`, `cmdline` with the process's `name` (a rewritten title is told by the
  two disagreeing), thread and child names, `cuda_visible_devices`, `job_id`, a process's
  `owner` (its pod's uid, name and namespace, its container's id and name, its Slurm job, its
  unit); minor numbers and device nodes are removed, raw kernel-log text is dropped;
- by shape, in free text (`text`): GPU and MIG UUIDs, PCI bus ids in every form NVML, the
  kernel, lspci and NCCL print, MACs (with and without separators) and InfiniBand GUIDs,
  IPv4 (dotted, leading zeros, dashed, inside cloud host names) and IPv6, e-mail addresses,
  URLs, container, cloud and Kubernetes ids, tokens by shape (JWT, `Bearer`, `hf_`, `ghp_`,
  AWS keys, `--password VALUE`), Slurm ids and node lists in their contexts, peers in NCCL's
  and PyTorch's syntax, the host of NCCL's line prefix (`HOST:PID:TID [DEV] NCCL INFO`) and
  the addresses of its interfaces, environment assignments, paths outside the system's
  directories;
- by seed (`seed_*`, `seed_machine`, `learn`): the machine's host names and domains, Slurm's
  node names, user names (process owners, /etc/passwd, home directories), job ids, job, run
  and project names, accounts and partitions, serials, secrets in environments: replaced in any
  letter case wherever they stand as words, except names that are also words (`nvidia`) and
  short job ids, replaced only where their context names them (`compiled.py`).

Free text is sanitized whole, then cut (`text(s, limit=N)`). Allowed through: GPU model names,
driver/NVML/CUDA versions, `localhost`, loopback addresses, public documentation hosts, public
programs' and runtimes' names. Fail closed: `leaks(text)` checks finished output for any
original the sanitizer has replaced and any identifier shape left; callers leave out what does
not pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..model import Owner, XidEvent
from ..model.codec import from_jsonable, jsonable
from . import documents as D
from . import fields, titles
from . import forms as F
from . import leaks as L
from . import owners as O
from . import paths as P
from . import ranks as RK
from . import seeds as E
from . import text as T
from .leaks import leak_note, strings_of
from .table import PRIVATE_MAP_SCHEMA, PseudonymTable

__all__ = ["PRIVATE_MAP_SCHEMA", "Sanitizer", "leak_note", "strings_of"]


class Sanitizer(PseudonymTable):
    """Pseudonyms under one key: one report, one recording, one live session. The table's
    own methods (`pseudonym`, `seed_*`, `user`, `uuid`, `pci`, `summary`, `private_map`,
    ...) and the rules over it."""

    # -- seeds ---------------------------------------------------------------------------------
    def seed_machine(self, names: Any) -> None:
        """Seed what the machine knows (`collect.identity.read_machine_names`): its host names,
        this shell's environment and the job's, the job's working directories and command
        lines, the accounts of people, Slurm's answers."""
        E.seed_machine(self, names)

    def seed_environ(self, environ: Mapping[str, str]) -> None:
        """A process environment: the user, home and working directory, the scheduler's job,
        nodes, account and partition, the run's and project's names, secrets."""
        E.seed_environ(self, environ)

    def seed_cwd(self, path: str | None) -> None:
        """A job's working directory: its own name is a project's name."""
        E.seed_cwd(self, path)

    def learn(self, texts: Iterable[str]) -> None:
        """Take the seeds these texts reveal (home directories, `UserId=`, `JobId=`, node
        lists, `user@host`) without counting: run over a whole document before sanitizing it,
        so that a name is replaced even where it shows before its context."""
        T.learn(self, texts)

    # -- free text -----------------------------------------------------------------------------
    def text(self, s: str | None, limit: int | None = None) -> str | None:
        """`s` with every identifier in it replaced; with `limit`, then cut to that many
        characters (`…` at the end). Always sanitize, then cut: an identifier cut in half
        first would match no rule."""
        return T.sanitize(self, s, limit)

    # -- fields --------------------------------------------------------------------------------
    def hostname(self, name: str | None) -> str | None:
        return fields.hostname(self, name)

    def job(self, job_id: str | None) -> str | None:
        """A Slurm job id (`48213`, `48213_7`, `48213.batch`, `7`): its number replaced."""
        return fields.job(self, job_id)

    def cuda_visible_devices(self, value: str | None) -> str | None:
        """CUDA_VISIBLE_DEVICES with its shape kept: indices stay, UUIDs (and prefixes of them)
        become their GPU's pseudonym, anything else a pseudonym of its own."""
        return F.cuda_visible_devices(self, value)

    def argv(self, args: Sequence[str] | None, name: str | None = None) -> list[str] | None:
        """A command line: the program's name kept, options in `SAFE_FLAGS` kept with values
        that are numbers or switches, every other argument replaced (paths, names, tokens). A
        rewritten process title (spaces in argv[0], or argv[0] not the program `name`, the
        process's comm, says) is read word by word (`titles.py`)."""
        if args is None:
            return None
        return titles.argv(self, args, name)

    def process_name(self, name: str | None, cmdline: Sequence[str] | None = None) -> str | None:
        """A process's or thread's name (comm): kept when it names a public program or the
        program of its untouched command line, otherwise replaced as a title is."""
        return titles.process_name(self, name, cmdline)

    def path_pseudonym(self, path: str) -> str | None:
        """A path with what names a person or a project replaced (`~user-x/path-y`,
        `/scratch/path-z`); None for the system's own paths, kept as they are."""
        return P.path_pseudonym(self, path)

    def path(self, path: str) -> str:
        return fields.path(self, path)

    def site(self, text: str) -> str:
        """A line of the job's code the probe names (`train.py:42`, `/home/a/llm/train.py:88`):
        the line number kept, an absolute path replaced as paths are, a path in the job's own
        tree (relative to its directory) replaced whole, a bare file name as a command line's
        script is (`python train.py`)."""
        return fields.site(self, text)

    # -- documents -----------------------------------------------------------------------------
    def learn_document(self, doc: Any) -> None:
        """Seed from a document of the model's JSON shape (a snapshot, a recording line, a
        diagnosis): its names by field, the GPU models and versions as allowed, then whatever
        its free text reveals (`documents.py`)."""
        D.learn_document(self, doc)

    def document(self, doc: Any) -> Any:
        """A sanitized copy of `doc` (JSON values of the model's shape). `learn_document` first,
        so that every seed is known before the first field is written."""
        return D.document(self, doc)

    def model(self, obj: Any) -> Any:
        """A sanitized copy of a model object (a Snapshot, a Diagnosis, a distributed job's
        `RanksView`: `ranks.py`): the same type, every field through `document`."""
        doc = jsonable(obj)
        self.learn_document(doc)
        if RK.is_ranks(doc):
            return RK.sanitized_ranks(self, obj, doc)
        return from_jsonable(type(obj), self.document(doc))

    def owner(self, owner: Owner | None) -> Owner | None:
        """A process's owner with every id replaced (`owners.py`): its pod's uid, name and
        namespace, its container's id and name, its Slurm job, the uid or name in its unit."""
        if owner is None:
            return None
        doc = jsonable(owner)
        O.learn_owner(self, doc)
        return from_jsonable(Owner, O.owner_document(self, doc))

    def owner_label(self, owner: Owner | None) -> str | None:
        """What a process table shows of an owner (`Owner.label`) under `--sanitize`: whole
        pseudonyms (`pod ns-…/host-…`, `ctr container-…`, `job job-…`), never the prefix of a
        pseudonym that `Owner.label` of a sanitized owner would cut."""
        if owner is None:
            return None
        doc = jsonable(owner)
        O.learn_owner(self, doc)
        return O.owner_label(self, doc)

    def xid_events(self, events: Sequence[Any]) -> tuple[Any, ...]:
        """Xid events (the live view's list) with their bus ids replaced and their raw
        kernel-log text dropped."""
        doc = {"xid_events": jsonable(list(events))}
        self.learn_document(doc)
        return from_jsonable(tuple[XidEvent, ...], self.document(doc)["xid_events"])

    # -- the final check -----------------------------------------------------------------------
    def leaks(self, text: str) -> Counter[str]:
        """What in `text` still looks like an identifier, per class: an original this sanitizer
        has replaced somewhere, or a shape that must never be shared. Empty: safe to share."""
        return L.leaks(self, text)
