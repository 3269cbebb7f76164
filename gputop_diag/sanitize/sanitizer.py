"""The one sanitizer: everything gputop-diag lets leave the machine in public goes through it
(the report, `--sanitize` on every command, sanitized recordings, the live view's display mode).

It replaces identifiers with pseudonyms that stay the same within one report (`host-k3qz`,
`user-b7xa`, `GPU-m2dq`, `pci-9tfe`) and differ in every other: a pseudonym is its class's
prefix and a keyed hash (HMAC-SHA256) of the identifier under a random key made for each
`Sanitizer` (one per report, per recording, per live `--sanitize` session). The key is never
written, so nothing in a report reverses a pseudonym; `private_map()` is the reverse map for
the person who made the report (`report/private_map.py` writes it mode 0600).

Identifiers are found three ways (`sanitize/rules.py` holds the shapes and allow-lists as data,
`sanitize/text.py` the free-text rules):
- by field, in documents of the model's JSON shape (`document`): `hostname`, `uuid`, `serial`,
  `pci_bus_id`, `user`, `cmdline`, `cuda_visible_devices`, `job_id`; minor numbers and device
  nodes are removed, raw kernel-log text is dropped;
- by shape, in free text (`text`): GPU and MIG UUIDs (both MIG forms, and the UUID prefixes
  CUDA_VISIBLE_DEVICES allows), PCI bus ids in every written form, MACs and InfiniBand GUIDs,
  IPv4/IPv6, e-mail addresses, URLs, container ids, tokens, Slurm job ids and node lists in
  their contexts, environment assignments, paths outside the system's directories;
- by seed (`seed_*`, `learn`): the machine's host names, Slurm node names, user names (process
  owners, `pwd`, home directories), job ids and names, accounts and partitions, serials,
  project directories: replaced wherever they stand as words.

Allowed through: GPU model names, driver/NVML/CUDA versions, `localhost`, public documentation
hosts. Fail closed: `leaks(text)` checks finished output for any original the sanitizer has
replaced and any identifier shape left; callers leave out what does not pass.
"""

from __future__ import annotations

import base64
import hmac
import re
import secrets
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import rules as R
from . import text as T
from .rules import CLASSES, UUID, H

