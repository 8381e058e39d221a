"""The command line and the composition root: nothing else.

`spotcap.cli` holds one module per command group, each parsing its options, calling a
function of a part and printing what it returns; `config` reads the settings, `wiring` turns
them into what each part is handed (the log, the codec, the stores, the run markers' folder, the
archive), `fail` and `failures` render every failure as a sentence.

What it may import: the public names of every part; click and rich. Who calls it: people and
scripts, through the `spotcap` console script.
"""
