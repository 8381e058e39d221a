"""The accounting rules that ship with spotcap (YAML; docs/accounting.md has the format).

``recorded.yaml`` is the rule that produced the recorded ledger; the others are worked what-if
rules to copy from.
"""
