"""The event log and what runs on it.

What it owns: the log seam (`log`) and its two implementations (`kafka`, `embedded`), the one
write path (`writer`), reading back (`reader`, `merged`: the merged history, `browse`), the
processing chain (`processing/`), the dead-letter topic, the run markers (`runs`), the deciders
(`deciders/`: pure, importing nothing that does I/O) and their runtimes (`runtime/`: the
embedded runner, the Faust workers and the sequencer on Kafka, `runtime.service`).

What it may import: `schemas`, `contracts`; confluent-kafka, fastavro, Faust. Who calls it:
the projections, the simulator, replay, the console, the agent's shipper and the command line.
"""
