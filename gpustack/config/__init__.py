"""Configuration: the pydantic model, the loader (file < env < flags) and the pin table."""
