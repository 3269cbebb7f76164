"""The sanitizer's keyed pseudonym table and its seeds: the state every rule reads and writes.

A pseudonym is its class's prefix and a keyed hash (HMAC-SHA256) of the identifier's canonical
form under a random key made for each table (one per report, per recording, per live
`--sanitize` session); the key is never written, so nothing in a report reverses a pseudonym.
The table holds every pseudonym given with the original forms it stands for (`private_map`),
the replacements counted per class (`summary`), what is allowed through verbatim, and the
seeds: the machine's host names and domains, user names, job ids, job, run and project names,
accounts, partitions, serials, secrets, GPU UUIDs and bus ids, and who GPU processes run for
(pods' uids, names and namespaces, containers' ids and names, the uids of users' sessions),
compiled into patterns (`compiled.py`) whenever one is added.

The rule modules (`text.py`, `forms.py`, `paths.py`, `titles.py`, `documents.py`, ...) take a
table; `sanitizer.Sanitizer` is a table with those rules as its methods. This module stands on
the data alone (`rules.py`, `vocabulary.py`, `compiled.py`, `work.py`).
"""

from __future__ import annotations

import base64
import hmac
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from . import rules as R
from .compiled import compile_seeds, needs_context
from .rules import CLASSES
from .vocabulary import VOCABULARY
from .work import WORD_L, WORD_R, Work, boundary_re

PRIVATE_MAP_SCHEMA = "gputop-diag.private-map/1"
_WORD_CLASSES = (
    "job_name",
    "account",
    "partition",
    "serial",
    "project",
    "secret",
    "namespace",
    "container_name",
)
# A process table names a container and a pod without names by the first 8 hex digits of
# their id (`Owner.label`): a known id's prefix of this length is its id's too.
ID_PREFIX = 8
_CASE_SENSITIVE = frozenset({"arg", "env", "path", "url", "secret"})


@dataclass
class _Entry:
    """One pseudonym: its class, the canonical form it was made from, the forms it replaced."""

    cls: str
    canonical: str
    forms: list[str] = field(default_factory=list)


