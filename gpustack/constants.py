"""Names and numbers gpustack and the cluster agree on: namespaces, Secrets, Services, ports,
field managers. One module, so a renamed Secret or a moved port changes in one place.

Version pins are not here: they live in :mod:`gpustack.config.pins`.
"""

from __future__ import annotations

# --- namespaces -------------------------------------------------------------------------------------
MONITORING_NAMESPACE = "monitoring"
GPU_NAMESPACE = "gpu-operator"
FLANNEL_NAMESPACE = "kube-flannel"
#: where verify starts its short-lived test pods (deleted afterwards)
VERIFY_NAMESPACE = "gpustack-verify"

# --- Helm releases ----------------------------------------------------------------------------------
#: install order: the release owning the monitoring CRDs first
RELEASE_ORDER = ("kube-prometheus-stack", "gpu-operator", "dcgm-exporter")
#: release -> namespace
NAMESPACES: dict[str, str] = {
    "kube-prometheus-stack": MONITORING_NAMESPACE,
    "gpu-operator": GPU_NAMESPACE,
    "dcgm-exporter": GPU_NAMESPACE,
}

# --- Secrets (created by gpustack, never written to disk outside the state directory) ---------------
GRAFANA_ADMIN_SECRET = "gpustack-grafana-admin"
ALERTMANAGER_SECRET = "gpustack-alertmanager"
ALERTMANAGER_SECRET_DIR = f"/etc/alertmanager/secrets/{ALERTMANAGER_SECRET}"

# --- storage ----------------------------------------------------------------------------------------
#: Default Prometheus storage on a cluster with no StorageClass: a local PersistentVolume on the
#: control-plane node, made by gpustack (see gpustack.render.manifests.local_storage).
LOCAL_STORAGE_CLASS = "gpustack-local"
LOCAL_STORAGE_PATH = "/var/lib/gpustack/prometheus"

# --- Services and ports -----------------------------------------------------------------------------
NODE_EXPORTER_PORT = 9100
#: the cluster's node-exporter moves here when a host node_exporter already holds 9100
NODE_EXPORTER_ALT_PORT = 9101
PROMETHEUS_SERVICE = "kube-prometheus-stack-prometheus"
PROMETHEUS_PORT = "http-web"  # kube-prometheus-stack prometheus.prometheusSpec.portName default
GRAFANA_SERVICE = "kube-prometheus-stack-grafana"
GRAFANA_PORT = "http-web"  # kube-prometheus-stack values: grafana.service.portName

# --- server-side apply field managers ---------------------------------------------------------------
FIELD_MANAGER = "gpustack"
#: doctor --fix patches under its own name, so `kubectl get -o yaml --show-managed-fields` tells them apart
DOCTOR_FIELD_MANAGER = "gpustack-doctor"

# --- air-gapped bundles -----------------------------------------------------------------------------
#: the port `up --bundle` serves the bundle on (for the run's lifetime); `--bundle-listen` moves it.
#: Fixed, not random: the URLs are part of every stage's inputs, so a new port would re-run them all.
BUNDLE_PORT = 8780
#: the bundle's manifest, at the top of the bundle directory
BUNDLE_MANIFEST = "bundle.json"
