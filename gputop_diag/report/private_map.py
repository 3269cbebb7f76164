"""The report's private map (`report --private-map FILE`): every pseudonym with what it stands
for, for the person who made the report only."""

from __future__ import annotations

import json
import os

from ..sanitize.sanitizer import Sanitizer


def write_private_map(sanitizer: Sanitizer, path: str) -> None:
    """Write the reverse map to `path`, readable by its owner only (mode 0600 from the first
    byte); an existing file is replaced. OSError when it cannot be written."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask, and if the file was there before
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(sanitizer.private_map(), f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
