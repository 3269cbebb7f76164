"""Failure lines in a job's output: CUDA out of memory, NCCL timeouts and errors, CUDA errors.

A CUDA OOM is evidence of device capacity (the job asked the GPU for more memory than it had);
an NCCL timeout or watchdog abort is evidence of communication (a collective waited past its
timeout: a rank stopped, or a link). The kernel's OOM killer is another matter (host memory,
`xid/oom.py`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..model import OutputEvent
from ..model.formats import clip_words

MAX_LINE = 300  # characters of a line kept in an event

# (kind, pattern), the first that matches names the line.
PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    (
        "cuda_oom",
        re.compile(
            r"torch(?:\.cuda)?\.OutOfMemoryError|CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
            r"cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|CUDNN_STATUS_ALLOC_FAILED|"
            r"RESOURCE_EXHAUSTED: Out of memory",
        ),
    ),
    (
        "nccl_timeout",
        re.compile(
            r"Watchdog caught collective operation timeout|"
            r"ProcessGroupNCCL.*(?:[Tt]imeout|timed out|[Ww]atchdog)|"
            r"NCCL.*(?:watchdog|collective operation).*(?:timeout|timed out|abort)|"
            r"Some NCCL operations have failed or timed out|NCCL communicator was aborted|"
            r"DistBackendError.*(?:timeout|timed out)",
            re.IGNORECASE,
        ),
    ),
    (
        "nccl_error",
        re.compile(
            r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|"
            r"ncclRemoteError|ncclInvalidUsage|NCCL WARN"
        ),
    ),
    (
        "cuda_error",
        re.compile(
            r"CUDA error|CUDA_ERROR_[A-Z_]+|cudaError[A-Z]\w+|CUDA driver error|"
            r"illegal memory access was encountered|device-side assert triggered|"
            r"CUBLAS_STATUS_(?!SUCCESS)[A-Z_]+|CUDNN_STATUS_(?!SUCCESS)[A-Z_]+|"
            r"no CUDA-capable device is detected|CUDA initialization:",
        ),
    ),
)

KINDS = tuple(k for k, _ in PATTERNS)
LABELS = {
    "cuda_oom": "CUDA out of memory",
    "nccl_timeout": "NCCL timeout",
    "nccl_error": "NCCL error",
    "cuda_error": "CUDA error",
}
# What each kind is evidence of, in the diagnosis' class names.
EVIDENCE_OF = {
    "cuda_oom": "capacity",
    "nccl_timeout": "communication",
    "nccl_error": "communication",
    "cuda_error": None,
}


def classify_line(line: str) -> str | None:
    """The kind of failure a line names, or None."""
    if len(line) < 8:
        return None
    for kind, rx in PATTERNS:
        if rx.search(line):
            return kind
    return None


def event_of(line: str, line_no: int, t: float | None) -> OutputEvent | None:
    kind = classify_line(line)
    if kind is None:
        return None
    text = clip_words(line.strip(), MAX_LINE)  # whole words only: sanitized later
    return OutputEvent(kind=kind, line=text, line_no=line_no, timestamp=t)


# torchrun's failure summary (torch.distributed.elastic's ChildFailedError), at the end of its
# output: "Root Cause (first observed failure):" then "  rank      : 3 (local_rank: 3)" and
# "  exitcode  : -9 (pid: 15087)" (https://pytorch.org/docs/stable/elastic/errors.html).
_ROOT_CAUSE = "Root Cause (first observed failure)"
_RANK_LINE = re.compile(r"^\s*rank\s*:\s*(\d+)")


def torchrun_first_failure(lines: Sequence[str]) -> int | None:
    """The rank torchrun names as the first observed failure in its summary, where the output's
    tail holds one (the launcher saw which rank died first; the ranks' own files cannot)."""
    for k in range(len(lines) - 1, -1, -1):
        if _ROOT_CAUSE in lines[k]:
            for line in lines[k + 1 : k + 8]:
                m = _RANK_LINE.match(line)
                if m:
                    return int(m.group(1))
            return None
    return None
