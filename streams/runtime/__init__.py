"""The deciders' runtimes: the per-event core (`core`), the embedded runner (`embedded`), and the
Faust app on Kafka with its sequencer (`sequencer`, `faust_app`). See docs/deciders.md."""
