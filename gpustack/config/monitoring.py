"""The configuration's monitoring, alerting and remediation sections (``monitoring:``, ``alerting:``,
``remediation:`` in gpustack.yaml); :class:`gpustack.config.model.Config` holds them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpustack.config.fields import DURATION_FORM, DURATION_RE, K8S_NAME_RE, LABEL_KEY_RE, StrictModel, url_problem

RECEIVER_NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class PrometheusStorage(StrictModel):
    """Prometheus' TSDB volume. kubeadm clusters have no default StorageClass: name one, or opt into emptyDir."""

    size: str = "50Gi"
    storage_class: str | None = Field(default=None, description="StorageClass of the PersistentVolumeClaim")
    ephemeral: bool = Field(default=False, description="emptyDir: metrics are lost when the Prometheus pod moves")

    @field_validator("storage_class")
    @classmethod
    def _storage_class(cls, v: str | None) -> str | None:
        if v is not None and not K8S_NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a StorageClass name (lower-case letters, digits, '-', '.')")
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not re.match(r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|K|M|G|T|P)?$", v):
            raise ValueError(f"{v!r} is not a volume size: a number and a unit with no space, e.g. 50Gi, 500Mi, 1Ti")
        return v


class _Receiver(StrictModel):
    name: str = Field(pattern=RECEIVER_NAME_RE, description="receiver name, used in alerting.routes")


def _one_source(obj: BaseModel, stem: str) -> None:
    file_, env = getattr(obj, f"{stem}_file"), getattr(obj, f"{stem}_env")
    if (file_ is None) == (env is None):
        raise ValueError(f"set exactly one of {stem}_file or {stem}_env (secrets never go in gpustack.yaml)")


class WebhookReceiver(_Receiver):
    type: Literal["webhook"]
    url: str = Field(description="endpoint Alertmanager POSTs alerts to")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class SlackReceiver(_Receiver):
    type: Literal["slack"]
    api_url_file: Path | None = None
    api_url_env: str | None = None
    channel: str

    @model_validator(mode="after")
    def _source(self) -> SlackReceiver:
        _one_source(self, "api_url")
        return self


class PagerDutyReceiver(_Receiver):
    type: Literal["pagerduty"]
    routing_key_file: Path | None = None
    routing_key_env: str | None = None

    @model_validator(mode="after")
    def _source(self) -> PagerDutyReceiver:
        _one_source(self, "routing_key")
        return self


class EmailReceiver(_Receiver):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["email"]
    to: str
    from_: str = Field(alias="from")
    smarthost: str = Field(description="host:port of the SMTP server")
    auth_username: str | None = None
    auth_password_file: Path | None = None
    auth_password_env: str | None = None
    require_tls: bool = True

    @field_validator("to", "from_")
    @classmethod
    def _address(cls, v: str) -> str:
        if not re.fullmatch(r"[^@\s,;<>]+@[^@\s,;<>]+", v):
            raise ValueError(f"{v!r} is not an e-mail address (one address, name@domain)")
        return v

    @field_validator("smarthost")
    @classmethod
    def _smarthost(cls, v: str) -> str:
        if not re.match(r"^[^:\s]+:[0-9]{1,5}$", v) or not 0 < int(v.rsplit(":", 1)[1]) < 65536:
            raise ValueError(f"{v!r} is not host:port of an SMTP server, e.g. smtp.example.com:587")
        return v

    @model_validator(mode="after")
    def _source(self) -> EmailReceiver:
        if self.auth_username is not None:
            _one_source(self, "auth_password")
        elif self.auth_password_file is not None or self.auth_password_env is not None:
            raise ValueError("auth_password_file/auth_password_env need auth_username")
        return self


Receiver = Annotated[WebhookReceiver | SlackReceiver | PagerDutyReceiver | EmailReceiver, Field(discriminator="type")]


