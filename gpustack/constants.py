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

# --- node labels ------------------------------------------------------------------------------------
#: kubeadm labels every control-plane node with it (node remove's quorum rules, status)
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"

# --- GPU diagnostics and fault quarantine (gpustack diag / gpustack health) -------------------------
#: where `gpustack diag` runs its DCGM Jobs (privileged pod security: DCGM needs the GPUs' devices)
DIAG_NAMESPACE = "gpustack-diag"
#: gpustack's in-cluster components: the scheduled health evaluation and the circuit breaker's ledger
SYSTEM_NAMESPACE = "gpustack-system"
#: label/annotation/taint prefix for what gpustack writes on nodes (a name of its own: it never
#: collides with keys NVIDIA's tools set or clear, see docs/decisions.md)
LABEL_PREFIX = "gpustack.io"
#: the quarantine taint gpustack health puts on a node with a fatal GPU signal
QUARANTINE_TAINT_KEY = f"{LABEL_PREFIX}/gpu-health"
QUARANTINE_TAINT_VALUE = "fatal"
QUARANTINE_TAINT_EFFECT = "NoSchedule"
#: label on a quarantined node (`kubectl get nodes -l gpustack.io/quarantined=true`)
QUARANTINE_LABEL = f"{LABEL_PREFIX}/quarantined"
#: annotations on a quarantined node: who, when, why (JSON list of signals), under which policy version
ANN_QUARANTINED_BY = f"{LABEL_PREFIX}/quarantined-by"
ANN_QUARANTINED_AT = f"{LABEL_PREFIX}/quarantined-at"
ANN_QUARANTINE_REASON = f"{LABEL_PREFIX}/quarantine-reason"
ANN_QUARANTINE_POLICY = f"{LABEL_PREFIX}/quarantine-policy"
#: label on a quarantined node: what it needs (reset, reboot, rma: gpustack/templates/health/xid-policy.yaml), and the
#: node's boot ID at the quarantine (a reboot- or rma-class release needs a new one)
QUARANTINE_ACTION_LABEL = f"{LABEL_PREFIX}/quarantine-action"
ANN_QUARANTINE_BOOT_ID = f"{LABEL_PREFIX}/quarantine-boot-id"
#: set by `node remove`'s drain on a node it cordoned (value: the command), so a failed or interrupted
#: removal uncordons only its own cordon: a node someone else cordoned (a quarantine included) stays so
ANN_DRAIN_CORDONED_BY = f"{LABEL_PREFIX}/cordoned-by"
#: "true" only when gpustack set spec.unschedulable itself (release never uncordons a foreign cordon)
ANN_CORDONED_BY_GPUSTACK = f"{LABEL_PREFIX}/cordoned-by-gpustack"
#: the last release (kept after the quarantine annotations are removed; the evaluator's baseline)
ANN_RELEASED_AT = f"{LABEL_PREFIX}/released-at"
ANN_RELEASED_BY = f"{LABEL_PREFIX}/released-by"
#: the last-XID gauge per GPU at the release (JSON {UUID: code}): those codes no longer count on the node
ANN_RELEASED_LAST_XIDS = f"{LABEL_PREFIX}/released-last-xids"
#: every gpustack quarantine of the node (JSON list of {at, window, limit}, the API server's clock; kept through
#: a release, pruned after a week): the circuit breaker's second record, should its ledger be lost
ANN_QUARANTINE_HISTORY = f"{LABEL_PREFIX}/quarantine-history"
#: the last `gpustack diag` result on a node (JSON: level, result, at, job); release reads it
ANN_DIAG_RESULT = f"{LABEL_PREFIX}/diag-result"
#: the circuit breaker's ledger (a ConfigMap in SYSTEM_NAMESPACE, updated with resourceVersion checks)
BREAKER_CONFIGMAP = "gpustack-health-breaker"
HEALTH_SERVICE_ACCOUNT = "gpustack-health"
HEALTH_CRONJOB = "gpustack-health"
#: field managers of the node patches (visible in managedFields)
HEALTH_FIELD_MANAGER = "gpustack-health"
DIAG_FIELD_MANAGER = "gpustack-diag"

# --- air-gapped bundles -----------------------------------------------------------------------------
#: the port `up --bundle` serves the bundle on (for the run's lifetime); `--bundle-listen` moves it.
#: Fixed, not random: the URLs are part of every stage's inputs, so a new port would re-run them all.
BUNDLE_PORT = 8780
#: the bundle's manifest, at the top of the bundle directory
BUNDLE_MANIFEST = "bundle.json"
