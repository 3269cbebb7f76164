"""gputop-diag's own entry point with `exporter` and `fleet` in its COMMANDS table, the way
cli.py registers every command (one line each). Tests start the commands through this file
until those two lines are in cli.py; afterwards the two setdefault calls change nothing."""

import sys

from gputop_diag import cli

cli.COMMANDS.setdefault(
    "exporter", ("exporter", "serve Prometheus metrics in dcgm-exporter's names")
)
cli.COMMANDS.setdefault(
    "fleet", ("fleet", "diagnose many nodes from Prometheus (dcgm-exporter's series or ours)")
)

if __name__ == "__main__":
    sys.exit(cli.main())
