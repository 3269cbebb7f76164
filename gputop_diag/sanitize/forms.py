"""The written forms real machines print, beyond the plain shapes: bus ids as NCCL, lspci and the
kernel write them, addresses as clouds spell them, hardware addresses without separators,
tokens by their shape, cloud and Kubernetes names, peers named in NCCL and PyTorch messages;
and CUDA_VISIBLE_DEVICES, whose ordinals stay while its UUIDs and prefixes of them are replaced.

Each rule is `(pattern, handler)`; `text.py` runs them in order with the other shape rules. A
handler returns the match with the identifier behind a placeholder (`Work.keep`), or the match
unchanged where it is not one.

Sources of the formats:
- PCI bus ids: NVML `nvmlPciInfo_t.busId` ("00000000:3B:00.0", and the legacy
  "0000:3B:00.0"), sysfs and the kernel ("0000:3b:00.0"; NVRM's Xid lines "PCI:0000:3b:00"),
  lspci(8) ("3b:00.0", `-D` with the domain), NCCL (`int64ToBusId` in NCCL's
  src/misc/utils.cc packs domain << 20 | bus << 12 | device << 4 | function and logs it as
  `busId %lx`, "busId 3b000"; its topology dump names nodes "GPU/3B000", and since 2.19
  "GPU/0-3b000"), and "0:3b:00.0" with a short domain (CUDA's `cudaDeviceGetPCIBusId` pads
  it, hand-written configs do not).
- IPv4 in AWS's internal host names ("ip-10-20-30-41.ec2.internal", AWS EC2 User Guide,
  "Amazon EC2 instance hostname types") and Kubernetes pod DNS ("10-20-30-41.ns.pod", the
  Kubernetes DNS specification); leading zeros ("010.020.030.041") as inet_aton reads them.
- JSON Web Tokens: RFC 7519 (three base64url parts; the JOSE header `{"` encodes as "eyJ").
  `Authorization: Bearer` tokens: RFC 6750. AWS access key ids: the 4-letter prefixes of the
  IAM User Guide ("Understanding unique ID prefixes": AKIA, ASIA, ...) and 16 more; AWS secret
  keys: 40 characters of base64. Hugging Face `hf_`, GitHub `ghp_`/`gho_`/`ghs_`/`ghu_`/`ghr_`
  and `github_pat_`, Google `AIza`, Slack `xox?-`, GitLab `glpat-`, PyPI `pypi-`, npm `npm_`.
- EC2 resource ids ("i-0123456789abcdef0": a prefix and 8 or 17 hex digits, EC2 API Reference,
  "Resource IDs"). Kubernetes pod names: a Deployment's pods are `NAME-HASH-XXXXX` with the
  hash and suffix drawn from "bcdfghjklmnpqrstvwxz2456789" (apimachinery's
  `rand.SafeEncodeString`); Kubeflow's training jobs name theirs `NAME-worker-N`.
- NCCL prints a socket address as `host<port>` (`ncclSocketToString`), PyTorch's c10d store as
  `[host]:port`. Every line of NCCL's debug output (NCCL_DEBUG=INFO/WARN/TRACE,
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-debug) starts
  `HOST:PID:TID ` (`ncclDebugLog` in NCCL's src/debug.cc: the host name cut at its first dot,
  or NCCL_HOSTID as set), then `[DEV] NCCL INFO`, `[DEV] file.cc:LINE NCCL WARN`,
  `[DEV] TIME func:LINE NCCL TRACE` or `NCCL CALL`; in a multi-node job each rank's lines carry
  its own host, one the sanitizer was never seeded with.
- CUDA_VISIBLE_DEVICES: CUDA's programming guide, "CUDA Environment Variables" (indices, GPU
  and MIG UUIDs, and UUID prefixes that name one GPU).
"""

from __future__ import annotations

import re
from typing import Any

from . import rules as R
from .rules import UUID, H
from .table import PseudonymTable
from .vocabulary import FILE_EXTENSIONS, VOCABULARY, kernel_module
from .work import Work, has_placeholder

_HEX_LETTER = re.compile("[a-fA-F]")


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def _keep_group(s: PseudonymTable, m: re.Match, w: Work, group: str, shown: str) -> str:
    a, b = m.start(group) - m.start(0), m.end(group) - m.start(0)
    return m.group(0)[:a] + w.keep(shown, m.group(group)) + m.group(0)[b:]


