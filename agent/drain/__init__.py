"""Drain paths (ADR-14): through Kubernetes or Slurm when they answer within 800 ms, else locally.

Each path drains the node, verifies the result rather than assuming it, and says which path
finished the work; the agent owns the trigger and the deadline (`agent.drainer`).
"""

from agent.drain.base import Deadline, DrainContext, DrainPathImpl, DrainRequest, DrainResult

__all__ = ["Deadline", "DrainContext", "DrainPathImpl", "DrainRequest", "DrainResult"]