PRIVATE_MAP_SCHEMA = "gputop-diag.private-map/1"
_WORD_CLASSES = ("job_name", "account", "partition", "serial", "project")
_CASE_SENSITIVE = frozenset({"user", "arg", "env", "path", "url", "secret", *_WORD_CLASSES})
_KERNEL_TEXT = ("message", "raw", "detail")  # raw kernel-log text: dropped, never shared
_PCI_FIELD = re.compile(rf"(?:{H}+:)?{H}{{2}}:{H}{{2}}(?:\.[0-7])?")
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
        self._users: set[str] = set()
        self._jobs: set[str] = set()
        self._words: dict[str, set[str]] = {c: set() for c in _WORD_CLASSES}
        self._gpu_uuids: set[str] = set()  # lower-case hex of every GPU UUID seen
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
        for n in {name, name.split(".", 1)[0]}:
            if n.lower() not in self.hosts:
                self.hosts[n.lower()] = n
                new = True
        # gpu-node-07 and its neighbours gpu-node-NN; dgx01 and dgxNN (not gpu1 and gpuN)
        m = re.fullmatch(r"([A-Za-z][A-Za-z-]*)(\d+)", name.split(".", 1)[0])
        if m and sum(c.isalpha() for c in m.group(1)) >= 3:
            stem = m.group(1) + (r"\d+" if "-" in m.group(1) or len(m.group(2)) > 1 else "")
            if stem.endswith(r"\d+") and stem not in self._host_stems:
                self._host_stems.add(stem)
                new = True
        if new:
            self._changed()

    def seed_user(self, name: str | None) -> None:
        if not name or name in R.SYSTEM_USERS or len(name) < 2 or name in self._users:
            return
        if name.isdigit() or not re.fullmatch(r"[A-Za-z_][\w.-]*\$?", name):
            return
        self._users.add(name)
        self._changed()

    def seed_job(self, job_id: str | None) -> None:
        """The job's own number only: in `48213_12` (an array task) or `48213.batch` the part
        after it is a task or step, a small number that must not be replaced in other text."""
        m = re.match(r"\s*(\d{2,})", str(job_id or ""))
        if m and m.group(1) not in self._jobs:
            self._jobs.add(m.group(1))
            self._changed()

    def seed_word(self, cls: str, word: str | None) -> None:
        """A job name, account, partition, serial or project directory: replaced wherever it
        stands as a word (common words only where their context names them)."""
        if not word or len(word) < 3 or word in self._words[cls]:
            return
        if cls != "serial" and (word.lower() in R.COMMON_WORDS or word.isdigit()):
            return
        self._words[cls].add(word)
        self._changed()

    def seed_gpu_uuid(self, uuid: str | None) -> None:
        if uuid and uuid[:4].upper() == "GPU-":
            hexpart = uuid[4:].lower()
            if hexpart not in self._gpu_uuids:
                self._gpu_uuids.add(hexpart)
                self._changed()

    def seed_machine(self, names: Any) -> None:
        """Seed what the machine knows (`collect.identity.read_machine_names`): its host names,
        this shell's environment, the job's working directories, the accounts of people."""
        for h in names.hostnames:
            self.seed_hostname(h)
        self.seed_environ(names.environ)
        for cwd in names.cwds:
            self.seed_cwd(cwd)
        for u in names.users:
            self.seed_user(u)

    def seed_environ(self, environ: dict[str, str]) -> None:
        """A process environment: the user, home, Slurm's job, nodes, account and partition."""
        for k in ("USER", "LOGNAME", "SUDO_USER", "SLURM_JOB_USER"):
            self.seed_user(environ.get(k))
        for k in ("HOSTNAME", "SLURMD_NODENAME", "SLURM_SUBMIT_HOST", "SLURM_TOPOLOGY_ADDR"):
            self.seed_hostname(environ.get(k))
        for k in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST"):
            for part in re.findall(r"[A-Za-z][\w.-]*(?:\[[\d,\-]+\][\w.-]*)?", environ.get(k, "")):
                for name in R.expand_nodelist(part):
                    self.seed_hostname(name)
        for k in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID"):
            self.seed_job(environ.get(k))
        self.seed_word("job_name", environ.get("SLURM_JOB_NAME"))
        self.seed_word("account", environ.get("SLURM_JOB_ACCOUNT"))
        self.seed_word("account", environ.get("SLURM_CLUSTER_NAME"))
        self.seed_word("partition", environ.get("SLURM_JOB_PARTITION"))
        m = re.fullmatch(r"/(?:home|Users)/([^/]+)/?", environ.get("HOME", ""))
        if m:
            self.seed_user(m.group(1))

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
            stems = "|".join(sorted(self._host_stems, key=len, reverse=True))
            self._compiled = {
                "allowed": T.boundary_re(self._allowed, left=T.ALLOWED_L, right=T.ALLOWED_R),
                "hosts": T.boundary_re(self.hosts, left=T.HOST_L, right=T.HOST_R, flags=re.I),
                "stems": re.compile(f"(?<![A-Za-z0-9-])(?:{stems})(?![A-Za-z0-9-])", re.I)
                if stems
                else None,
                "users": T.boundary_re(self._users, left=T.WORD_L, right=T.WORD_R),
                "jobs": T.boundary_re(self._jobs, left=T.DIGIT_L, right=T.DIGIT_R),
                **{
                    c: T.boundary_re(self._words[c], left=T.WORD_L, right=T.WORD_R)
                    for c in _WORD_CLASSES
                },
            }
        return self._compiled

    # -- free text -----------------------------------------------------------------------------
    def text(self, s: str | None) -> str | None:
        """`s` with every identifier in it replaced."""
        if not s:
            return s
        return self._text(s)

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
        if not name or name in R.SYSTEM_USERS:
            return name
        self.seed_user(name)
        return self.pseudonym("user", name)

    def job(self, job_id: str | None) -> str | None:
        """A Slurm job id (`48213`, `48213_7`, `48213.batch`): its number replaced."""
        if not job_id:
            return job_id
        self.seed_job(job_id)
        return self.text(job_id)

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
            canon = f"{domain:04x}:{bus:02x}:{dev:02x}"
        except ValueError:
            canon = text.lower()
        return self.pseudonym("pci", text, canon)

    def cuda_visible_devices(self, value: str | None) -> str | None:
        """CUDA_VISIBLE_DEVICES with its shape kept: indices stay, UUIDs (and prefixes of them)
        become their GPU's pseudonym, anything else a pseudonym of its own."""
        if value is None:
            return None
        out = []
        for entry in value.split(","):
            s = entry.strip()
            if not s or s.isdigit() or s.lower() in ("all", "none", "void", "nodevfiles"):
                out.append(entry)
            elif _CVD_UUID.fullmatch(s):
                out.append(self.uuid(s))
            else:
                out.append(self.pseudonym("env", s))
        return ",".join(out)

    def argv(self, args: Sequence[str] | None) -> list[str] | None:
        """A command line: the program's name kept, options in `SAFE_FLAGS` kept with values
        that are numbers or switches, every other argument replaced (paths, names, tokens)."""
        if args is None:
            return None
        if not args:
            return []
        self.learn(args)
        prog = args[0].rstrip("/").rsplit("/", 1)[-1] or args[0]
        out = [prog if prog in R.INTERPRETERS else (self.text(prog) or prog)]
        module_next = False
        for a in args[1:]:
            if module_next:
                module_next = False
                out.append(a if R.SAFE_MODULES.match(a) else self.pseudonym("arg", a))
            elif a.startswith("-") and len(a) > 1 and not R.SAFE_VALUE.match(a):
                name, eq, value = a.partition("=")
                if name not in R.SAFE_FLAGS:
                    out.append(self.pseudonym("arg", a))
                elif eq:
                    out.append(f"{name}={self._arg_value(value)}")
                else:
                    out.append(name)
                    module_next = name == "-m"
            else:
                out.append(self._arg_value(a))
        return out

    def _arg_value(self, v: str) -> str:
        if R.SAFE_VALUE.match(v):
            return self.text(v) or v
        return self.pseudonym("arg", v)

    def path_pseudonym(self, path: str) -> str | None:
        """A path with what names a person or a project replaced (`~user-x/path-y`,
        `/scratch/path-z`); None for the system's own paths, kept as they are."""
        if path.startswith("~"):
            head, _, rest = path[1:].partition("/")
            user = ""
            if head:
                self.seed_user(head)
                user = head if head in R.SYSTEM_USERS else self.pseudonym("user", head)
            return f"~{user}" + (f"/{self._tail(path, rest)}" if rest else "")
        parts = path.split("/")
        root = parts[1] if len(parts) > 1 else ""
        if path.startswith(R.SYSTEM_PREFIXES):
            return None
        if root == "dev" and re.fullmatch(r"/dev/nvidia\d+", path):
            self.dropped("minor")
            return "/dev/nvidiaN"
        if root in R.SYSTEM_ROOTS:
            return None
        if root in R.HOME_ROOTS and len(parts) > 2 and parts[2]:
            self.seed_user(parts[2])
            shown = parts[2] if parts[2] in R.SYSTEM_USERS else self.pseudonym("user", parts[2])
            rest = "/".join(parts[3:])
            return f"~{shown}" + (f"/{self._tail(path, rest)}" if rest else "")
        if root == "root":
            rest = "/".join(parts[2:])
            return "~root" + (f"/{self._tail(path, rest)}" if rest else "")
        if root not in R.KNOWN_ROOTS:
            return "/" + self._tail(path, "/".join(parts[1:]))
        rest = "/".join(parts[2:])
        return f"/{root}" + (f"/{self._tail(path, rest)}" if rest.strip("/") else "")

    def _tail(self, full: str, rest: str) -> str:
        """The pseudonym of what follows a path's root; a library's or Python's name kept."""
        rest = rest.rstrip("/")
        if not rest:
            return ""
        head, _, base = rest.rpartition("/")
        if R.KEEP_BASENAME.match(base):
            return f"{self.pseudonym('path', full.rsplit('/', 1)[0])}/{base}" if head else base
        return self.pseudonym("path", full.rstrip("/"))

    def path(self, path: str) -> str:
        shown = self.path_pseudonym(path)
        return self.text(path) or path if shown is None else shown

    # -- documents -----------------------------------------------------------------------------
    def learn_document(self, doc: Any) -> None:
        """Seed from a document of the model's JSON shape (a snapshot, a recording line, a
        diagnosis): its names by field, the GPU models and versions as allowed, then whatever
        its free text reveals."""
        self.allow_document(doc)
        texts: list[str] = []
        self._seed_walk(doc, None, None, texts)
        self.learn(texts)

    def _seed_walk(self, v: Any, key: str | None, parent: str | None, texts: list[str]) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                self._seed_walk(x, k, key or parent, texts)
        elif isinstance(v, list):
            for x in v:
                self._seed_walk(x, key, parent, texts)
        elif isinstance(v, str) and v:
            if key == "hostname":
                self.seed_hostname(v)
            elif key == "user":
                self.seed_user(v)
            elif key in ("job_id", "scope_job") and v.isdigit():
                self.seed_job(v)
            elif key in ("uuid", "gpu_uuid"):
                self.seed_gpu_uuid(v)
            elif key == "serial":
                self.seed_word("serial", v)
            elif key == "name" and parent == "scheduler_jobs":
                self.seed_word("job_name", v)
            elif not (key in _KERNEL_TEXT and parent in ("xid_events", "kernel_events")):
                texts.append(v)

    def document(self, doc: Any) -> Any:
        """A sanitized copy of `doc` (JSON values of the model's shape). `learn_document` first,
        so that every seed is known before the first field is written."""
        return self._walk(doc, None, None)

    def _walk(self, v: Any, key: str | None, parent: str | None) -> Any:
        if isinstance(v, dict):
            out = {k: self._walk(x, k, key or parent) for k, x in v.items()}
            if key == "job" and v.get("target") == "command" and isinstance(v.get("label"), str):
                out["label"] = self._command_label(v["label"])  # a command line, as cmdlines are
            return out
        if isinstance(v, list):
            if key == "cmdline" and all(isinstance(x, str) for x in v):
                return self.argv(v)
            return [self._walk(x, key, parent) for x in v]
        if key in ("minor_number", "minor", "device_node") and v is not None:
            self.dropped("minor")
            return None
        if not isinstance(v, str) or not v:
            return v
        if key in _KERNEL_TEXT and parent in ("xid_events", "kernel_events"):
            self.dropped("kernel_log")
            return ""
        if key == "hostname":
            return self.hostname(v)
        if key in ("uuid", "gpu_uuid") and re.match(r"(?i)(?:GPU|MIG)-", v):
            return self.uuid(v)
        if key == "serial":
            return self.pseudonym("serial", v)
        if key in ("pci_bus_id", "pci") and _PCI_FIELD.fullmatch(v):
            return self.pci(v)
        if key == "user":
            return self.user(v)
        if key == "cuda_visible_devices":
            return self.cuda_visible_devices(v)
        if key == "name" and parent == "scheduler_jobs":
            return self.pseudonym("job_name", v)
        return self.text(v)

    def _command_label(self, label: str) -> str:
        """A watched command's label (its command line, shell-quoted) sanitized as a command
        line: the program's name kept, its arguments replaced."""
        try:
            args = shlex.split(label)
        except ValueError:  # unbalanced quotes: every word an argument all the same
            args = label.split()
        return shlex.join(self.argv(args) or [])

    def model(self, obj: Any) -> Any:
        """A sanitized copy of a model object (a Snapshot, a Diagnosis): the same type, every
        field through `document`."""
        from ..model.codec import from_jsonable, jsonable

        doc = jsonable(obj)
        self.learn_document(doc)
        return from_jsonable(type(obj), self.document(doc))

    def xid_events(self, events: Sequence[Any]) -> tuple[Any, ...]:
        """Xid events (the live view's list) with their bus ids replaced and their raw
        kernel-log text dropped."""
        from ..model import XidEvent
        from ..model.codec import from_jsonable, jsonable

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
                if R.shape_ok(cls, m.group(0)):
                    found[cls] += 1
        exact, folded, cls_of = self._originals()
        for rx, hay, fold in ((exact, t, False), (folded, t, True)):
            if rx is not None:
                for m in rx.finditer(hay):
                    found[cls_of[(m.group(0).lower() if fold else m.group(0), fold)]] += 1
        return found

    def _originals(self) -> tuple[Any, Any, dict[tuple[str, bool], str]]:
        """Every original this sanitizer replaced, as two patterns (case matters for names of
        people and free words; not for host names and hex identifiers)."""
        n = sum(len(e.forms) for e in self._entries.values())
        if self._originals_cache is not None and self._originals_cache[0] == n:
            return self._originals_cache[1]
        cls_of: dict[tuple[str, bool], str] = {}
        for e in self._entries.values():
            if not CLASSES[e.cls].leak_checked:
                continue
            for form in e.forms:
                short = 2 if e.cls in ("hostname", "user") else 3  # a host may be `vm`
                if len(form) < short or (e.cls in ("job", "serial") and len(form) < 4):
                    continue
                fold = e.cls not in _CASE_SENSITIVE
                cls_of.setdefault((form.lower() if fold else form, fold), e.cls)
        exact = T.boundary_re([f for f, fold in cls_of if not fold], left=T.WORD_L, right=T.WORD_R)
        folded = T.boundary_re(
            [f for f, fold in cls_of if fold], left=T.WORD_L, right=T.WORD_R, flags=re.I
        )
        self._originals_cache = (n, (exact, folded, cls_of))
        return exact, folded, cls_of


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
