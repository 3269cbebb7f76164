"""Identifiers in free text: the shape rules of the sanitizer (`sanitize/sanitizer.py`), in order.

`sanitize(table, text)` is the sanitizer's `text`: every rule run over `text` (`scrub`), each
text remembered by the table while its seeds stay the same; `learn(table, texts)` takes the
seeds texts reveal without counting. A rule's replacement is parked behind a placeholder
(`Work.keep`) so that no later rule sees a pseudonym, or re-replaces part of one;
`Work.restore` fills the placeholders in at the end. Longer and compound identifiers come
first (a MIG UUID before the GPU UUID in it, an FQDN before its short host name, a home path
before the user name in it), then the seeded words (`PseudonymTable.seed_*`). The written
forms real tools print (NCCL's bus ids, cloud host names, tokens by shape, peers) are in
`forms.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from . import forms as F
from . import rules as R
from .compiled import CASELESS_CLASSES
from .forms import host
from .netdev import NETDEV_RULES
from .paths import path_pseudonym
from .rules import UUID, H
from .run_names import NAME_OPTION_IN_TEXT, learn_names
from .table import PseudonymTable
from .vocabulary import FILE_EXTENSIONS, PUBLIC_PACKAGES, PUBLIC_SOURCE_DIRS, SOURCE_EXTENSIONS
from .work import PRIVATE_USE, Work, has_placeholder, only_placeholders

_public = F.public


def sanitize(s: PseudonymTable, text: str | None, limit: int | None = None) -> str | None:
    """`text` with every identifier in it replaced; with `limit`, then cut to that many
    characters (`…` at the end). Always sanitize, then cut: an identifier cut in half
    first would match no rule."""
    if not text:
        return text
    out = _whole(s, text)
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 1)].rstrip() + "…"
    return out


def learn(s: PseudonymTable, texts: Iterable[str]) -> None:
    """Take the seeds these texts reveal (home directories, `UserId=`, `JobId=`, node
    lists, `user@host`) without counting: run over a whole document before sanitizing it,
    so that a name is replaced even where it shows before its context."""
    with s.uncounted():
        for t in texts:
            if t and isinstance(t, str):
                _whole(s, t)


def _whole(s: PseudonymTable, text: str) -> str:
    return s.memoized(text, lambda t: _restored(s, t))


def _restored(s: PseudonymTable, t: str) -> str:
    w = Work()
    return w.restore(scrub(s, PRIVATE_USE.sub("?", t), w))


def scrub(s: PseudonymTable, t: str, w: Work) -> str:
    """`t` with every identifier behind a placeholder."""
    rules = s.compiled()
    if rules["allowed"] is not None:
        t = rules["allowed"].sub(lambda m: w.keep(m.group(0)), t)
    for rx, handler in SHAPE_RULES:
        t = rx.sub(lambda m, h=handler: h(s, m, w), t)
    t = _FQDN.sub(lambda m: _fqdn(s, m, w), t)
    rules = s.compiled()  # the shapes above may have seeded names
    for key in ("pods", "hosts", "stems", "domains"):
        if rules[key] is not None:
            t = rules[key].sub(lambda m: host(s, m.group(0), w), t)
    if rules["hosts_ctx"] is not None:
        t = rules["hosts_ctx"].sub(lambda m: _named(s, m, w, "hostname"), t)
    if rules["users"] is not None:
        t = rules["users"].sub(lambda m: s.kept(w, "user", m.group(0), m.group(0).lower()), t)
    if rules["users_ctx"] is not None:
        t = rules["users_ctx"].sub(lambda m: _named(s, m, w, "user"), t)
    if rules["jobs"] is not None:
        t = rules["jobs"].sub(lambda m: s.kept(w, "job", m.group(0)), t)
    if rules["jobs_ctx"] is not None:
        t = rules["jobs_ctx"].sub(lambda m: _named(s, m, w, "job"), t)
    for cls in CASELESS_CLASSES:
        if rules[cls] is not None:
            t = rules[cls].sub(lambda m, c=cls: s.kept(w, c, m.group(0), m.group(0).lower()), t)
    if rules["secret"] is not None:
        t = rules["secret"].sub(lambda m: s.kept(w, "secret", m.group(0)), t)
    return _TOKEN.sub(lambda m: s.kept(w, "secret", m.group(0)), t)


def _named(s: PseudonymTable, m: re.Match, w: Work, cls: str) -> str:
    """A seeded name that is also a word (or a short number), in the context that names it:
    the group `n` is the name."""
    value = m.group("n")
    a, b = m.start("n") - m.start(0), m.end("n") - m.start(0)
    canon = value.lower() if cls in ("user", "hostname") else value
    return m.group(0)[:a] + s.kept(w, cls, value, canon) + m.group(0)[b:]


# -- handlers -----------------------------------------------------------------------------------


def _fqdn(s: PseudonymTable, m: re.Match, w: Work) -> str:
    full = m.group(0)
    low = full.lower()
    if s.known_domain(low):  # this machine's domain on its own (`hpc.acme.zone`): the site's
        return s.kept(w, "domain", full, low)  # name, with the pseudonym its FQDNs show
    if low.rsplit(".", 1)[-1] not in R.TLDS and low not in s.hosts:
        if _unknown_tld_host(s, low):
            return host(s, full, w)
        return full
    if _public(low):
        return w.keep(full)
    if low.count(".") == 1 and low.split(".")[0] not in s.hosts:
        return s.kept(w, "domain", full, low)  # a bare domain: the site's name
    return host(s, full, w)


def _unknown_tld_host(s: PseudonymTable, low: str) -> bool:
    """A dotted name under a top-level domain we do not list (`node17.acme.zone`): a host when
    its first label reads as a host's (digits or a hyphen in it) or its domain is one this
    machine's names are under, and its last part is no file extension (`shard-01.json`)."""
    first, _, domain = low.partition(".")
    if s.known_domain(domain):
        return True
    tld = low.rsplit(".", 1)[-1]
    if not tld.isalpha() or len(tld) > 12 or tld in FILE_EXTENSIONS or first in PUBLIC_PACKAGES:
        return False
    # `gpu17.zone`, `node-a.acme.zone`; not `gputop-diag.diagnosis` nor `flash-attn.readthedocs`
    return F.host_like(first) and (any(c.isdigit() for c in first) or low.count(".") >= 2)


