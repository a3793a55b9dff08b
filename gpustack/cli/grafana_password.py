"""``gpustack grafana-password``: print Grafana's admin password, found the way ``doctor`` finds it."""

from __future__ import annotations

from gpustack.cli.options import ConfigOpt, ContextOpt, KubeconfigOpt, console_for, examples, load_config

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack grafana-password | xclip -selection clipboard",
)

HINT = (
    "for gpustack's own cluster run `gpustack up` first; for another cluster pass --kubeconfig FILE "
    "(and --context NAME) of a cluster whose Grafana reads GF_SECURITY_ADMIN_PASSWORD from a Secret"
)


def grafana_password(config: ConfigOpt = None, kubeconfig: KubeconfigOpt = None, context: ContextOpt = None) -> None:
    """Print the Grafana admin password, and nothing else, on stdout.

    gpustack's own cluster: the password `gpustack up` generated (kept 0600 in the state directory). Another
    cluster (--kubeconfig, $KUBECONFIG, ~/.kube/config), or no state file: the Secret that Grafana's Deployment
    reads GF_SECURITY_ADMIN_PASSWORD from, as `gpustack doctor` finds it. Exit 2 when there is no password to
    find (no state file and no kubeconfig, or a cluster without one), 3 when a cluster was asked and did not answer."""
    from gpustack.diagnose.collect_grafana import CredentialError, cluster_credentials, state_credentials
    from gpustack.errors import ConfigError
    from gpustack.paths import grafana_password_path
    from gpustack.runners.kubeconfig import QUICK_TIMEOUT, KubeconfigNotFound, connect, resolve_kubeconfig

    cfg = load_config(config).config
    try:
        target = resolve_kubeconfig(kubeconfig=kubeconfig, context=context, cluster_name=cfg.cluster.name)
        no_kubeconfig = ""
    except KubeconfigNotFound as exc:
        target, no_kubeconfig = None, exc.message
    try:
        found = state_credentials(cfg, own=target is None or target.own)
        if found is None:
            if target is None:  # nothing to ask: not found (2), not "unreachable" (3, nothing was tried)
                raise ConfigError(
                    f"no Grafana password: no state file {grafana_password_path(cfg.cluster.name)}, and {no_kubeconfig}",
                    hint=HINT,
                )
            kube = connect(target, request_timeout=QUICK_TIMEOUT)
            found = cluster_credentials(kube, cfg.monitoring.grafana_admin_user)
    except CredentialError as exc:
        where = f" (cluster {target.describe()})" if target is not None else ""
        raise ConfigError(f"no Grafana password{where}: {exc.detail}", hint=HINT) from None
    console_for().out.print(found.password, markup=False, highlight=False, emoji=False, soft_wrap=True)
