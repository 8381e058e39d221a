"""The framework integrations, built once (ADR-18): PyTorch (`pytorch`), Spark (`spark`) and
Slurm (`slurm`). Each turns a framework's own state into a generation's parts and back, so a
workload gets checkpoints that survive a reclaim without writing that code itself.

What it may import: `checkpoint`, and the framework each module integrates (torch, pyspark);
importing one module never imports another's framework.
"""
