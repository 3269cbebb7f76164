"""The memory planner: where a model's memory goes, and what would make it fit."""
