"""The `spotcap` command line: one module per command group, each parsing its options, calling
a function of a part and printing what it returns (tables for people, ``--json`` for machines).
Nothing here computes what a part's own test would need to test."""

from spotcap.cli.main import LAZY_COMMANDS, main

__all__ = ["LAZY_COMMANDS", "main"]
