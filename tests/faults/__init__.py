"""Faults: servers and processes killed and paused under the live region."""
