"""The seven bottleneck classes, in one place: the classifier names its primary with them
(`diagnose.types.BOTTLENECK_CLASSES`) and a health finding says which of them it bears on
(`model.health.HEALTH_CLASSES`). The taxonomy is the seed's (docs/diagnosis.md)."""

from __future__ import annotations

BOTTLENECK_CLASSES: tuple[str, ...] = (
    "capacity",
    "bandwidth",
    "compute",
    "input_pipeline",
    "synchronization",
    "communication",
    "scheduler",
)
