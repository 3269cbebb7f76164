"""The exit codes of the command-line contract (README, "Exit codes"), in one place."""

EXIT_FAILURE = 1  # an unexpected failure, or (xid) a log that could not be read
EXIT_USAGE = 2
EXIT_NO_GPU = 3  # no usable NVIDIA driver or GPU; with fleet: Prometheus answers, no GPU series
EXIT_PROMETHEUS = 4  # fleet: Prometheus is down, too slow, or refuses the query
