"""Issue 26: the verdict on a server's answers to GET /version and GET /api (gpustack/runners/kube_proof.py), pure."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpustack.errors import ClusterUnreachableError
from gpustack.runners.kube_proof import (
    KUBERNETES,
    NOT,
    UNPROVEN,
    Answer,
    NotKubernetesAPI,
    Proof,
    Verdict,
    judge_api,
    judge_version,
    probe,
)
from tests.fakes import not_kube

JSON = "application/json"
VERSION = json.dumps(not_kube.VERSION).encode()
API = b'{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"10.0.0.1:6443"}]}'  # fmt: skip
STATUS_503 = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}'  # fmt: skip


def v(status: int, body: bytes, ctype: str = JSON, reason: str = "", truncated: bool = False) -> Answer:
    return Answer("/version", status, reason, ctype, body, truncated)


def a(status: int, body: bytes, ctype: str = JSON, reason: str = "") -> Answer:
    return Answer("/api", status, reason, ctype, body)


def test_a_kube_apiservers_answers_prove_it() -> None:
    assert judge_version(v(200, VERSION)) == Verdict(KUBERNETES, version="v1.36.5")
    assert judge_api(a(200, API)) == Verdict(KUBERNETES)
    # the Content-Type is not what decides: the body is
    assert judge_version(v(200, VERSION, ctype="")) == Verdict(KUBERNETES, version="v1.36.5")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (v(404, b"404 page not found\n", "text/plain; charset=utf-8", "Not Found"), "GET /version answered 404 Not Found"),
        (v(404, b"", "", "Not Found"), "GET /version answered 404 Not Found"),
        (v(200, not_kube.HTML, "text/html"), "GET /version is not JSON (an HTML page)"),
        (v(200, b"<html><body>hi</body></html>", ""), "GET /version is not JSON (an HTML page)"),
        (v(200, b"ok\n", "text/plain"), "GET /version is not JSON (text/plain)"),
        (v(200, b""), "GET /version is not JSON (empty)"),
        (v(200, VERSION, truncated=True), "GET /version is not JSON (over 64 KiB)"),
        (v(200, b"{not json", JSON), "GET /version is not JSON"),
        (v(502, not_kube.BAD_GATEWAY, "text/html", "Bad Gateway"), "GET /version answered 502 Bad Gateway (an HTML page)"),
        (v(503, b"no healthy upstream", "text/plain", "Service Unavailable"), "GET /version answered 503 Service Unavailable"),
        (v(200, b'{"status": "ok"}'), "GET /version has no gitVersion"),
        (v(200, b'{"gitVersion": 136}'), "GET /version has no gitVersion"),
        (v(200, b'["v1.36.5"]'), "GET /version is not a JSON object"),
        (v(302, b"", "text/html", "Found"), "GET /version answered 302 Found"),
    ],
)  # fmt: skip
def test_what_gives_a_version_answer_away(answer: Answer, reason: str) -> None:
    assert judge_version(answer) == Verdict(NOT, reason)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (a(404, b"404 page not found\n", "text/plain", "Not Found"), "GET /api answered 404 Not Found"),
        (a(200, not_kube.HTML, "text/html"), "GET /api is not JSON (an HTML page)"),
        (a(200, b'{"kind": "APIGroupList", "groups": []}'), "GET /api is not an APIVersions list"),
        (a(200, b'{"versions": ["v1"]}'), "GET /api is not an APIVersions list"),
        (a(200, b'{"kind": "APIVersions", "versions": ["v2"]}'), "GET /api does not list v1"),
        (a(200, b'{"kind": "APIVersions", "versions": "v1"}'), "GET /api does not list v1"),
    ],
)  # fmt: skip
def test_what_gives_an_api_answer_away(answer: Answer, reason: str) -> None:
    assert judge_api(answer) == Verdict(NOT, reason)


@pytest.mark.parametrize(
    "answer",
    [
        v(401, json.dumps(not_kube.UNAUTHORIZED).encode(), reason="Unauthorized"),  # a token the server refuses
        v(403, b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}'),
        v(401, b"Unauthorized\n", "text/plain"),  # an authenticating proxy in front: still not "not Kubernetes"
        v(503, STATUS_503, reason="Service Unavailable"),  # the API server's own Status: it is starting
        v(429, b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}'),
    ],
)
def test_refusals_and_the_servers_own_errors_are_kubernetes_unproven(answer: Answer) -> None:
    """401/403 (and a 429/5xx Status) are a Kubernetes API server's answers: the request that follows reports
    the refusal as it always did, instead of calling the server something it is not."""
    assert judge_version(answer).kind == UNPROVEN
    assert judge_api(Answer("/api", answer.status, "", answer.content_type, answer.body)).kind == UNPROVEN


def server(answers: dict[str, Answer], asked: list[str]) -> Callable[[str], Answer]:
    def fetch(path: str) -> Answer:
        asked.append(path)
        return answers[path]

    return fetch


def test_probe_asks_api_only_after_version_proved_kubernetes() -> None:
    asked: list[str] = []
    got = probe(server({"/version": v(200, VERSION), "/api": a(200, API)}, asked))
    assert got == Verdict(KUBERNETES, version="v1.36.5") and asked == ["/version", "/api"]
    asked.clear()
    assert probe(server({"/version": v(404, b"", reason="Not Found")}, asked)).kind == NOT
    assert asked == ["/version"]
    asked.clear()
    got = probe(server({"/version": v(200, VERSION), "/api": a(404, b"", reason="Not Found")}, asked))
    assert got == Verdict(NOT, "GET /api answered 404 Not Found") and asked == ["/version", "/api"]


def test_the_proof_names_the_server_and_exits_3() -> None:
    proof = Proof(Verdict(NOT, "GET /version answered 404 Not Found"))
    with pytest.raises(NotKubernetesAPI) as exc:
        proof.settle("https://10.0.0.1:6443")
    err = exc.value
    assert err.message == "not a Kubernetes API server at https://10.0.0.1:6443: GET /version answered 404 Not Found"
    assert isinstance(err, ClusterUnreachableError) and err.exit_code == 3
    assert err.hint and "kubectl get --raw /version" in err.hint
    assert Proof(Verdict(KUBERNETES, version="v1.36.5")).settle("u") == "v1.36.5"
    assert Proof(Verdict(UNPROVEN, "GET /version answered 401")).settle("u") == ""
    assert Proof().settle("u") == ""  # not asked yet