def _url(s: PseudonymTable, m: re.Match, w: Work) -> str:
    raw = w.restore(m.group(0), original=True)
    url = raw.rstrip(".,;:")
    tail = raw[len(url) :]
    try:
        parts = urlsplit(url)
        hostname = parts.hostname or ""
    except ValueError:
        return s.kept(w, "url", url) + tail
    if any(hostname == d or hostname.endswith("." + d) for d in R.DOC_DOMAINS):
        return w.keep(url) + tail
    netloc = parts.netloc
    shown = ""
    if "@" in netloc:
        cred, netloc = netloc.rsplit("@", 1)
        shown = s.kept(w, "secret", cred) + "@"
    shown = f"{parts.scheme}://{shown}{scrub(s, netloc, w)}"
    rest = url[len(f"{parts.scheme}://{parts.netloc}") :]
    if rest and rest != "/":
        shown += "/" + s.kept(w, "url", rest)
    return shown + tail


def _name_option(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """`--run-name X`, `--project=Y` in free text: X and Y are seeded as a command line's are
    (`run_names.learn_names`), and the seeded words' rule below replaces them, here and
    wherever else they stand."""
    if not has_placeholder(m.group(0)):
        learn_names(s, m.group(0).split(None, 1))
    return m.group(0)


def _email(s: PseudonymTable, m: re.Match, w: Work) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_.-]{1,31}", m.group(1)):
        s.seed_user(m.group(1))
    return s.kept(w, "email", m.group(0), m.group(0).lower())