def public(host: str) -> bool:
    host = host.lower()
    return any(host == d or host.endswith("." + d) for d in R.PUBLIC_DOMAINS)


def host(s: PseudonymTable, name: str, w: Work) -> str:
    """A host name or FQDN: `host-x` or `host-x.domain-y` (the short name keeps its pseudonym
    inside the FQDN); public documentation hosts and localhost are kept."""
    low = name.lower().rstrip(".")
    if low in R.ALLOWED_WORDS or public(low):
        return w.keep(name)
    if "." in low:
        first, domain = low.split(".", 1)
        s.seed_hostname(first)
        shown = f"{s.pseudonym('hostname', name, first)}.{s.pseudonym('domain', domain)}"
        return w.keep(shown, name)
    s.seed_hostname(name)
    return s.kept(w, "hostname", name, low)


# -- CUDA_VISIBLE_DEVICES ------------------------------------------------------------------------
# An index as written, with what closes the sentence around it (`(CUDA_VISIBLE_DEVICES=7)`),
# and `-1` (no GPU): an ordinal names no one.
_CVD_ORDINAL = re.compile(r"-?\d{1,4}[)\]}>.,;:!?'\"]*")
_CVD_WORDS = frozenset({"all", "none", "void", "nodevfiles"})
_CVD_UUID = re.compile(rf"(?i)(?:GPU|MIG)-[0-9a-f-]+|MIG-GPU-{UUID}/\d+/\d+")


def cuda_visible_devices(s: PseudonymTable, value: str | None) -> str | None:
    """CUDA_VISIBLE_DEVICES with its shape kept: indices stay, UUIDs (and prefixes of them)
    become their GPU's pseudonym, anything else a pseudonym of its own."""
    if value is None:
        return None
    out = []
    for entry in value.split(","):
        v = entry.strip()
        if not v or _CVD_ORDINAL.fullmatch(v) or v.lower() in _CVD_WORDS:
            out.append(entry)
        elif _CVD_UUID.fullmatch(v):
            out.append(s.uuid(v))
        else:
            out.append(s.pseudonym("env", v))
    return ",".join(out)


# -- PCI bus ids ---------------------------------------------------------------------------------
def _nccl_bus(s: PseudonymTable, m: re.Match, w: Work) -> str:
    n = int(m.group("id"), 16)
    domain, bus, dev = n >> 20, (n & 0xFF000) >> 12, (n & 0xFF0) >> 4
    return _keep_group(s, m, w, "id", s.pci_of(m.group("id"), domain, bus, dev))


