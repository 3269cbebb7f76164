"""The names a node keeps for what a cgroup names by id: a pod's namespace and name, a Docker
container's name. Pure: what the collector read in, names out.

- The kubelet keeps each pod's container logs in `/var/log/pods/<namespace>_<name>_<uid>/`
  (`BuildPodLogsDirectory`, pkg/kubelet/kuberuntime/helpers.go in kubernetes/kubernetes;
  https://kubernetes.io/docs/concepts/cluster-administration/logging/#log-location-node). A
  namespace is a DNS label and a pod's name a DNS subdomain, neither with an underscore
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/), so the directory's
  name splits in three at its underscores.
- Docker writes each container's configuration to
  `/var/lib/docker/containers/<id>/config.v2.json`, its name as `"Name": "/name"`; a name is
  `[a-zA-Z0-9][a-zA-Z0-9_.-]+` (the daemon's `RestrictedNamePattern`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

MAX_DIRS = 100_000  # log directories read from one listing
MAX_CONFIG = 8 * 1024 * 1024  # config.v2.json is a few KiB; a longer one is searched, not parsed

_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")
_UID = re.compile(r"[0-9a-f](?:[0-9a-f-]{6,62}[0-9a-f])")
_DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,254}")
_NAME_FIELD = re.compile(r'"Name"\s*:\s*"/([a-zA-Z0-9][a-zA-Z0-9_.-]{0,254})"')


def pod_names(log_dirs: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Pod uid -> (namespace, name), from the names of /var/log/pods' directories; names of
    any other form are passed over."""
    out: dict[str, tuple[str, str]] = {}
    for k, entry in enumerate(log_dirs):
        if k >= MAX_DIRS:
            break
        if not isinstance(entry, str):
            continue
        parts = entry.split("_")
        if len(parts) != 3:
            continue
        namespace, name, uid = parts
        if (
            _DNS_LABEL.fullmatch(namespace)
            and _DNS_SUBDOMAIN.fullmatch(name)
            and _UID.fullmatch(uid.lower())
        ):
            out[uid.lower()] = (namespace, name)
    return out


def docker_container_name(config: str) -> str | None:
    """A Docker container's name from its config.v2.json (without the leading `/`); None when
    the text holds none."""
    if len(config) > MAX_CONFIG:
        m = _NAME_FIELD.search(config, 0, MAX_CONFIG)
        return m.group(1) if m else None
    try:
        doc = json.loads(config)
    except (ValueError, RecursionError):
        m = _NAME_FIELD.search(config)
        return m.group(1) if m else None
    name = doc.get("Name") if isinstance(doc, dict) else None
    if not isinstance(name, str):
        return None
    name = name.removeprefix("/")
    return name if _DOCKER_NAME.fullmatch(name) else None
