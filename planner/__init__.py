"""planner: a fleet capacity-planning optimiser for LLM inference."""

__version__ = "0.1.0"