def _short_domain_bus(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """`0:3b:00.0`: a bus id with a short domain (a time has no one-digit fraction after
    whole seconds: `0:18:00.0` is a device)."""
    text = m.group("bus")
    domain, bus, rest = text.split(":")
    return _keep_group(
        s, m, w, "bus", s.pci_of(text, int(domain, 16), int(bus, 16), int(rest[:2], 16))
    )


def _bare_bus(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """`3B:00`: a bus and device with neither domain nor function, where it cannot be a time:
    it has a hex letter, or it is a GPU of this machine."""
    text = m.group("bus")
    bus, dev = (int(x, 16) for x in text.split(":"))
    if not (_HEX_LETTER.search(text) or s.known_bus(bus, dev)):
        return m.group(0)
    return _keep_group(s, m, w, "bus", s.pci_of(text, 0, bus, dev))


def _mac_in_context(s: PseudonymTable, m: re.Match, w: Work) -> str:
    return _keep_group(s, m, w, "v", s.pseudonym("mac", m.group("v"), m.group("v").lower()))


PCI_RULES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (_rx(rf"(?i)\bbus_?id\s*[=:]?\s*(?:0x)?(?P<id>{H}{{4,12}})\b(?![:.])"), _nccl_bus),
    (_rx(rf"(?<![\w/])(?:GPU|PCI|NIC)/(?:\d+-)?(?P<id>{H}{{4,12}})(?![\w:.])"), _nccl_bus),
    (
        _rx(rf"(?<![\w:.-])(?P<bus>{H}{{1,3}}:{H}{{2}}:{H}{{2}}\.[0-7])(?![\w.]|:{H})"),
        _short_domain_bus,
    ),
)
# After every longer form (and after MACs, IPv6 and times with seconds have been taken).
BARE_BUS_RULE = (_rx(rf"(?<![\w:.-])(?P<bus>{H}{{2}}:{H}{{2}})(?![\w:]|\.\d)"), _bare_bus)


# -- addresses -----------------------------------------------------------------------------------
def _dashed_ip(s: PseudonymTable, m: re.Match, w: Work) -> str:
    parts = re.split("[-_]", m.group("addr"))
    if m.group("pre") is None and "_" in m.group("addr"):
        return m.group(0)
    if not all(len(p) <= 3 and int(p) <= 255 for p in parts) or int(parts[0]) == 0:
        return m.group(0)
    canon = ".".join(str(int(p)) for p in parts)
    if not R.valid_ipv4(canon):
        return m.group(0)
    return s.kept(w, "ipv4", m.group(0), canon)


def _bare_mac(s: PseudonymTable, m: re.Match, w: Work) -> str:
    raw = m.group(0)
    if raw != raw.lower() and raw != raw.upper():  # mixed case: a name or a hash, not a MAC
        return raw
    return s.kept(w, "mac", raw, raw.lower())


ADDRESS_RULES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (
        _rx(
            r"(?<![A-Za-z0-9.-])(?:(?P<pre>ip)[-_])?"
            r"(?P<addr>\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}|\d{1,3}_\d{1,3}_\d{1,3}_\d{1,3})"
            r"(?![\w-]|\.\d)",
            re.I,
        ),
        _dashed_ip,
    ),
    # A MAC without separators where the text says it is one, whatever its digits ...
    (
        _rx(
            r"(?i)\b(?:mac|hwaddr|ether|lladdr|link/ether|hw\s+address|address)\s*[=:]?\s*"
            r"(?P<v>[0-9a-f]{12})\b"
        ),
        _mac_in_context,
    ),
    # ... and anywhere with letters and digits in one case.
    (
        _rx(r"(?<![\w.:/-])(?=[0-9A-Fa-f]*[A-Fa-f])(?=[0-9A-Fa-f]*\d)[0-9A-Fa-f]{12}(?![\w:-])"),
        _bare_mac,
    ),
)


# -- tokens and keys -----------------------------------------------------------------------------
def _secret(s: PseudonymTable, m: re.Match, w: Work) -> str:
    return s.kept(w, "secret", m.group(0))


def _secret_group(s: PseudonymTable, m: re.Match, w: Work) -> str:
    value = m.group("v")
    if has_placeholder(value) or R.SAFE_VALUE.match(value):
        return m.group(0)
    return _keep_group(s, m, w, "v", s.pseudonym("secret", w.restore(value, original=True)))


def _basic(s: PseudonymTable, m: re.Match, w: Work) -> str:
    v = m.group("v")
    if not (re.search(r"\d|=$|[+/]", v) and re.search("[A-Za-z]", v)):
        return m.group(0)
    return _keep_group(s, m, w, "v", s.pseudonym("secret", v))


_SECRET_WORD = (
    r"(?:token|passw(?:or)?d|passphrase|pwd|secret|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|"
    r"credentials?|private[_-]?key|client[_-]?secret)"
)
SECRET_RULES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (_rx(r"(?<![\w.-])eyJ[A-Za-z0-9_-]{6,}(?:\.[A-Za-z0-9_-]*){1,4}"), _secret),  # RFC 7519
    (_rx(r"(?i)\bbearer(?:\s+|%20)(?P<v>[A-Za-z0-9._~+/-]{8,}=*)"), _secret_group),  # RFC 6750
    (_rx(r"\bBasic\s+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])"), _basic),
    # `--password VALUE`, `--api-key VALUE`, `-token VALUE`: the value after a space
    (
        _rx(rf"(?i)(?<![\w-])--?[\w-]*{_SECRET_WORD}[\w-]*\s+(?!-)(?P<v>[^\s'\"]+)"),
        _secret_group,
    ),
    (
        _rx(
            r"\b(?:hf_[A-Za-z0-9]{20,}|api_org_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|"
            r"github_pat_\w{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abpr]-[\w-]{10,}|xapp-[\w-]{10,}|"
            r"(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|ABIA|ACCA)[A-Z0-9]{16}|"
            r"glpat-[\w-]{20,}|AIza[0-9A-Za-z_-]{35}|pypi-[\w-]{40,}|npm_[A-Za-z0-9]{36})"
        ),
        _secret,
    ),
    # An AWS secret access key (40 characters of base64, every kind of character in it).
    (
        _rx(
            r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}\d)(?=[A-Za-z0-9/+]{0,39}[a-z])"
            r"(?=[A-Za-z0-9/+]{0,39}[A-Z])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
        _secret,
    ),
)


