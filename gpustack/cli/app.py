"""The root Typer app, the list of commands, and ``main()``: the one place errors become exit codes.

Each command lives in its own module (``gpustack/cli/<command>.py``) and knows nothing of ``app``;
it is registered here with one line. Shared option types and helpers are in ``gpustack.cli.options``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import warnings
from types import FrameType
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gpustack import __version__
from gpustack.cli import (
    bundle,
    certs,
    doctor,
    etcd,
    grafana_password,
    init,
    node,
    plan,
    render,
    reset,
    secrets,
    security,
    status,
    up,
    upgrade,
    verify,
    version,
)
from gpustack.cli import diag as diag_cmd
from gpustack.cli import health as health_cmd
from gpustack.cli import report as report_cmd
from gpustack.console import Console
from gpustack.errors import GpustackError, GpustackWarning, Interrupted, UsageError


def _help_as_users_read_it() -> None:
    """Two things of Typer's help text that the CLI's rules (docs/commands.md, "Rules every command
    keeps") do not allow: an argument's Python type beside its name (``NODE <str>``, ``FILE <path>``:
    a user reads the metavar alone, as for options), and words broken at a hyphen or in the middle
    when a line wraps (``node-`` / ``remove``, ``control-`` / ``plane``: stage ids and flags are copied
    from the help). Both are switched off here, once, for the help of every command."""
    import importlib

    from typer.core import TyperArgument

    if hasattr(TyperArgument, "display_type_rich"):
        TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]
    for name in ("typer._click._textwrap", "click._textwrap"):
        try:
            module: Any = importlib.import_module(name)
        except ImportError:
            continue
        base = module.TextWrapper
        if getattr(base, "keeps_words_whole", False):
            break

        class WholeWords(base):  # type: ignore[misc,valid-type]
            keeps_words_whole = True

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **{**kwargs, "break_on_hyphens": False, "break_long_words": False})

        module.TextWrapper = WholeWords
        break
    # a required argument in the usage line as a user reads it: `NODE...`, not Typer's `{NODE}...`
    if hasattr(TyperArgument, "_usage_display_name"):

        def usage_name(self: Any) -> str:
            name = self.metavar or self.name.upper()
            return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")

        TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign]


_help_as_users_read_it()


#: The commands in the order a user needs them (`gpustack --help`): set up, prove, operate, then the rest.
ORDER = (
    "init", "plan", "up", "verify", "doctor", "status", "node", "upgrade", "certs", "secrets", "security", "etcd", "reset", "diag", "health", "report",
    "bundle", "render", "version", "grafana-password",
)  # fmt: skip


class _InOrder(TyperGroup):
    """Typer lists commands before groups, each in registration order; gpustack lists them in ORDER."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(super().list_commands(ctx))
        return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))


app = typer.Typer(
    name="gpustack",
    help="Fresh Ubuntu/Debian GPU servers -> a monitored Kubernetes GPU cluster, proven to work.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion / --show-completion (bash, zsh, fish), for the `gpustack` executable
    add_completion=True,
    # click's plain help: it never cuts an option's name and wraps at any terminal width (rich's
    # help boxes cut `--accept-new-host…` at 80 columns)
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=_InOrder,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpustack {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", is_eager=True, callback=_print_version, help="print gpustack's version and exit"
        ),
    ] = False,
) -> None:
    """Fresh Ubuntu/Debian GPU servers -> a monitored Kubernetes GPU cluster, proven to work."""


# The commands: one line each, with the line `gpustack --help` shows for it (at most 56 characters: the
# longest name, grafana-password, leaves that much at 80 columns) and its examples.
app.command("init", short_help="Write a commented example gpustack.yaml", epilog=init.EXAMPLES)(init.init)
app.command("plan", short_help="The stages a command would run; touches nothing", epilog=plan.EXAMPLES)(plan.plan)
app.command("up", short_help="Build or converge the cluster, then verify it", epilog=up.EXAMPLES)(up.up)
app.command("verify", short_help="Prove every layer works, end to end", epilog=verify.EXAMPLES)(verify.verify)
app.command("doctor", short_help="Find known failures and say how to fix each", epilog=doctor.EXAMPLES)(doctor.doctor)
app.command("status", short_help="Nodes, Helm releases, the last run (read-only)", epilog=status.EXAMPLES)(
    status.status
)
app.add_typer(node.node_app, name="node", short_help="Add nodes to, or remove them from, the cluster")
app.command("upgrade", short_help="Kubernetes one minor up, or the Helm components", epilog=upgrade.EXAMPLES)(
    upgrade.upgrade
)
app.add_typer(certs.certs_app, name="certs", short_help="Renew the control planes' kubeadm certificates")
app.add_typer(secrets.secrets_app, name="secrets", short_help="Rotate the Secret encryption key")
app.add_typer(security.security_app, name="security", short_help="Bring changed security: settings to the cluster")
app.add_typer(etcd.etcd_app, name="etcd", short_help="etcd snapshots: take one now, restore one")
app.command("reset", short_help="Tear the cluster (or some nodes) down", epilog=reset.EXAMPLES)(reset.reset)
app.command("diag", short_help="NVIDIA DCGM diagnostics on the GPU nodes", epilog=diag_cmd.EXAMPLES)(diag_cmd.diag)
app.add_typer(health_cmd.health_app, name="health", short_help="GPU fault quarantine by NVIDIA's XID catalogue")
app.command("report", short_help="GPU-hours allocated, used and idle; cost, capacity", epilog=report_cmd.EXAMPLES)(
    report_cmd.report
)
app.add_typer(bundle.bundle_app, name="bundle", short_help="Everything a run needs, for air-gapped sites")
app.command("render", short_help="Write every generated file, for review or GitOps", epilog=render.EXAMPLES)(
    render.render
)
app.command("version", short_help="Versions, pins, compatibility matrix, checksums", epilog=version.EXAMPLES)(
    version.version
)
app.command("grafana-password", short_help="Print Grafana's admin password, alone on stdout",
            epilog=grafana_password.EXAMPLES)(grafana_password.grafana_password)  # fmt: skip