class AlertRoutes(StrictModel):
    """Severity -> receiver names. An empty list leaves those alerts in Alertmanager only (null receiver)."""

    critical: list[str] = Field(default_factory=list)
    warning: list[str] = Field(default_factory=list)
    info: list[str] = Field(default_factory=list)

    @field_validator("critical", "warning", "info", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v


class Alerting(StrictModel):
    """Where Alertmanager sends gpustack's alerts. No receivers: alerts stay visible in Alertmanager."""

    receivers: list[Receiver] = Field(default_factory=list)
    routes: AlertRoutes = AlertRoutes()


#: the scrape intervals gpustack accepts (seconds; see Monitoring._scrape_bounds)
SCRAPE_MIN_S, SCRAPE_MAX_S = 1, 60


class Monitoring(StrictModel):
    # Not exposed outside the cluster unless asked (null: ClusterIP); a NodePort set here is reachable
    # from the nodes and firewall.admin_cidrs only (gpustack's firewall, docs/configuration.md)
    prometheus_nodeport: Annotated[int, Field(ge=30000, le=32767)] | None = None
    grafana_nodeport: Annotated[int, Field(ge=30000, le=32767)] | None = None
    alertmanager_nodeport: Annotated[int, Field(ge=30000, le=32767)] | None = None
    grafana_admin_user: str = Field(default="admin", min_length=1)
    prometheus_retention: str = "15d"
    prometheus_storage: PrometheusStorage = PrometheusStorage()
    scrape_interval: str = "15s"
    dashboard_gnet_download: bool = Field(
        default=False, description="also let Grafana download dashboard 12239 from grafana.com (needs egress)"
    )
    team_label: str = Field(
        default="team",
        description="the namespace label naming its team: exported by kube-state-metrics, read by `report --by team`",
    )

    @field_validator("prometheus_retention", "scrape_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not re.match(DURATION_RE, v):
            raise ValueError(f"{v!r} is not a duration: use {DURATION_FORM}")
        return v

    @field_validator("scrape_interval")
    @classmethod
    def _scrape_bounds(cls, v: str) -> str:
        """1 s to 1 m: the usage recording rules average each GPU's activity over ``[1m]`` windows
        (gpu-usage.rules.yaml), which a longer interval leaves empty between scrapes (Prometheus 3's windows exclude
        their start); dashboards follow the interval through Grafana's ``$__rate_interval`` (docs/decisions.md)."""
        seconds = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
        unit = v.lstrip("0123456789")
        value = int(v[: len(v) - len(unit)]) * seconds[unit]
        if not SCRAPE_MIN_S <= value <= SCRAPE_MAX_S:
            raise ValueError(f"{v!r} is outside 1s-1m: the usage rules' [1m] windows need a sample every minute")
        return v

    @field_validator("team_label")
    @classmethod
    def _label_key(cls, v: str) -> str:
        if len(v) > 253 + 1 + 63 or not LABEL_KEY_RE.match(v):
            raise ValueError(f"{v!r} is not a Kubernetes label key: use e.g. team or example.com/team")
        return v

    @property
    def nodeports(self) -> list[int]:
        return [p for p in (self.prometheus_nodeport, self.grafana_nodeport, self.alertmanager_nodeport) if p]


WINDOW_RE = r"^[1-9][0-9]*(s|m|h|d)$"
WINDOW_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CRON_RE = r"^\S+( \S+){4}$"


def window_seconds(value: str) -> int:
    """``15m`` -> 900 (a remediation window: s, m, h or d)."""
    return int(value[:-1]) * WINDOW_SECONDS[value[-1]]


class Remediation(StrictModel):
    """GPU fault quarantine (`gpustack health`), scheduled in the cluster. Off until enabled."""

    enabled: bool = Field(default=False, description="run `gpustack health --apply` on `schedule` in the cluster")
    schedule: str = Field(default="*/5 * * * *", description="the CronJob's schedule (five cron fields)")
    image: str | None = Field(
        default=None, description="a container image with gpustack installed (required when enabled: none is published)"
    )
    max_nodes_per_window: Annotated[int, Field(ge=0, le=10000)] = 2
    max_percent_per_window: Annotated[float, Field(gt=0, le=100)] = 10.0
    window: str = Field(default="1h", description="the circuit breaker's window")
    xid_lookback: str = Field(default="15m", description="how long a fatal XID counts")
    rows_growth_window: str = Field(default="1h", description="growth of uncorrectable remapped rows over this window")
    allocatable_hold: str = Field(default="10m", description="allocatable GPUs below capacity for at least this long")

    @field_validator("window", "xid_lookback", "rows_growth_window", "allocatable_hold")
    @classmethod
    def _window(cls, v: str) -> str:
        if not re.match(WINDOW_RE, v):
            raise ValueError(f"{v!r} is not a window: use a number and s, m, h or d, e.g. 15m, 1h")
        return v

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        if not re.match(CRON_RE, v.strip()):
            raise ValueError(f"{v!r} is not a cron schedule: five fields, e.g. '*/5 * * * *'")
        return v.strip()

    @model_validator(mode="after")
    def _image_when_enabled(self) -> Remediation:
        if self.enabled and not self.image:
            raise ValueError(
                "remediation.enabled needs remediation.image: a container image with gpustack installed "
                "(gpustack publishes none; see docs/operations.md)"
            )
        return self
