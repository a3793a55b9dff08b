"""Typer commands. Each command only chooses; the engine modules do the work."""