#: the shells `--show-completion SHELL` and `--install-completion SHELL` know (Typer's completion scripts)
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _completion(flag: str, shell: str) -> int:
    """``gpustack --show-completion zsh``: the script for the shell named, not the one this process runs
    under (Typer's flags take no value and detect the shell; a name after them was ignored)."""
    from typer import _completion_shared as shared

    if shell not in SHELLS:
        raise UsageError(f"{flag} {shell}: not a shell gpustack completes", hint=f"one of {', '.join(SHELLS)}")
    if flag == "--show-completion":
        typer.echo(shared.get_completion_script(prog_name="gpustack", complete_var="_GPUSTACK_COMPLETE", shell=shell))
        return 0
    _, path = shared.install(shell=shell, prog_name="gpustack", complete_var="_GPUSTACK_COMPLETE")
    Console().print(f"{shell} completion installed in {path}; it takes effect in a new shell", markup=False)
    return 0


def _completion_help() -> None:
    """The help of Typer's completion flags says that they take a shell's name."""
    from typer import completion

    helps = {
        "--show-completion": "print the shell completion script (add SHELL: bash, zsh, fish; default: this shell's)",
        "--install-completion": "install shell completion (add SHELL: bash, zsh, fish; default: this shell's)",
    }
    for info in getattr(completion._install_completion_placeholder_function, "__defaults__", None) or ():
        for decl in getattr(info, "param_decls", ()):
            if decl in helps:
                info.help = helps[decl]


_completion_help()


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}")


