"""Checks: pure functions from collected facts to findings (preflight now; verify/doctor later)."""
