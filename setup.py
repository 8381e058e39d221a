"""The compiled part of the package (everything else is in pyproject.toml).

`streams._framing`: the embedded log's per-record framing (`encode_block`, `whole_records`)
in C, linked with zlib for the CRC-32; `streams.segment` falls back to its Python code when the
extension is not built, and the tests check that both give the same bytes and records.
`schemas._avro_write`: the codec's writer of one Avro record by a program compiled from the
schema (`schemas.avro_program`); without it fastavro writes every record, with the same bytes.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streams._framing",
            sources=["streams/_framing.c"],
            libraries=["z"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "schemas._avro_write",
            sources=["schemas/_avro_write.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ]
)
