"""The one error hierarchy. Library code raises these; only ``cli.app.main`` maps them to exit codes."""

from __future__ import annotations


class GpustackError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with; ``hint`` is the fix shown to the user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(GpustackError):
    """Bad input: config file, environment or flags. Nothing was touched."""

    exit_code = 2


class UsageError(ConfigError):
    """Bad command-line usage (unknown stage, conflicting flags)."""


class PreflightError(GpustackError):
    """A preflight check failed on at least one host; nothing was changed."""

    exit_code = 1


class HostKeyError(GpustackError):
    """An SSH host key is unknown or does not match known_hosts."""

    exit_code = 1


class StageError(GpustackError):
    """A stage failed while changing hosts (names the stage and the hosts)."""

    exit_code = 1

    def __init__(self, message: str, *, stage: str, hosts: tuple[str, ...] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.stage = stage
        self.hosts = hosts


class ClusterUnreachableError(GpustackError):
    """The Kubernetes API (or another required endpoint) could not be reached."""

    exit_code = 3


class BusyError(GpustackError):
    """Another gpustack run holds this cluster's lock; nothing was touched."""

    exit_code = 4


class Interrupted(BaseException):
    """The user interrupted the run (Ctrl-C / SIGINT, or SIGTERM).

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` (a retry loop, a
    library) swallows it; unlike KeyboardInterrupt, click does not turn it into "Aborted!" with
    exit 1. The signal handler ``cli.app.main`` installs raises it; the engine raises it when a
    playbook run was cancelled. ``cli.app.main`` maps it to exit code 130.
    """

    exit_code = 130

    def __init__(self, message: str = "interrupted", *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class GpustackWarning(UserWarning):
    """Something the user should know that stops nothing (TLS verification off for a cluster). Library code
    raises it with :func:`warnings.warn`; ``cli.app.run`` prints each distinct one once, as one ``warning:`` line
    on stderr through the console."""
