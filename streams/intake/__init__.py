"""The scheduler intake: pending work in Kubernetes and Slurm becomes capacity claims.

Owns the demand that comes from the schedulers (DESIGN.md §2, "Kubernetes watch / slurmrestd
poll -> intake -> capacity claims -> log"): pods and jobs that carry a spotcap contract become
`capacity_claim_opened` when they wait for capacity, and `capacity_released` when their work
ends, on the region's demand topic.

- ``claims``: what a source saw (sightings, batches), the book of open and released claims, and
  ``decide``, which turns one into events (pure; ids derived from the work's identity).
- ``kubernetes``: the list-then-watch of pods that carry a ``spotcap.io/workload`` label.
- ``slurm``: the slurmrestd poll of jobs that name a workload (comment or wckey).
- ``history``: the book read back from the log at start (the intake keeps no other state).
- ``service``: the sources in threads, one writer, ``serve`` for ``spotcap run intake``.

A sub-part of ``streams``: the claims it writes go on the log, where the deciders read them.
May import ``schemas``, ``contracts`` and the rest of ``streams`` (the log it writes), and
``kubernetes`` and ``urllib3`` (the API client), which nothing else in ``streams`` may
(tests/layering.py, ``streams/intake``). Called by the command line (``spotcap run intake``) and
the tests; nothing else imports it.
"""
