"""Every Secret written again, so that the API server stores it with its current write key.

What kubernetes/website ``tasks/administer-cluster/encrypt-data.md`` does with
``kubectl get secrets --all-namespaces -o json | kubectl replace -f -``: after encryption at rest is turned on (the
Secrets written before are still stored in clear, read through the ``identity`` provider), and in a key rotation
once the new key is first (the Secrets are still stored with the old one, which cannot be dropped before). Each
Secret is replaced unchanged (PUT with the resourceVersion it was read at); one changed or deleted in between
(409, 404) has been written by someone else since, with the current key: counted, not retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from gpustack.runners.kube import Kube, KubeError


@dataclass
class Rewritten:
    rewritten: int = 0
    #: namespace/name of the Secrets changed or deleted by someone else between the read and the write
    raced: list[str] = field(default_factory=list)


def rewrite_secrets(kube: Kube) -> Rewritten:
    result = Rewritten()
    for secret in kube.list_all("/api/v1/secrets"):
        meta = secret.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        body = {**secret, "apiVersion": "v1", "kind": "Secret"}
        try:
            kube.request("PUT", f"/api/v1/namespaces/{quote(ns, safe='')}/secrets/{quote(name, safe='')}", body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                result.raced.append(f"{ns}/{name}")
                continue
            raise KubeError(f"PUT Secret {ns}/{name}: {exc.status} {exc.reason}", status=exc.status) from None
        result.rewritten += 1
    return result
