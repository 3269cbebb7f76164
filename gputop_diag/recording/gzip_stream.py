"""Reading gzip data the way `zcat` does: member after member, and telling a stream that ends
early (a writer that was killed) from one damaged at its end or in its middle."""

from __future__ import annotations

import io
import zlib
from typing import IO

_READ_CHUNK = 64 * 1024


class GzipEnd:
    """How a gzip file ended: whole, cut off, or damaged (`why`; `at_end`: nothing readable
    follows the damage, so it is the file's last member that is damaged)."""

    def __init__(self, kind: str, why: str = "", at_end: bool = True) -> None:
        self.kind, self.why, self.at_end = kind, why, at_end


WHOLE = GzipEnd("whole")


class GzipMembers(io.RawIOBase):
    """The text of a gzip file, member after member (as zcat reads `cat a.gz b.gz`), with zlib.

    Unlike GzipFile it never raises part way: where the data ends early or is damaged it
    returns what decoded before that point and then EOF, and `end` says how it ended. A member
    cut off (the writer was killed) is read up to its last byte; a damaged one (a bad CRC, a bit
    flip) up to the byte that is wrong."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member, header checked
        self._in = b""  # compressed bytes read, not yet decoded
        self._at = 0  # the file offset of self._in[0]
        self._member_at = 0  # where the member being read starts
        self._raw_eof = False
        self._boundary = True  # between members: zero padding is skipped
        self._out = b""  # decoded, not yet returned
        self.end: GzipEnd | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out and self.end is None:
            self._step(len(b))
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _step(self, limit: int) -> None:
        if not self._in and not self._raw_eof:
            chunk = self._raw.read(_READ_CHUNK)
            if chunk:
                self._in = chunk
            else:
                self._raw_eof = True
        if self._boundary:
            rest = self._in.lstrip(b"\0")  # padding after a member, as gzip allows
            self._at += len(self._in) - len(rest)
            self._in = rest
            if not self._in:
                if self._raw_eof:
                    self.end = WHOLE
                return
            self._boundary, self._member_at = False, self._at
        d = self._d
        before = d.copy()
        try:
            out = d.decompress(self._in, limit)
        except zlib.error as e:
            self._damaged(before, e)
            return
        if d.eof:  # the member's end: its CRC and length matched
            rest = d.unused_data
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            self._boundary = True
        else:
            rest = d.unconsumed_tail
        self._at += len(self._in) - len(rest)
        self._in = rest
        self._out = out
        if not out and not self._in and self._raw_eof and not self._boundary:
            self.end = GzipEnd("cut")  # the file ends inside a member

    def _damaged(self, d, e: zlib.error) -> None:
        """Decode what precedes the bad byte (one byte at a time, from the state before the
        failing call), and end there."""
        out = []
        for i in range(len(self._in)):
            try:
                out.append(d.decompress(self._in[i : i + 1]))
            except zlib.error:
                break
        self._out = b"".join(out)
        why = str(e).removeprefix("Error -3 while decompressing data: ")
        self.end = GzipEnd("damaged", why, not gzip_member_after(self._raw, self._member_at))


def gzip_member_after(raw: IO[bytes], start: int) -> bool:
    """Whether a gzip member that decodes begins after `start` (so damage at `start` is not at
    the end of the file). Candidates are the gzip magic bytes; each must decode (to a line or to
    its end) before it counts."""
    at, tried = start + 1, 0
    while tried < 256:
        raw.seek(at)
        data = raw.read(1024 * 1024)
        i = data.find(b"\x1f\x8b\x08")
        if i < 0:
            if len(data) < 1024 * 1024:
                return False
            at += len(data) - 2
            continue
        tried += 1
        raw.seek(at + i)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(raw.read(256 * 1024), 1024 * 1024)
        except zlib.error:
            out = None
        if out is not None and (d.eof or b"\n" in out):
            return True
        at += i + 1
    return False