def _click_exceptions() -> Any:
    """click's exceptions: Typer ships its own click from 0.20 on (typer._click), older Typers use click."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - Typer < 0.20
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


#: confusions people make, explained with the did-you-mean of an unknown option
KNOWN_CONFUSIONS = {"-o": "-o is --output (a format: table, json ...) wherever a command has one"}


def did_you_mean(option: str, known: list[str], possibilities: list[str] | None = None) -> str | None:
    """What an unknown option may have meant: click's close matches, else the one long option the
    letter of a short option begins (``render -o`` -> ``--out``)."""
    guesses = sorted(possibilities or [])
    if not guesses and len(option) == 2 and option[0] == "-" and option[1] != "-":
        longs = [o for o in known if o.startswith(f"--{option[1]}") and not o.startswith("--no-")]
        guesses = longs if len(longs) == 1 else []
    return " or ".join(guesses) or None


def _usage_error(exc: Any) -> int:
    """A click usage error (unknown option, bad value, missing option) said the gpustack way: one
    message naming the flag (with a did-you-mean), and a hint: a known confusion, where the help is."""
    x = _click_exceptions()
    ctx = exc.ctx
    hints: list[str] = []
    message = exc.format_message().rstrip(".")
    if isinstance(exc, x.NoSuchOption):
        message = exc.message
        known = [o for prm in ctx.command.params for o in (*prm.opts, *prm.secondary_opts)] if ctx else []
        guess = did_you_mean(exc.option_name, known, getattr(exc, "possibilities", None))
        message += f" (did you mean {guess}?)" if guess else ""
        if exc.option_name in KNOWN_CONFUSIONS:
            hints.append(KNOWN_CONFUSIONS[exc.option_name])
    if ctx is not None:
        hints.append(f"see `{ctx.command_path} --help`")
    Console().error(message, "; ".join(hints) or None)
    return 2


def _os_error(exc: OSError) -> int:
    """An OS error nothing else said: one line naming the file (or the output) and the reason."""
    try:
        sys.stdout.flush()
        broken = exc.filename is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
    except (OSError, ValueError):
        broken = True  # stdout itself cannot be written: a full disk, a terminal gone
    if broken:
        _quiet_stdout()
    what = "cannot write the output (standard output)" if broken else str(exc.filename or "error")
    with contextlib.suppress(OSError):
        Console().error(f"{what}: {exc.strerror or exc}")
    return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered for a full disk or a closed pipe is
    not written again (and reported again) when Python exits."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _require_cwd() -> None:
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError(
            "the current directory no longer exists (deleted or moved while this shell was in it)",
            hint="cd to a directory that exists and run the command again",
        ) from None


def run(argv: list[str] | None = None) -> int:
    """The command line, run: its exit code. Every error becomes one message and its code here
    (docs/commands.md, "Rules every command keeps"): usage errors 2, GpustackError its own, an
    interruption 130, an OS error nothing else caught (a full disk under stdout) 1."""
    x = _click_exceptions()
    try:
        _require_cwd()
        args = sys.argv[1:] if argv is None else argv
        if args[:1] in (["--show-completion"], ["--install-completion"]) and len(args) == 2:
            return _completion(args[0], args[1])
        with warnings.catch_warnings():
            _one_line_warnings()
            code = app(args=argv, prog_name="gpustack", standalone_mode=False)
        sys.stdout.flush()
        return code if isinstance(code, int) and not isinstance(code, bool) else 0
    except x.NoArgsIsHelpError as exc:
        exc.show()
        return 2
    except x.UsageError as exc:
        return _usage_error(exc)
    except typer.Abort:
        Console().error("aborted: nothing was changed")
        return 1
    except GpustackError as exc:
        Console().error(exc.message, exc.hint)
        return exc.exit_code
    except Interrupted as exc:
        Console().error(exc.message, exc.hint or "run the command again: every stage is idempotent and resumes safely")
        return Interrupted.exit_code
    except OSError as exc:
        if exc.errno == errno.EPIPE:  # the reader went away (`gpustack version | head -1`)
            _quiet_stdout()
            return 141
        return _os_error(exc)
    except Exception as exc:
        if not _is_api_answer(exc):
            raise
        # an answer no caller expected, from a proven (or refusing) Kubernetes API server: a server that is not one
        # is NotKubernetesAPI (exit 3) before any request
        status = exc.status  # type: ignore[attr-defined]
        Console().error(
            f"the Kubernetes API answered HTTP {status} {exc.reason or ''}".rstrip(),  # type: ignore[attr-defined]
            hint=API_ANSWER_HINTS.get(
                status, "check the API server's health (kubectl get --raw /readyz) and the kubeconfig"
            ),
        )
        return 1


#: urllib3's InsecureRequestWarning, which urllib3 shows on every request ("always"); gpustack says once that TLS
#: verification is off for the cluster instead (runners/kubeconfig.py, a GpustackWarning)
UNVERIFIED_REQUEST = r"Unverified HTTPS request"


def _one_line_warnings() -> None:
    """Python warnings while a command runs: urllib3's per-request TLS warning dropped (gpustack's own says it
    once), every other warning once, as one ``warning:`` line on stderr, never a library's source line."""
    warnings.simplefilter("default")
    for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):  # Python's own
        warnings.filterwarnings("ignore", category=quiet)  # defaults, whatever filters the caller (a test) had
    warnings.filterwarnings("ignore", message=UNVERIFIED_REQUEST)

    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        text = " ".join(str(message).split())
        Console().warn(text if issubclass(category, GpustackWarning) else f"{category.__name__}: {text}", stderr=True)

    warnings.showwarning = show


#: what an API server's refusal nobody expected means
API_ANSWER_HINTS = {
    401: "the API server refused the kubeconfig's credentials (expired or wrong): renew them; kubectl auth whoami",
    403: "the kubeconfig's user is not allowed this: kubectl auth can-i --list shows what it may do",
}


def _is_api_answer(exc: BaseException) -> bool:
    """A kubernetes client ApiException (the client is imported only by the commands that use it)."""
    api = getattr(sys.modules.get("kubernetes.client.exceptions"), "ApiException", None)
    return api is not None and isinstance(exc, api)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit with its code. Ctrl-C and SIGTERM raise :class:`Interrupted` (click
    would turn a KeyboardInterrupt into "Aborted!" and exit 1): exit 130 with what was interrupted
    and how to resume."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_interrupted)
    _own_bin_on_path()
    sys.exit(run(argv))


def _own_bin_on_path() -> None:
    """The venv's bin directory first on PATH, as the launcher puts it: `gpustack` run through its
    link in ~/.local/bin finds the tools installed beside it (ansible-playbook, ansible-galaxy)."""
    own = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", os.defpath)
    if own and own not in path.split(os.pathsep):
        os.environ["PATH"] = f"{own}{os.pathsep}{path}"