# -- cloud and Kubernetes names ------------------------------------------------------------------
def _cloud(s: PseudonymTable, m: re.Match, w: Work) -> str:
    g = "id" if m.groupdict().get("id") else 0
    if g == 0:
        return s.kept(w, "cloud", m.group(0), m.group(0).lower())
    return _keep_group(s, m, w, "id", s.pseudonym("cloud", m.group("id")))


_K8S = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery rand.SafeEncodeString's alphabet


def _pod(s: PseudonymTable, m: re.Match, w: Work) -> str:
    return host(s, m.group(0), w)


def _job_pod(s: PseudonymTable, m: re.Match, w: Work) -> str:
    suffix = m.group(0).rsplit("-", 1)[1]
    if not (re.search(r"\d", suffix) and re.search("[a-z]", suffix)):
        return m.group(0)
    return _pod(s, m, w)


CLOUD_RULES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (
        _rx(
            r"\b(?:i|ami|vol|eni|snap|sg|subnet|vpc|igw|nat|rtb|acl|eipalloc|fs|fsvol)-"
            r"(?:[0-9a-f]{17}|[0-9a-f]{8})\b"
        ),
        _cloud,
    ),
    (_rx(r"(?i)\binstance[-_ ]?id[\"']?\s*[=:]?\s*[\"']?(?P<id>\d{6,20})\b"), _cloud),
    (
        _rx(rf"(?<![\w.-])(?:[a-z0-9]+-)+[{_K8S}]{{8,10}}-[{_K8S}]{{5}}(?![\w.-])"),
        _pod,
    ),
    (
        _rx(
            r"(?<![\w.-])[a-z0-9](?:[a-z0-9-]*[a-z0-9])?-"
            r"(?:worker|master|launcher|chief|ps|evaluator|head)-\d+(?![\w.-])"
        ),
        _pod,
    ),
    (_rx(rf"(?<![\w.-])[a-z][a-z0-9-]*-[{_K8S}]{{5}}(?![\w.-])"), _job_pod),
)


# -- peers named by a protocol's own syntax or a word before them --------------------------------
_NOT_A_HOST = re.compile(
    r"(?i)^(?:gpu|mig|cuda|pci|rank|step|epoch|line|layer|cpu|node|sm|tp|pp|dp|ep|nvlink|"
    r"nccl|cudnn|torch|python|version|v)[-_]?\d*$"
)


def host_like(name: str) -> bool:
    """A word that may be a host's name: letters with digits, a hyphen or a dot in it, and
    none of the tool's own words (`GPU-3`, `cuda-12`, `rank-0`)."""
    if has_placeholder(name) or not re.search("[A-Za-z]", name):
        return False
    if not re.search(r"[\d.-]", name) or _NOT_A_HOST.match(name):
        return False
    if name.lower() in VOCABULARY:
        return False
    last = name.rsplit(".", 1)[-1].lower()
    return "." not in name or last not in FILE_EXTENSIONS


_WORD_ON = re.compile(r"[\w-]*")


def _peer(s: PseudonymTable, m: re.Match, w: Work) -> str:
    name = m.group("name").rstrip(".")
    # the whole word the name starts (`mlx5_core`: a host name holds no `_`), as the kernel
    # log and a table's column name a module (`the host   nvidia-peermem error`)
    whole = name + _WORD_ON.match(m.string, m.start("name") + len(name)).group(0)
    if not host_like(name) or kernel_module(whole):
        return m.group(0)
    a = m.start("name") - m.start(0)
    return m.group(0)[:a] + host(s, name, w) + m.group(0)[a + len(name) :]


_HOSTNAME = r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9][A-Za-z0-9-]*)*"


