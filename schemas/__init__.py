"""The event model and everything that is data about it: the Avro schemas of every event and
the envelope (`*.avsc`), the generated event classes (`events`), the codec (`codec`:
single-object encoding, or the Confluent wire format with a registry), the compatibility check
(`compat`), the topic table (`topics`), the notice wire model (`notices`), the contract and
pool-catalogue models (`contracts/`, `pools`), and derived event ids (`ids`).

What it may import: nothing of the project (it is the bottom); fastavro, avro, pydantic and
PyYAML. Who calls it: every other part.
"""