class PseudonymTable:
    """Pseudonyms under one key, and the seeds: one report, one recording, one live session."""

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
        self._pods: set[str] = set()  # pods' names (also seeded as host names), lower-case
        self._ids: dict[str, tuple[str, str]] = {}  # known hex id -> (class, canonical form)
        self._uid_users: dict[int, str] = {}  # a process's uid -> its user's name
        self._cache: dict[str, tuple[str, list]] = {}
        self._compiled: dict[str, Any] | None = None
        self._generation = 0
        self._originals_cache: tuple[int, Any] | None = None

    # -- pseudonyms ----------------------------------------------------------------------------
    def pseudonym(self, cls: str, original: str, canonical: str | None = None) -> str:
        """The pseudonym of `original` (identified by `canonical`, default itself) in `cls`."""
        p = self._register(cls, original, canonical)
        self._emit(cls, p)
        return p

    def _register(self, cls: str, original: str, canonical: str | None = None) -> str:
        """The pseudonym of `original`, with `original` among the forms it stands for (so the
        final check looks for it), without counting a replacement."""
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
        return p

    def is_pseudonym(self, text: str) -> bool:
        """`text` is a pseudonym this sanitizer gave (copied back from its own output)."""
        return text in self._entries

    def kept(self, w: Work, cls: str, original: str, canonical: str | None = None) -> str:
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

    # -- identifiers in their forms ------------------------------------------------------------
    def user(self, name: str | None) -> str | None:
        """A user column's value: any account but the system's becomes its pseudonym (a name
        that is also a word, `nvidia`, too: here it stands as a user's)."""
        if not name or name in R.SYSTEM_USERS:
            return name
        self.seed_user(name)
        return self.pseudonym("user", name, name.lower())

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

    def container(self, text: str) -> str:
        """The pseudonym of a container id: whole (64 hex digits), or any prefix of 8 or more
        digits `docker`, `crictl` and `podman` accept (one container, one pseudonym; a prefix
        of no known container by its first 12 digits, as `docker ps` shows an id)."""
        low = text.lower()
        known = self._known_id(low)
        if known is not None and known[0] == "container":
            return self.pseudonym("container", text, known[1])
        return self.pseudonym("container", text, low[:12])

    def known_id(self, text: str) -> str | None:
        """The pseudonym of a known container id or pod uid that `text` (8 hex digits or more,
        no dashes) begins, or None: `ctr 8e1f0d2c`, `pod 5f0c9a1e` in a process table."""
        known = self._known_id(text.lower())
        return None if known is None else self.pseudonym(known[0], text, known[1])

    def _known_id(self, low: str) -> tuple[str, str] | None:
        if len(low) < ID_PREFIX:
            return None
        hit = self._ids.get(low)
        if hit is not None:
            return hit
        found = {v for k, v in self._ids.items() if k.startswith(low)}
        return found.pop() if len(found) == 1 else None

    def user_of_uid(self, uid: int) -> str | None:
        """The name of the user a GPU process with this uid runs as, where one was seen."""
        return self._uid_users.get(uid)

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

    # -- what is allowed through ---------------------------------------------------------------
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

    @property
    def allowed(self) -> AbstractSet[str]:
        """What is let through verbatim (read only)."""
        return self._allowed

    # -- seeds ---------------------------------------------------------------------------------
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
            if R.SAFE_VALUE.match(word) or R.safe_program(word):
                return
        if cls == "secret" and (len(word) < 8 or R.SAFE_VALUE.match(word)):
            return
        self._words[cls].add(word)
        self._changed()

    def seed_container(self, container_id: str | None) -> None:
        """A container's full id: its prefixes (`ctr 8e1f0d2c`) get its pseudonym too, and
        the final check looks for its 8-digit prefix wherever it has a letter in it (a prefix
        of digits alone is also a figure)."""
        cid = (container_id or "").lower()
        if not re.fullmatch(r"[0-9a-f]{64}", cid) or cid in self._ids:
            return
        self._ids[cid] = ("container", cid[:12])
        for form in (cid, cid[:12], cid[:ID_PREFIX]):
            if form == cid or re.search("[a-f]", form):
                self._register("container", form, cid[:12])
        self._changed()

    def seed_pod_uid(self, uid: str | None) -> None:
        """A pod's uid (`kubectl get pod -o yaml`'s, with dashes): the same pseudonym in the
        kubelet's cgroup names (dashes as underscores) and for its prefix (`pod 5f0c9a1e`)."""
        low = (uid or "").lower().replace("_", "-")
        if not re.fullmatch(R.UUID, low) or low.replace("-", "") in self._ids:
            return
        self._ids[low.replace("-", "")] = ("uuid", low)
        for form in (low, low.replace("-", "_"), low[:ID_PREFIX]):
            if form != low[:ID_PREFIX] or re.search("[a-f]", form):
                self._register("uuid", form, low)
        self._changed()

    def seed_pod_name(self, name: str | None) -> None:
        """A pod's name: the pod's host name (Kubernetes sets a pod's host name to its name:
        kubernetes.io/docs/concepts/services-networking/dns-pod-service/), replaced as host
        names are, and also where the kubelet joins it to its namespace and uid with `_`."""
        if not name:
            return
        self.seed_hostname(name)
        new = False
        if name.lower() in self.hosts and name.lower() not in self._pods:
            self._pods.add(name.lower())
            new = True
        for base in pod_bases(name):
            low = base.lower()
            if low in self._pods or low in R.ALLOWED_WORDS or low in R.COMMON_WORDS:
                continue
            if low in VOCABULARY or R.SAFE_VALUE.match(base) or R.safe_program(base):
                continue
            self._pods.add(low)
            new = True
        if new:
            self._changed()

    def seed_uid(self, uid: int | None, user: str | None) -> None:
        """A process's uid and its user's name: a user's session (`user-1001.slice`) then
        shows the user's pseudonym."""
        if isinstance(uid, int) and user and uid not in self._uid_users:
            self._uid_users[uid] = user
            self.seed_user(user)

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

    def compiled(self) -> dict[str, Any]:
        """The seeded words as patterns (rebuilt after a seed changes)."""
        if self._compiled is None:
            self._compiled = compile_seeds(
                allowed=self._allowed,
                hosts=self.hosts,
                stems=self._host_stems,
                domains=self._domains,
                users=self._users,
                pods=self._pods,
                jobs=self._jobs,
                words=self._words,
            )
        return self._compiled

    # -- what free text became -----------------------------------------------------------------
    def memoized(self, text: str, scrub: Callable[[str], str]) -> str:
        """`scrub(text)` (the free-text rules, `text.py`), remembered while no seed changes: a
        text seen again reads the same and counts its replacements again."""
        hit = self._cache.get(text)
        if hit is not None:
            for cls, p, n in hit[1]:
                self._emit(cls, p, n)
            return hit[0]
        generation = self._generation
        outer, self._trace = self._trace, []
        try:
            out = scrub(text)
            trace = self._trace
        finally:
            inner, self._trace = self._trace, outer
            if outer is not None:
                outer.extend(inner)
        if generation == self._generation and len(self._cache) < 100_000:
            self._cache[text] = (out, trace)
        return out

    @contextmanager
    def uncounted(self) -> Iterator[None]:
        """Replacements made inside count nothing (learning the seeds a text reveals)."""
        counting, self._counting = self._counting, False
        try:
            yield
        finally:
            self._counting = counting

    # -- what the final check looks for --------------------------------------------------------
    def originals(self) -> tuple[Any, Any, dict[tuple[str, bool], str], Any]:
        """Every original this table replaced, as two patterns (case matters for paths,
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
        exact = boundary_re([f for f, fold in cls_of if not fold], left=WORD_L, right=WORD_R)
        folded = boundary_re(
            [f for f, fold in cls_of if fold], left=WORD_L, right=WORD_R, flags=re.I
        )
        ours = boundary_re(self._entries, left=r"(?<![\w-])", right=r"(?![\w-])")
        self._originals_cache = (n, (exact, folded, cls_of, ours))
        return exact, folded, cls_of, ours


# What a controller appends to the name it gives a pod (Kubernetes' `rand.String` and
# `SafeEncodeString` draw from these characters, no vowels): a StatefulSet's ordinal
# (`NAME-0`), a Job's or a DaemonSet's 5 characters (`NAME-x7k2p`), a Deployment's pod template
# hash before them (`NAME-5d4f8b9c7-x7k2p`), an indexed Job's index (`NAME-3-x7k2p`).
_POD_SUFFIX = re.compile(r"-(?:\d+|[bcdfghjklmnpqrstvwxz2456789]{5,10})$")


def pod_bases(name: str) -> list[str]:
    """The names a pod's name is built from (`llama-ddp` for `llama-ddp-0`), longest first;
    only those of 3 characters or more with a letter in them."""
    out = []
    base = name
    for _ in range(3):
        m = _POD_SUFFIX.search(base)
        if m is None or m.start() == 0:
            break
        base = base[: m.start()]
        if len(base) < 3 or not re.search("[A-Za-z]", base) or base.endswith("-"):
            break
        out.append(base)
    return out


def _leak_checked(cls: str, form: str) -> bool:
    """Whether an original of `cls` is looked for anywhere in finished text."""
    if cls in ("hostname", "user", "job"):
        return len(form) >= 2 and not needs_context(cls, form)
    if cls == "serial":
        return len(form) >= 4
    if cls in ("job_name", "account", "partition", "project", "namespace", "container_name"):
        low = form.lower()
        return len(form) >= 3 and low not in R.COMMON_WORDS and low not in VOCABULARY
    return len(form) >= 3
