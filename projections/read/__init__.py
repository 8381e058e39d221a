"""The read side: queries for SREs, cause chains for owners, the savings report for finance.
Plain functions over the stores, returning rows as dicts; the CLI and the HTTP API share them."""