def _user_at_host(s: PseudonymTable, m: re.Match, w: Work) -> str:
    user, at_host = m.group(1), m.group(2)
    if user in R.SYSTEM_USERS:
        shown = w.keep(user)
    else:
        s.seed_user(user)
        shown = s.kept(w, "user", user, user.lower())
    return f"{shown}@{host(s, at_host, w)}"


def _secret_value(s: PseudonymTable, m: re.Match, w: Work) -> str:
    if only_placeholders(m.group(2)) or R.SAFE_VALUE.match(m.group(2)):
        return m.group(0)  # `max_tokens=4096` names no one
    return m.group(1) + s.kept(w, "secret", w.restore(m.group(2), original=True))


def _container(s: PseudonymTable, m: re.Match, w: Work) -> str:
    cid = m.group("cid")
    start = m.start("cid") - m.start(0)
    return m.group(0)[:start] + s.kept(w, "container", cid, cid.lower()[:12])


def _uuid(s: PseudonymTable, m: re.Match, w: Work) -> str:
    return w.keep(s.uuid(m.group(0)), m.group(0))


def _pod_uid(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """A pod's uid in the kubelet's cgroup names: `pod<uid>`, or with `_` for `-`."""
    raw = m.group("id") or m.group("id2")
    a, b = m.span("id") if m.group("id") else m.span("id2")
    shown = s.pseudonym("uuid", raw, raw.lower().replace("_", "-"))
    return m.group(0)[: a - m.start(0)] + w.keep(shown, raw) + m.group(0)[b - m.start(0) :]


_ID_CONTEXT = re.compile(r"(?i)(?:ctr|pod|container|docker|crictl|podman|nerdctl)[\s:=/#-]*$")


def _known_id(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """A prefix of a known container id or pod uid (`ctr 8e1f0d2c`, `docker logs 8e1f0d2c94a1`):
    its id's pseudonym. One of digits alone only after a word that names a container or a pod
    (it is also a figure)."""
    raw = m.group(0)
    before = max(0, m.start() - 24)
    if not re.search("[a-fA-F]", raw) and not _ID_CONTEXT.search(m.string, before, m.start()):
        return raw
    shown = s.known_id(raw)
    return raw if shown is None else w.keep(shown, raw)


def _namespace(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """A Kubernetes namespace named as one (`--namespace ml-research`, `kubectl -n NAME`,
    `in the namespace "NAME"`); Kubernetes' own namespaces kept."""
    name = m.group("ns")
    if name.lower() in R.K8S_NAMESPACES or not re.search("[A-Za-z]", name):
        return m.group(0)
    s.seed_word("namespace", name)
    return _replace_group(s, m, w, "ns", "namespace", name.lower())


def _mac(s: PseudonymTable, m: re.Match, w: Work) -> str:
    raw = m.group(0)
    canon = re.sub(r"[^0-9a-f]", "", raw.lower())
    if re.fullmatch(rf"{H}{{4}}(?::{H}{{4}}){{3}}|0[xX]{H}{{16}}", raw):
        return s.kept(w, "ib_guid", raw, canon.removeprefix("0x")[-16:])
    return s.kept(w, "mac", raw, canon)


def _ip(s: PseudonymTable, m: re.Match, w: Work) -> str:
    addr = m.group("addr")
    suffix = m.group(0)[len(addr) :]
    if ":" in addr:
        if not R.valid_ipv6(addr):
            return m.group(0)
        p = s.pseudonym("ipv6", addr, addr.split("%", 1)[0].lower())
    elif not R.valid_ipv4(addr) or R.VERSION_BEFORE.search(
        m.string, max(0, m.start() - 40), m.start()
    ):
        return m.group(0)
    else:  # leading zeros (`010.020.030.041`) are the same address
        p = s.pseudonym("ipv4", addr, ".".join(str(int(x)) for x in addr.split(".")))
    return w.keep(p + suffix, m.group(0))  # the prefix length stays: it names no one


def _pci(s: PseudonymTable, m: re.Match, w: Work) -> str:
    return w.keep(s.pci(m.group("bus")), m.group("bus"))


def _serial(s: PseudonymTable, m: re.Match, w: Work) -> str:
    value = m.group(2)
    if has_placeholder(value) or not re.search(r"\d", value):
        return m.group(0)
    s.seed_word("serial", value)
    return m.group(1) + s.kept(w, "serial", value, value.lower())


def _nodelist(s: PseudonymTable, m: re.Match, w: Work) -> str:
    for name in R.expand_nodelist(m.group(0)):
        s.seed_hostname(name)
    return s.kept(w, "nodelist", m.group(0))


def _replace_group(
    s: PseudonymTable, m: re.Match, w: Work, group: str, cls: str, canonical: str | None = None
) -> str:
    value = m.group(group)
    a, b = m.start(group) - m.start(0), m.end(group) - m.start(0)
    return m.group(0)[:a] + s.kept(w, cls, value, canonical) + m.group(0)[b:]


def _job(s: PseudonymTable, m: re.Match, w: Work) -> str:
    group = "job" if m.group("job") else "job2"
    s.seed_job(m.group(group))
    step = m.groupdict().get("step")
    if not step:
        return _replace_group(s, m, w, group, "job")
    # Slurm's cgroup layout after the job (`job_N/step_0/user/task_0`) names no one: kept
    shown = _replace_group(s, m, w, group, "job")
    return shown[: -len(step)] + w.keep(step)


def _user_ctx(s: PseudonymTable, m: re.Match, w: Work) -> str:
    name = m.group("name")
    if name in R.SYSTEM_USERS or has_placeholder(name):
        return m.group(0)
    s.seed_user(name)
    a, b = m.start("name") - m.start(0), m.end("name") - m.start(0)
    return m.group(0)[:a] + s.kept(w, "user", name, name.lower()) + m.group(0)[b:]


def _host_ctx(s: PseudonymTable, m: re.Match, w: Work) -> str:
    return m.group(1) + host(s, m.group(2), w)


def _slurm_word(s: PseudonymTable, m: re.Match, w: Work) -> str:
    key = m.group(1).lower()
    cls = "partition" if "partition" in key else "job_name" if "name" in key else "account"
    s.seed_word(cls, m.group(3))
    return m.group(1) + m.group(2) + s.kept(w, cls, m.group(3))


def _env(s: PseudonymTable, m: re.Match, w: Work) -> str:
    name, value = m.group(1), m.group(2)
    if not value or only_placeholders(value):
        return m.group(0)
    quote = value[0] if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0] else ""
    inner = value[1:-1] if quote else value
    if name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        parts = [
            p if has_placeholder(p) else w.keep(F.cuda_visible_devices(s, p) or "", p)
            for p in inner.split(",")
        ]
        return f"{name}={quote}{','.join(parts)}{quote}"
    scrubbed = scrub(s, inner, w)  # seeds what the value reveals, even when it is replaced
    if name in R.SAFE_ENV or R.SAFE_VALUE.match(inner):
        return f"{name}={quote}{scrubbed}{quote}"
    return f"{name}={quote}{s.kept(w, 'env', w.restore(inner, original=True))}{quote}"


def _path(s: PseudonymTable, m: re.Match, w: Work) -> str:
    raw = m.group(0)
    kept = raw.rstrip(".,")
    shown = path_pseudonym(s, w.restore(kept, original=True))
    if shown is None:  # the system's: kept, its user and host names replaced later
        return raw
    return w.keep(shown, kept) + raw[len(kept) :]


def _public_source(p: str, after: str) -> bool:
    """`transport/net_ib.cc` before `:1293`: a public project's own source file, named by the
    line it printed (NCCL's WARN lines, PyTorch's C++ messages), not anyone's path."""
    if not re.match(r":\d+\b", after):
        return False
    *dirs, base = p.split("/")
    while dirs and dirs[0] in (".", ".."):  # `../c10/cuda/CUDAException.cpp:44`
        dirs.pop(0)
    stem, dot, ext = base.rpartition(".")
    if not dot or not stem or ext not in SOURCE_EXTENSIONS or not dirs:
        return False
    if dirs[0] in PUBLIC_PACKAGES:  # a public package's module: `torch/nn/parallel/…py:1211`
        return all(_MODULE_DIR.fullmatch(d) for d in dirs[1:])
    return all(d in PUBLIC_SOURCE_DIRS for d in dirs)


_MODULE_DIR = re.compile(r"_?[a-z][a-z0-9_]*")


def _relpath(s: PseudonymTable, m: re.Match, w: Work) -> str:
    raw = m.group(0)
    p = raw.rstrip(".,")
    tail = raw[len(p) :]
    if not tail and _public_source(p, m.string[m.end() :]):
        return raw
    first = p.split("/", 1)[0]
    if "." in first and not first.startswith("."):
        if _public(first):
            return w.keep(p) + tail
        if first.lower().rsplit(".", 1)[-1] in R.TLDS:  # host/path without a scheme
            return host(s, first, w) + "/" + s.kept(w, "url", p[len(first) + 1 :]) + tail
    # A file (with an extension), an explicit relative path, or directories with digits or
    # separators in their names; "input/sync/comm" and "GPC/TPC/SM" are words, kept.
    if not (
        p.startswith(("./", "../"))
        or re.search(r"\.[A-Za-z]\w{0,7}$", p)
        or (p.count("/") >= 2 and re.search(r"[\d_-]", p))
    ):
        return raw
    return s.kept(w, "path", w.restore(p, original=True)) + tail


# -- the rules, in order ------------------------------------------------------------------------

_FQDN = re.compile(
    r"(?<![\w.@/-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z][A-Za-z0-9-]{1,62}"
    r"(?![\w-]|\.[A-Za-z0-9])"
)
# A long run of letters and digits (a token, a key, a hash) with both in it.
_TOKEN = re.compile(
    r"(?<![\w/+=.~-])(?=[A-Za-z0-9_+=-]*\d)(?=[A-Za-z0-9_+=-]*[A-Za-z])"
    r"[A-Za-z0-9_+=-]{32,}(?![\w/+=.-])"
)


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


SHAPE_RULES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (_rx(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>()\[\]{}]+"), _url),
    F.NCCL_PREFIX_RULE,  # before the host and address shapes: its host whatever its shape
    F.NCCL_ADDRESS_RULE,
    *F.SECRET_RULES,
    (NAME_OPTION_IN_TEXT, _name_option),
    (_rx(r"\b([\w.+-]+)@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,63}\b"), _email),
    (
        _rx(
            r"(?i)(\b\w*(?:token|passw(?:or)?d|passphrase|secret|api[_-]?key|apikey|"
            r"access[_-]?key|auth[_-]?key|credentials?|private[_-]?key)\w*[\"']?"
            r"\s*[=:]\s*[\"']?)([^\s'\",;]+)"
        ),
        _secret_value,
    ),
    (_rx(r"(?<![0-9a-fA-F])(?P<cid>[0-9a-f]{64})(?![0-9a-fA-F])"), _container),
    (
        _rx(
            r"(?i)(?:docker|containerd|cri-containerd|crio|libpod|container(?:[ _-]?id)?)"
            r"[-/:= ]+(?P<cid>[0-9a-f]{12,63})\b"
        ),
        _container,
    ),
    (_rx(rf"(?i)MIG-GPU-{UUID}/\d+/\d+|MIG-{UUID}|GPU-{UUID}"), _uuid),
    (_rx(rf"(?i)\b(?:GPU|MIG)-{H}{{4,}}(?:-{H}+)*(?![\w-])"), _uuid),  # prefixes CUDA accepts
    (
        _rx(
            rf"(?<=pod)(?P<id>{UUID})(?![0-9A-Za-z])|(?:(?<=pod)|(?<![0-9a-fA-F]))"
            rf"(?P<id2>{H}{{8}}_{H}{{4}}_{H}{{4}}_{H}{{4}}_{H}{{12}})(?![0-9a-fA-F])"
        ),
        _pod_uid,
    ),
    (_rx(rf"(?<![0-9a-fA-F-]){UUID}(?![0-9a-fA-F-])"), _uuid),
    *NETDEV_RULES,  # interface names: a MAC or a bus id in another spelling
    (_rx(r"(?<![0-9A-Za-z])[0-9a-fA-F]{8,63}(?![0-9A-Za-z])"), _known_id),
    (
        _rx(
            rf"(?<![\w:-])(?:{H}{{2}}(?:[:-]{H}{{2}}){{19}}|{H}{{2}}(?::{H}{{2}}){{7}}|"
            rf"{H}{{2}}(?:[:-]{H}{{2}}){{5}}|{H}{{4}}\.{H}{{4}}\.{H}{{4}})(?![\w-]|:{H})"
        ),
        _mac,
    ),
    (
        _rx(
            r"(?<![\w:.])(?P<addr>(?:[0-9A-Fa-f]{0,4}:){2,7}"
            r"(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{0,4})(?:%[\w.]+)?)"
            r"(?:/\d{1,3})?(?![\w:])"
        ),
        _ip,
    ),
    (_rx(rf"(?<![\w:]){H}{{4}}(?::{H}{{4}}){{3}}(?![\w:])|\b0[xX]{H}{{16}}\b"), _mac),
    *F.ADDRESS_RULES,
    # IPv4, also glued to `_` (`ip_10.1.2.3`) and at the end of a sentence
    (
        _rx(r"(?<![A-Za-z0-9.])(?P<addr>(?:\d{1,3}\.){3}\d{1,3})(?:/\d{1,2})?(?![A-Za-z0-9]|\.\d)"),
        _ip,
    ),
    (
        _rx(
            rf"(?<!\w)(?<!{H}:)(?P<bus>(?:{H}{{8}}|{H}{{4}}):{H}{{2}}:{H}{{2}}(?:\.[0-7])?)"
            r"(?!\w|:[0-9a-fA-F])"
        ),
        _pci,
    ),
    (_rx(rf"(?<![\w:.])(?P<bus>{H}{{2}}:{H}{{2}}\.[0-7])(?![\w.]|:\d)"), _pci),  # lspci's
    *F.PCI_RULES,
    F.BARE_BUS_RULE,
    *F.CLOUD_RULES,
    (
        _rx(
            r"(?i)(\b(?:gpu_)?serial(?:[ _-]?(?:number|no|num))?\s*[:=#]?\s*|\bboard\s*id\s*[:=]\s*"
            r"|\bS/?N\s*[:=#]\s*)([A-Za-z0-9-]{4,})"
        ),
        _serial,
    ),
    (_rx(r"(?<![\w.-])[A-Za-z][\w.-]*\[[\d,\-]+\][\w.-]*"), _nodelist),
    (
        _rx(
            r"(?i)\b(?:job_?id|slurm_(?:array_)?job_?id)[\"']?(?:\s*[=:#]\s*[\"']?|\s+)"
            r"(?P<job>\d+)(?!\d|\.\d)|\bjob_(?P<job2>\d+)\b(?P<step>(?:/(?:step_(?:\d+|batch|"
            r"extern|interactive)|user|task_(?:\d+|special))(?![\w-]|\.\w))*)"
        ),
        _job,
    ),
    (
        _rx(
            r"(?i)\bjob\s*#?\s*(?P<job>\d{3,})(?!\d|\.\d)"
            r"|\b(?P<job2>\d{4,})(?=_\d+\b|\.(?:batch|extern|interactive)\b)"
        ),
        _job,
    ),
    (_rx(r"\bslurm-(?P<job>\d+)(?P<job2>)(?=\.out|\.err|_)"), _job),
    (_rx(r"(?<=slurmstepd\.scope/)(?!job_)(?P<job>[A-Za-z0-9]{8,})(?P<job2>)"), _job),  # SLUID
    (
        _rx(
            r"(?:\b(?:UserId|GroupId|User|Owner|USER|LOGNAME|SUDO_USER|SLURM_JOB_USER)=|"
            r"(?i:\b(?:user(?:_?name)?|owner|login)=)|"
            r"\b[ug]id=\d+\(|\bgroups=(?:\d+\([^)]*\),)*\d+\()(?P<name>[A-Za-z_][\w.-]*)"
        ),
        _user_ctx,
    ),
    (
        _rx(
            r"\b((?:AllocNode:Sid|BatchHost|NodeList|ReqNodeList|ExcNodeList|SubmitHost|NodeName|"
            r"NodeHostName|NodeAddr|SLURM_SUBMIT_HOST|SLURMD_NODENAME|SLURM_NODELIST|"
            r"SLURM_JOB_NODELIST|SLURM_STEP_NODELIST|SLURM_TOPOLOGY_ADDR|HOSTNAME|MASTER_ADDR|"
            r"node_desc)=|\bhostname\s*[:=]\s*)([A-Za-z][\w-]*(?:\.[A-Za-z0-9][\w-]*)*)"
        ),
        _host_ctx,
    ),
    *F.PEER_RULES,
    (
        _rx(
            r"(\b(?:Account|account|SLURM_JOB_ACCOUNT|SBATCH_ACCOUNT|SLURM_ACCOUNT|Partition|"
            r"partition|SLURM_JOB_PARTITION|SBATCH_PARTITION|JobName|SLURM_JOB_NAME|"
            r"SBATCH_JOB_NAME|Reservation|SLURM_JOB_RESERVATION))(=|:\s*)([A-Za-z0-9_][\w.-]*)"
        ),
        _slurm_word,
    ),
    (_rx(r"(--account|--partition|--job-name)(=|\s+)([A-Za-z0-9_][\w.-]*)"), _slurm_word),
    (
        _rx(
            r"(?i)(?:--namespace(?:=|\s+)|\bnamespace\s*[=:]\s*[\"']?|\bnamespaces?\s+[\"']|"
            r"\bnamespaces/|\bkubectl\b[^\n;|]*?\s-n(?:=|\s+))"
            r"(?P<ns>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?![\w.-])"
        ),
        _namespace,
    ),
    (
        _rx(
            r"\b([a-z_][a-z0-9_.-]{0,31})@(?=[\w.-]*[A-Za-z])"
            r"([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])"
        ),
        _user_at_host,
    ),
    (_rx(r"(?<![\w-])([A-Z][A-Z0-9_]{1,63})=(\"[^\"]*\"|'[^']*'|[^\s'\"]*)"), _env),
    (
        _rx(r"(?<![\w.~/-])~(?:[A-Za-z_][\w.-]*)?(?=/|\s|$|[,;)])(?:/[^\s'\"`,;|<>(){}\[\]=:]*)?"),
        _path,
    ),
    (_rx(r"(?<![\w.~-])/[\w.~@+-][^\s'\"`,;|<>(){}\[\]=:]*"), _path),
    (
        _rx(
            r"(?<![\w/.~@-])(?:\.{1,2}/[\w.-]*[A-Za-z][\w.-]*(?:/[\w.-]+)*|"
            r"[\w.-]*[A-Za-z][\w.-]*(?:/[\w.-]+)+)/?"
        ),
        _relpath,
    ),
)