def _nccl_prefix(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """`HOST:PID:TID` before NCCL's `[DEV] NCCL INFO|WARN|TRACE` or `NCCL CALL`: the host a
    host (or address) pseudonym whatever its shape and letter case; a host named by a word
    (`node`, `master`) names no one and stays, as it does elsewhere. The pid and thread id stay
    numbers, as every pid in free text does."""
    name = m.group("name")
    if has_placeholder(name) or _NOT_NCCL_HOST.fullmatch(name) or name.lower() in VOCABULARY:
        return m.group(0)
    if R.valid_ipv4(name):
        canon = ".".join(str(int(x)) for x in name.split("."))
        return _keep_group(s, m, w, "name", s.pseudonym("ipv4", name, canon))
    a, b = m.start("name") - m.start(0), m.end("name") - m.start(0)
    return m.group(0)[:a] + host(s, name, w) + m.group(0)[b:]


def _nccl_address(s: PseudonymTable, m: re.Match, w: Work) -> str:
    """`IFACE:ADDR<port>` as NCCL names the interfaces it uses (`[0]eth0:10.1.2.3<0>`,
    `[1]ib0:fe80::1%ib0<0>`): the address its pseudonym, the interface's name kept."""
    addr = m.group("addr")
    if R.valid_ipv4(addr):
        shown = s.pseudonym("ipv4", addr, ".".join(str(int(x)) for x in addr.split(".")))
    elif ":" in addr and R.valid_ipv6(addr):
        shown = s.pseudonym("ipv6", addr, addr.lower())
    else:
        return m.group(0)
    return _keep_group(s, m, w, "addr", shown)


NCCL_ADDRESS_RULE = (
    _rx(
        r"(?<![\w:.])[A-Za-z][\w.-]{0,15}:(?P<addr>[0-9A-Fa-f:.]*[:.][0-9A-Fa-f:.]*)"
        r"(?=(?:%[\w.-]+)?<\d{1,5}>)"
    ),
    _nccl_address,
)
# A time (`10:23:45`) or a date and time (`2024-05-01T10:23:45`) has the prefix's shape: no host.
_NOT_NCCL_HOST = re.compile(r"\d+|\d{4}-\d\d-\d\d[T_ ]?\d\d")
# NCCL's line prefix: after a line's start, a space, or a launcher's tag (`[default0]:`,
# `[1,0]<stdout>:`), before `[DEV] ` or, on the same line, `NCCL INFO|WARN|TRACE|CALL`.
NCCL_PREFIX_RULE = (
    _rx(
        r"(?:(?<=\]:)|(?<=>:)|(?<![\w.:/@-]))"
        r"(?P<name>[A-Za-z0-9_](?:[\w.-]{0,253}[A-Za-z0-9_])?):(?P<pid>\d{1,10}):(?P<tid>\d{1,10})"
        r"(?=[ \t]+(?:\[\d{1,4}\][ \t]|[^\n]{0,300}?\bNCCL[ \t]+(?:INFO|WARN|TRACE|CALL)\b))",
        re.I,
    ),
    _nccl_prefix,
)
PEER_RULES: tuple[tuple[re.Pattern[str], Any], ...] = (
    # NCCL: host<port> (not an IPv6 address's scope: `fe80::1%ib0<0>`)
    (_rx(rf"(?<![\w.%-])(?P<name>{_HOSTNAME})(?=<\d{{1,5}}>)"), _peer),
    (_rx(rf"(?<=\[)(?P<name>{_HOSTNAME})(?=\]:\d{{2,5}})"), _peer),  # c10d: [host]:port
    (_rx(rf"(?<=\()(?P<name>{_HOSTNAME})(?=,\s*\d{{2,5}}\))"), _peer),  # c10d: (host, port)
    (_rx(rf"(?<![\w./:@-])(?P<name>{_HOSTNAME})(?=:\d{{4,5}}(?![\w:.]))"), _peer),  # host:port
    (
        _rx(
            r"(?i)\b(?:(?:remote\s+)?peers?|remote(?:\s+host)?|hosts?|hostname|node(?:name)?|"
            r"server|master(?:_addr)?|addr(?:ess)?|endpoint|connect(?:ing|ed)?\s+to|"
            r"rendezvous|rdzv_endpoint|from\s+host)"
            rf"(?:\s*[=:]\s*|\s+)(?P<name>{_HOSTNAME})"
        ),
        _peer,
    ),
)
