"""`python -m spotcap.cli`: the `spotcap` command."""

from spotcap.cli.main import main

main()
