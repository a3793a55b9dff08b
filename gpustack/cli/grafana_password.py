"""``gpustack grafana-password``: print the Grafana admin password gpustack generated."""

from __future__ import annotations

from gpustack.cli.options import ConfigOpt, console_for, load_config
from gpustack.errors import UsageError


def grafana_password(config: ConfigOpt = None) -> None:
    """Print the Grafana admin password (kept 0600 in the state directory; never printed otherwise)."""
    from gpustack.cluster import password_path

    cfg = load_config(config).config
    path = password_path(cfg)
    if not path.is_file():
        raise UsageError(f"no Grafana password yet ({path}): run `gpustack up` first")
    console_for().print(path.read_text(encoding="utf-8").strip())
