"""The one sanitizer: everything gputop-diag lets leave the machine in public goes through it
(the report, `--sanitize` on every command, sanitized recordings, the live view's display mode).

It replaces identifiers with pseudonyms that stay the same within one report (`host-k3qz`,
`user-b7xa`, `GPU-m2dq`, `pci-9tfe`) and differ in every other: a pseudonym is its class's
prefix and a keyed hash (HMAC-SHA256) of the identifier under a random key made for each
`Sanitizer` (one per report, per recording, per live `--sanitize` session). The key is never
written, so nothing in a report reverses a pseudonym; `private_map()` is the reverse map for
the person who made the report (`report/private_map.py` writes it mode 0600).

Identifiers are found three ways (`rules.py` holds the classes, shapes and allow-lists as data,
`vocabulary.py` the words that are not names, `text.py` and `forms.py` the free-text rules,
`titles.py` command lines and process titles, `paths.py` paths):
- by field, in documents of the model's JSON shape (`document`): `hostname`, `uuid`, `serial`,
  `pci_bus_id`, `user`, `cmdline` with the process's `name` (a rewritten title is told by the
  two disagreeing), thread and child names, `cuda_visible_devices`, `job_id`; minor numbers
  and device nodes are removed, raw kernel-log text is dropped;
- by shape, in free text (`text`): GPU and MIG UUIDs, PCI bus ids in every form NVML, the
  kernel, lspci and NCCL print, MACs (with and without separators) and InfiniBand GUIDs,
  IPv4 (dotted, leading zeros, dashed, inside cloud host names) and IPv6, e-mail addresses,
  URLs, container, cloud and Kubernetes ids, tokens by shape (JWT, `Bearer`, `hf_`, `ghp_`,
  AWS keys, `--password VALUE`), Slurm ids and node lists in their contexts, peers in NCCL's
  and PyTorch's syntax, environment assignments, paths outside the system's directories;
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

import base64
import hmac
import re
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import XidEvent
from ..model.codec import from_jsonable, jsonable
from . import documents as D
from . import paths as P
from . import rules as R
from . import seeds as E
from . import text as T
from . import titles
from .compiled import compile_seeds, needs_context
from .rules import CLASSES, UUID
from .vocabulary import VOCABULARY

PRIVATE_MAP_SCHEMA = "gputop-diag.private-map/1"
_WORD_CLASSES = ("job_name", "account", "partition", "serial", "project", "secret")
_CASE_SENSITIVE = frozenset({"arg", "env", "path", "url", "secret"})
# An index as written, with what closes the sentence around it (`(CUDA_VISIBLE_DEVICES=7)`),
# and `-1` (no GPU): an ordinal names no one.
_CVD_ORDINAL = re.compile(r"-?\d{1,4}[)\]}>.,;:!?'\"]*")
_CVD_WORDS = frozenset({"all", "none", "void", "nodevfiles"})
_CVD_UUID = re.compile(rf"(?i)(?:GPU|MIG)-[0-9a-f-]+|MIG-GPU-{UUID}/\d+/\d+")


@dataclass
class _Entry:
    cls: str
    canonical: str
    forms: list[str] = field(default_factory=list)


class Sanitizer:
    """Pseudonyms under one key: one report, one recording, one live session."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self._by_value: dict[tuple[str, str], str] = {}
        self._entries: dict[str, _Entry] = {}
        self.counts: Counter[str] = Counter()  # replacements made, per class
        self._emitted: dict[str, set[str]] = {}  # pseudonyms written, per class
        self._counting = True
        self._trace: list[tuple[str, str | None, int]] | None = None
        self._allowed: set[str] = set(R.ALLOWED_WORDS)
        self.hosts: dict[str, str] = {}  # lower-case host name -> as first seen
        self._host_stems: set[str] = set()
        self._domains: set[str] = set()  # the domains this machine's FQDNs are under
        self._users: set[str] = set()  # lower-case
        self._jobs: set[str] = set()
        self._words: dict[str, set[str]] = {c: set() for c in _WORD_CLASSES}
        self._gpu_uuids: set[str] = set()  # lower-case hex of every GPU UUID seen
        self._buses: set[tuple[int, int]] = set()  # (bus, device) of this machine's GPUs
        self._cache: dict[str, tuple[str, list]] = {}
        self._compiled: dict[str, Any] | None = None
        self._generation = 0
        self._originals_cache: tuple[int, Any] | None = None

    # -- pseudonyms ----------------------------------------------------------------------------
    def pseudonym(self, cls: str, original: str, canonical: str | None = None) -> str:
        """The pseudonym of `original` (identified by `canonical`, default itself) in `cls`."""
        canon = original if canonical is None else canonical
        p = self._by_value.get((cls, canon))
        if p is None:
            mac = hmac.new(self._key, f"{cls}\0{canon}".encode("utf-8", "surrogatepass"), "sha256")
            token = base64.b32encode(mac.digest()).decode("ascii").lower()
            for n in (4, 6, 8, 12, 16, 24, 52):  # longer only on a collision
                p = f"{CLASSES[cls].prefix}-{token[:n]}"
                if p not in self._entries:
                    break
            self._by_value[(cls, canon)] = p
            self._entries[p] = _Entry(cls, canon)
        forms = self._entries[p].forms
        if original not in forms:
            forms.append(original)
        self._emit(cls, p)
        return p

    def is_pseudonym(self, text: str) -> bool:
        """`text` is a pseudonym this sanitizer gave (copied back from its own output)."""
        return text in self._entries

    def kept(self, w: T.Work, cls: str, original: str, canonical: str | None = None) -> str:
        """The pseudonym of `original`, parked in `w` (for the free-text rules)."""
        return w.keep(self.pseudonym(cls, original, canonical), original)

    def _emit(self, cls: str, pseudonym: str | None, n: int = 1) -> None:
        if self._counting:
            self.counts[cls] += n
            if pseudonym is not None:
                self._emitted.setdefault(cls, set()).add(pseudonym)
        if self._trace is not None:
            self._trace.append((cls, pseudonym, n))

    def dropped(self, cls: str, n: int = 1) -> None:
        """Count something removed outright (a minor number, a kernel-log line)."""
        if n:
            self._emit(cls, None, n)

    def summary(self) -> dict[str, dict[str, Any]]:
        """{class: {label, replaced, distinct}} for every class that replaced anything, in
        the order of `CLASSES`."""
        out = {}
        for key, c in CLASSES.items():
            n = self.counts.get(key, 0)
            if n:
                distinct = len(self._emitted.get(key, ())) if c.prefix else None
                out[key] = {"label": c.label, "replaced": n, "distinct": distinct}
        return out

    def private_map(self) -> dict[str, Any]:
        """The reverse map: every pseudonym, its class and the original forms it stands for."""
        return {
            "schema": PRIVATE_MAP_SCHEMA,
            "warning": "private: this file reverses the pseudonyms of a sanitized report; "
            "keep it on this machine and never share it",
            "pseudonyms": {
                p: {"class": e.cls, "original": e.forms[0], "forms": list(e.forms)}
                for p, e in sorted(self._entries.items())
                if e.forms
            },
        }

    def _changed(self) -> None:
        self._cache.clear()
        self._compiled = None
        self._generation += 1

    def allow(self, text: str | None) -> None:
        """Let `text` through verbatim wherever it stands (a GPU model, a version)."""
        if text and text not in self._allowed:
            self._allowed.add(text)
            self._changed()

    def allow_document(self, doc: Any, parent: str | None = None) -> None:
        """Allow the GPU model names (the `name` of a GPU or MIG instance) and the driver,
        NVML and CUDA versions a document holds; no other field."""
        if isinstance(doc, dict):
            for k, v in doc.items():
                if isinstance(v, str):
                    if (k == "name" and parent in ("static", "mig_instances")) or k == "model":
                        if R.GPU_MODEL.match(v):
                            self.allow(v)
                    elif k in ("driver_version", "nvml_version", "driver_max_cuda"):
                        if R.VERSION.match(v):
                            self.allow(v)
                else:
                    self.allow_document(v, k)
        elif isinstance(doc, list):
            for v in doc:
                self.allow_document(v, parent)

    def seed_hostname(self, name: str | None) -> None:
        name = (name or "").strip().rstrip(".")
        if len(name) < 2 or name.lower() in R.ALLOWED_WORDS or name.isdigit():
            return
        if R.valid_ipv4(name) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
            return
        new = False
        short, _, domain = name.partition(".")
        for n in {name, short}:
            if n.lower() not in self.hosts:
                self.hosts[n.lower()] = n
                new = True
        if domain.count(".") >= 1 and domain.lower() not in self._domains:
            self._domains.add(domain.lower())  # gpu07.cluster.acme.zone: cluster.acme.zone
            new = True
        # gpu-node-07 and its neighbours gpu-node-NN; dgx01 and dgxNN (not gpu1 and gpuN)
        m = re.fullmatch(r"([A-Za-z][A-Za-z-]*)(\d+)", short)
        if m and sum(c.isalpha() for c in m.group(1)) >= 3:
            stem = m.group(1).lower()
            if ("-" in stem or len(m.group(2)) > 1) and stem not in self._host_stems:
                self._host_stems.add(stem)
                new = True
        if new:
            self._changed()

    def seed_user(self, name: str | None) -> None:
        """A person's account: replaced in any letter case wherever it stands as a word; one
        that is also a word (`nvidia`, `admin`) or shorter than 3 letters only where it stands
        as a user's name (`user=`, a user column, a home directory, `name@host`)."""
        if not name or name in R.SYSTEM_USERS or name.lower() in self._users:
            return
        if name.isdigit() or not re.fullmatch(r"[A-Za-z_][\w.-]*\$?", name):
            return
        self._users.add(name.lower())
        self._changed()

    def seed_job(self, job_id: str | None) -> None:
        """The job's own number only: in `48213_12` (an array task) or `48213.batch` the part
        after it is a task or step, a small number that must not be replaced in other text."""
        m = re.match(r"\s*(\d+)", str(job_id or ""))
        if m and m.group(1) not in self._jobs:
            self._jobs.add(m.group(1))
            self._changed()

    def seed_word(self, cls: str, word: str | None) -> None:
        """A job name, account, partition, serial, project directory or secret: replaced
        wherever it stands as a word (common words only where their context names them)."""
        if not word or len(word) < 3 or word in self._words[cls]:
            return
        if cls not in ("serial", "secret"):
            low = word.lower()
            if low in R.COMMON_WORDS or low in VOCABULARY or word.isdigit():
                return
            if R.SAFE_VALUE.match(word) or titles.safe_program(word):
                return
        if cls == "secret" and (len(word) < 8 or R.SAFE_VALUE.match(word)):
            return
        self._words[cls].add(word)
        self._changed()

    def seed_gpu_uuid(self, uuid: str | None) -> None:
        if uuid and uuid[:4].upper() == "GPU-":
            hexpart = uuid[4:].lower()
            if hexpart not in self._gpu_uuids:
                self._gpu_uuids.add(hexpart)
                self._changed()

    def seed_pci(self, bus_id: str | None) -> None:
        """A GPU's bus id (any form): its bus and device are then known in the short forms
        that could otherwise be a time (`3b:00`, `0:18:00.0`)."""
        parts = (bus_id or "").split(":")
        try:
            key = (int(parts[-2], 16), int(parts[-1][:2], 16))
        except (ValueError, IndexError):
            return
        if key not in self._buses:
            self._buses.add(key)
            self._changed()

    def known_bus(self, bus: int, dev: int) -> bool:
        return (bus, dev) in self._buses

    def known_domain(self, domain: str) -> bool:
        return domain.lower() in self._domains

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
        if not path or path == "/":
            return
        self.learn([path])
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if base and not re.fullmatch(r"[\d.]+", base):
            self.seed_word("project", base)

    def learn(self, texts: Iterable[str]) -> None:
        """Take the seeds these texts reveal (home directories, `UserId=`, `JobId=`, node
        lists, `user@host`) without counting: run over a whole document before sanitizing it,
        so that a name is replaced even where it shows before its context."""
        counting, self._counting = self._counting, False
        try:
            for t in texts:
                if t and isinstance(t, str):
                    self._text(t)
        finally:
            self._counting = counting

    def compiled(self) -> dict[str, Any]:
        """The seeded words as patterns (rebuilt after a seed changes)."""
        if self._compiled is None:
            self._compiled = compile_seeds(
                allowed=self._allowed,
                hosts=self.hosts,
                stems=self._host_stems,
                domains=self._domains,
                users=self._users,
                jobs=self._jobs,
                words=self._words,
            )
        return self._compiled

    # -- free text -----------------------------------------------------------------------------
    def text(self, s: str | None, limit: int | None = None) -> str | None:
        """`s` with every identifier in it replaced; with `limit`, then cut to that many
        characters (`…` at the end). Always sanitize, then cut: an identifier cut in half
        first would match no rule."""
        if not s:
            return s
        out = self._text(s)
        if limit is not None and len(out) > limit:
            out = out[: max(0, limit - 1)].rstrip() + "…"
        return out

    def _text(self, s: str) -> str:
        hit = self._cache.get(s)
        if hit is not None:
            for cls, p, n in hit[1]:
                self._emit(cls, p, n)
            return hit[0]
        generation = self._generation
        outer, self._trace = self._trace, []
        try:
            w = T.Work()
            out = w.restore(T.scrub(self, T.PRIVATE_USE.sub("?", s), w))
            trace = self._trace
        finally:
            inner, self._trace = self._trace, outer
            if outer is not None:
                outer.extend(inner)
        if generation == self._generation and len(self._cache) < 100_000:
            self._cache[s] = (out, trace)
        return out

    # -- fields --------------------------------------------------------------------------------
    def hostname(self, name: str | None) -> str | None:
        if not name:
            return name
        self.seed_hostname(name)
        w = T.Work()
        return w.restore(T.host(self, name, w))

    def user(self, name: str | None) -> str | None:
        """A user column's value: any account but the system's becomes its pseudonym (a name
        that is also a word, `nvidia`, too: here it stands as a user's)."""
        if not name or name in R.SYSTEM_USERS:
            return name
        self.seed_user(name)
        return self.pseudonym("user", name, name.lower())

    def job(self, job_id: str | None) -> str | None:
        """A Slurm job id (`48213`, `48213_7`, `48213.batch`, `7`): its number replaced."""
        if not job_id:
            return job_id
        self.seed_job(job_id)
        m = re.fullmatch(r"(\s*)(\d+)(.*)", str(job_id), re.S)
        if m is None:
            return self.text(job_id)
        rest = self.text(m.group(3)) or ""
        return m.group(1) + self.pseudonym("job", m.group(2)) + rest

    def uuid(self, text: str) -> str:
        """The pseudonym of a GPU UUID, a MIG UUID (either form), a UUID prefix of a known GPU
        (CUDA_VISIBLE_DEVICES accepts those: it gets its GPU's pseudonym) or a bare UUID."""
        low = text.lower()
        if low.startswith("mig-"):
            return self.pseudonym("mig_uuid", text, low[4:])
        if low.startswith("gpu-"):
            hexpart = low[4:]
            if len(hexpart) < 36:
                found = [u for u in self._gpu_uuids if u.startswith(hexpart)]
                if len(found) == 1:
                    hexpart = found[0]
            return self.pseudonym("gpu_uuid", text, hexpart)
        return self.pseudonym("uuid", text, low)

    def pci(self, text: str) -> str:
        """The pseudonym of a PCI bus id in any written form (NVML's `00000000:3B:00.0`, sysfs
        `0000:3b:00.0`, the kernel log's `0000:3b:00`, lspci's `3b:00.0`): one per device."""
        parts = text.split(":")
        if len(parts) == 2:
            parts = ["0", *parts]
        try:
            domain, bus, dev = (int(x, 16) for x in (parts[-3], parts[-2], parts[-1][:2]))
        except ValueError:
            return self.pseudonym("pci", text, text.lower())
        return self.pci_of(text, domain, bus, dev)

    def pci_of(self, text: str, domain: int, bus: int, dev: int) -> str:
        """The pseudonym of the device at `domain:bus:dev`, written as `text` (NCCL's `3b000`,
        `GPU/3B000`, a bare `3B:00`)."""
        self.seed_pci(f"{bus:02x}:{dev:02x}")
        return self.pseudonym("pci", text, f"{domain:04x}:{bus:02x}:{dev:02x}")

    def cuda_visible_devices(self, value: str | None) -> str | None:
        """CUDA_VISIBLE_DEVICES with its shape kept: indices stay, UUIDs (and prefixes of them)
        become their GPU's pseudonym, anything else a pseudonym of its own."""
        if value is None:
            return None
        out = []
        for entry in value.split(","):
            s = entry.strip()
            if not s or _CVD_ORDINAL.fullmatch(s) or s.lower() in _CVD_WORDS:
                out.append(entry)
            elif _CVD_UUID.fullmatch(s):
                out.append(self.uuid(s))
            else:
                out.append(self.pseudonym("env", s))
        return ",".join(out)

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
        shown = self.path_pseudonym(path)
        return self.text(path) or path if shown is None else shown

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

    def site(self, text: str) -> str:
        """A line of the job's code the probe names (`train.py:42`, `/home/a/llm/train.py:88`):
        the line number kept, an absolute path replaced as paths are, a path in the job's own
        tree (relative to its directory) replaced whole, a bare file name as a command line's
        script is (`python train.py`)."""
        path, sep, line = text.rpartition(":")
        if not sep or not line.isdigit():
            path, line = text, ""
        if not path or path.startswith("("):  # "(other sites)"
            return self.text(text) or text
        if path.startswith(("/", "~")):
            shown = self.path(path)
        else:
            shown = self.pseudonym("path" if "/" in path else "arg", path)
        return shown + (f":{line}" if line else "")

    def model(self, obj: Any) -> Any:
        """A sanitized copy of a model object (a Snapshot, a Diagnosis): the same type, every
        field through `document`."""
        doc = jsonable(obj)
        self.learn_document(doc)
        return from_jsonable(type(obj), self.document(doc))

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
        allowed = T.boundary_re(self._allowed, left=T.ALLOWED_L, right=T.ALLOWED_R)
        t = allowed.sub(" ", text) if allowed is not None else text
        found: Counter[str] = Counter()
        for cls, rx, quick in R.LEAK_SHAPES:
            if not quick.search(t):
                continue
            for m in rx.finditer(t):
                if R.shape_ok(cls, m.group(0), t[max(0, m.start() - 40) : m.start()]):
                    found[cls] += 1
        exact, folded, cls_of, ours = self._originals()
        if ours is not None:  # our own pseudonyms hold letters that may spell a short name
            t = ours.sub(" ", t)
        for rx, hay, fold in ((exact, t, False), (folded, t, True)):
            if rx is not None:
                for m in rx.finditer(hay):
                    found[cls_of[(m.group(0).lower() if fold else m.group(0), fold)]] += 1
        return found

    def _originals(self) -> tuple[Any, Any, dict[tuple[str, bool], str], Any]:
        """Every original this sanitizer replaced, as two patterns (case matters for paths,
        arguments and secrets; not for names and hex identifiers), and our pseudonyms. A name
        replaced only in its context (`nvidia` as a user, job 42) is not looked for elsewhere:
        it is a word there."""
        n = sum(len(e.forms) for e in self._entries.values())
        if self._originals_cache is not None and self._originals_cache[0] == n:
            return self._originals_cache[1]
        cls_of: dict[tuple[str, bool], str] = {}
        for e in self._entries.values():
            if not CLASSES[e.cls].leak_checked:
                continue
            for form in e.forms:
                if not _leak_checked(e.cls, form):
                    continue
                fold = e.cls not in _CASE_SENSITIVE
                cls_of.setdefault((form.lower() if fold else form, fold), e.cls)
        exact = T.boundary_re([f for f, fold in cls_of if not fold], left=T.WORD_L, right=T.WORD_R)
        folded = T.boundary_re(
            [f for f, fold in cls_of if fold], left=T.WORD_L, right=T.WORD_R, flags=re.I
        )
        ours = T.boundary_re(self._entries, left=r"(?<![\w-])", right=r"(?![\w-])")
        self._originals_cache = (n, (exact, folded, cls_of, ours))
        return exact, folded, cls_of, ours


def _leak_checked(cls: str, form: str) -> bool:
    """Whether an original of `cls` is looked for anywhere in finished text."""
    if cls in ("hostname", "user", "job"):
        return len(form) >= 2 and not needs_context(cls, form)
    if cls == "serial":
        return len(form) >= 4
    if cls in ("job_name", "account", "partition", "project"):
        low = form.lower()
        return len(form) >= 3 and low not in R.COMMON_WORDS and low not in VOCABULARY
    return len(form) >= 3


def strings_of(doc: Any) -> list[str]:
    """Every string in a JSON document, keys included (numbers name no one)."""
    out: list[str] = []
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(k for k in v if isinstance(k, str))
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def leak_note(found: Counter[str]) -> str:
    """Words for what a leak check found; never the leaked text itself."""
    return ", ".join(f"{n} × {CLASSES[c].label}" for c, n in found.items())
