"""The environment that probes every Python process a command starts (`watch --probe`).

A boot directory holding only a `sitecustomize.py` (boot.py's text) goes first on PYTHONPATH,
ahead of whatever the user's PYTHONPATH already holds; the variable `GPUTOP_DIAG_PROBE_HOME`
names the gputop_diag package so the boot code can load the probe without putting our
site-packages on the child's path. torchrun's ranks, `torch.multiprocessing` and
`multiprocessing` children inherit both variables, so they are probed too; DataLoader workers
load the probe but never write a file (core.py). A child run with `python -I` or `-E` ignores
PYTHONPATH and is not probed.
"""

from __future__ import annotations

import os

from .schema import probe_dir
from .writer import ensure_private_dir

HOME_VARIABLE = "GPUTOP_DIAG_PROBE_HOME"
BOOT_DIR = "boot"


def package_home() -> str:
    """The directory of the gputop_diag package this probe belongs to."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def boot_source() -> str:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot.py")) as f:
        return f.read()


def write_boot_dir(directory: str) -> str:
    """`<directory>/boot/sitecustomize.py`, written (atomically) when missing or out of date;
    returns the boot directory. Raises OSError when it cannot be written."""
    ensure_private_dir(directory)
    boot = os.path.join(directory, BOOT_DIR)
    ensure_private_dir(boot)
    path = os.path.join(boot, "sitecustomize.py")
    source = boot_source()
    try:
        with open(path) as f:
            if f.read() == source:
                return boot
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(temporary, path)
    return boot


def probe_environment(environ: dict[str, str]) -> dict[str, str]:
    """The environment for a command whose Python processes are all to be probed.

    `environ` is the command's environment as it would otherwise be (it decides where the
    probe files go: schema.probe_dir); it is not changed. Raises OSError when the probe's
    directory cannot be written (then the command can only run unprobed)."""
    env = dict(environ)
    boot = write_boot_dir(probe_dir(environ))
    old = env.get("PYTHONPATH", "")
    if old.split(os.pathsep)[0] != boot:
        env["PYTHONPATH"] = boot + os.pathsep + old if old else boot
    env[HOME_VARIABLE] = package_home()
    return env
