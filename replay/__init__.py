"""Reading history back and deciding it again (docs/accounting.md, docs/replay-decisions.md).

What it owns: accounting rules as files (`rule`, `rule_file`, `rules/`), pricing a history under
a rule by two engines that agree to the micro-euro (`fold`, `sql`, `run`, `report`), re-deciding a
recorded demo run with other decider settings (`decisions`; the comparison in words:
`decisions_text`), and the monthly archive with its Merkle tree, Object Lock and offline
verifier (`archive/`).

What it may import: `schemas`, `contracts`, `streams`, `projections`, `sim` (a re-decided run
is simulated again); fastavro, pyarrow, boto3, cryptography. Who calls it: the console and the
command line (`spotcap replay`, `replay decisions`, `archive`).
"""
