"""The console: pages for people over the same read functions as the HTTP API."""
