"""The event log and what runs on it.

What it owns: the log seam (`log`) and its two implementations (`kafka`, `embedded`), the one
write path (`writer`), reading back (`reader`, `merged`: the merged history, `browse`), the
processing chain (`processing/`), the dead-letter topic, the run markers (`runs`), the deciders
(`deciders/`: pure, importing nothing that does I/O) and their runtimes (`runtime/`: the
embedded runner, the Faust workers and the sequencer on Kafka, `runtime.service`), and the
scheduler intake (`intake/`: pending pods and Slurm jobs become capacity claims on the log).

What it may import: `schemas`, `contracts`; confluent-kafka, fastavro, Faust (and, in
`intake/` only, the Kubernetes client). Who calls it: the projections, the simulator, replay,
the console, the agent's shipper and the command line.
"""
