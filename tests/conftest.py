import os
import subprocess
import sys

import pytest


def run_cli(
    *args: str, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run `python -m gputop_diag ARGS` as a user would, in a subprocess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gputop_diag", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@pytest.fixture
def cli():
    return run_cli
