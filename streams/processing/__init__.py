"""The processing chain (STYLE.md §3, after arroyo): decode -> step -> batch -> write -> commit.

Each step is a small class in its own module that wraps the next one; `factory.ChainFactory`
builds the chain for each partition assignment, from the last step back, and `runner.Processor`
feeds it from a consumer. A step's pure function maps an event to events or rows; an input it
cannot handle is dead-lettered with its reason and the chain goes on; positions are committed
only after the writes and the dead letters are durable.
"""
