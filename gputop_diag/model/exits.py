"""The exit statuses of the command-line contract, in one place.

The README's "Exit statuses" table, the top-level `--help` epilog and each command's own
statuses are checked against `MEANING` and `COMMAND_EXITS` (tests/test_exit_statuses.py).
Beyond these: 128 + N when signal N stopped a run with a span, 141 for a closed output (as a
shell reports them), and `watch -- CMD` exits with the command's own status.
"""

EXIT_OK = 0
EXIT_FAILURE = 1  # an unexpected failure; an output that failed part-way; nothing readable
EXIT_USAGE = 2  # bad input: an option, a value, a file to read or write; said before any work
EXIT_NO_GPU = 3  # no usable NVIDIA driver or GPU; with fleet: Prometheus answers, no GPU series
EXIT_PROMETHEUS = 4  # fleet: Prometheus is down, too slow, or refuses the query
EXIT_PARTIAL = 5  # the answer is printed, but part of what was asked is missing (said on stderr)

# The words of the README table's "means" column and of the `--help` epilog.
MEANING: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILURE: "failure",
    EXIT_USAGE: "usage error",
    EXIT_NO_GPU: "no usable NVIDIA driver or GPU",
    EXIT_PROMETHEUS: "no answer from Prometheus",
    EXIT_PARTIAL: "partial answer",
}

# The statuses each command can end with (the live view is ""); every command can also end
# with 1 (an unexpected failure, an output that fails part-way) and 2 (bad input).
COMMAND_EXITS: dict[str, tuple[int, ...]] = {
    "": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU, EXIT_PROMETHEUS),
    "snapshot": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU),
    "diagnose": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU),
    "record": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU, EXIT_PARTIAL),
    "xid": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_PARTIAL),
    "mapping": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU),
    "driver": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU),
    "health": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU),
    "report": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU, EXIT_PARTIAL),
    "compare": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE),
    "memory": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE),  # without a GPU: the plan, no fit (0)
    "exporter": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU),
    "fleet": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU, EXIT_PROMETHEUS),
    "watch": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE),
    "demo": (EXIT_OK, EXIT_FAILURE, EXIT_USAGE),
}
