"""Two runs side by side (`gputop-diag compare A B`, docs/compare.md): each a recording replayed
through the Monitor or a `watch --json` document; every figure both have, the change, and whether
it exceeds the runs' own variation."""
