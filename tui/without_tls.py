"""asyncio loaded without `ssl`: the live view opens no network connection, and asyncio's
optional import of `ssl` loads OpenSSL (libcrypto, libssl, the `ssl` module's enums), about 4 MiB
of the live view's resident memory on the mock NVML library (`docs/live-view.md`).

asyncio imports `ssl` only to offer TLS, and runs without it where Python was built without
OpenSSL (`try: import ssl / except ImportError: ssl = None` at the top of `base_events`,
`selector_events` and `sslproto`:
https://github.com/python/cpython/blob/v3.11.7/Lib/asyncio/base_events.py#L33-L36). A `None`
in `sys.modules` makes that import raise `ImportError`
(https://docs.python.org/3/reference/import.html#the-module-cache); it is removed again at
once, so a later `import ssl` of anything else in the process loads it as usual (urllib's
https, as the Fleet pane's Prometheus client uses). asyncio itself stays without TLS for the
whole process: `asyncio.open_connection(..., ssl=...)` would raise "stdlib ssl module not
available". Nothing in the live view does network I/O through asyncio; a part that would
must load `ssl` before the view's package is imported."""

from __future__ import annotations

import sys


def import_asyncio_without_tls() -> None:
    """Import asyncio, its TLS left out (nothing done where asyncio or ssl is already loaded:
    under a test runner, or a program that embeds the view)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]
