"""Issue 31: a proxy's password is never in clear in a rendered file or a file gpustack writes on a host.

``render --out`` (under ``umask 000``, so a file that held it would be world-readable) shows it redacted in every
file; on the hosts it lands only in files of mode 0600: the systemd drop-ins of containerd and the kubelet and
apt's auth.conf.d entry and the environment files of containerd and the kubelet, which their 0644 systemd drop-ins
name (an ``Environment=`` line would be shown to every local user by ``systemctl show``), while apt.conf.d's proxy
file, which every user's apt reads, holds the URLs without it.
The host templates are rendered here with the run's own extra vars, as Ansible renders them."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from gpustack.config.model import Config
from gpustack.render.ansible import REDACTED, extravars, proxy_apt, split_credentials, without_passwords

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "roles"
PASSWORD = "s3cr%40t-9"  # percent-encoded "@" in the URL: the host gets it decoded
DECODED = "s3cr@t-9"
HTTP = f"http://alice:{PASSWORD}@proxy.example:3128"
HTTPS = f"http://bob:{PASSWORD}x@proxy.example:3129"
CONFIG = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n  - {name: w1, address: 192.0.2.11}\n"


def leaks(text: str) -> bool:
    """The password in any form: as written, decoded, or escaped for systemd (``%`` doubled)."""
    return "s3cr" in text


def test_render_out_never_writes_the_password_under_any_umask(tmp_path: Path) -> None:
    (tmp_path / "gpustack.yaml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    env.update(HOME=str(tmp_path), GPUSTACK_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(REPO),
               GPUSTACK_PROXY__HTTP=HTTP, GPUSTACK_PROXY__HTTPS=HTTPS)  # fmt: skip
    r = subprocess.run(["sh", "-c", f'umask 000 && exec "{sys.executable}" -m gpustack render --out r'], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert not leaks(r.stdout + r.stderr)
    files = [p for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert len(files) > 5
    for path in files:
        assert not leaks(path.read_text(encoding="utf-8")), f"the proxy password is in {path}"
    extravars_yaml = yaml.safe_load((tmp_path / "r/ansible/extravars.yaml").read_text())
    assert extravars_yaml["gpustack_proxy_env"]["HTTP_PROXY"] == f"http://alice:{REDACTED}@proxy.example:3128"
    assert extravars_yaml["gpustack_proxy_apt"]["auth"][0] == {
        "machine": "http://proxy.example:3128", "login": "alice", "password": REDACTED}  # fmt: skip
    effective = (tmp_path / "r/config/effective-config.json").read_text()
    assert f"alice:{REDACTED}@proxy.example:3128" in effective
    # the files the run writes into its own directory are private (tests/unit/test_private_files.py); these are
    # for the user, with the umask's mode, and hold nothing secret
    assert stat.S_IMODE((tmp_path / "r/config/effective-config.json").stat().st_mode) == 0o666


def test_credentials_split_and_url_passwords_redacted() -> None:
    assert split_credentials(HTTP) == ("http://proxy.example:3128", "alice", DECODED)
    assert split_credentials("http://proxy.example:3128") == ("http://proxy.example:3128", "", "")
    assert split_credentials("") == ("", "", "")
    assert without_passwords(f"a {HTTP} b 'https://u:p@h/x' c http://h:80/") == (
        f"a http://alice:{REDACTED}@proxy.example:3128 b 'https://u:{REDACTED}@h/x' c http://h:80/"
    )


def _config(**proxy: str) -> Config:
    return Config.model_validate({"nodes": [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}],
                                  "proxy": proxy})  # fmt: skip


def test_apt_credentials_per_proxy() -> None:
    apt = proxy_apt(_config(http=HTTP, https=HTTPS))
    assert (apt["http"], apt["https"]) == ("http://proxy.example:3128", "http://proxy.example:3129")
    assert apt["auth"] == [
        {"machine": "http://proxy.example:3128", "login": "alice", "password": DECODED},
        {"machine": "http://proxy.example:3129", "login": "bob", "password": DECODED + "x"},
    ]
    assert proxy_apt(_config(http="http://proxy.example:3128"))["auth"] == []


def _template_tasks() -> list[tuple[Path, dict[str, Any]]]:
    """Every ``ansible.builtin.template`` task of the roles that writes proxy settings: (role dir, its args)."""
    out = []
    for tasks in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(tasks.read_text()) or []:
            args = task.get("ansible.builtin.template") if isinstance(task, dict) else None
            if args and "proxy" in str(args.get("src", "")):
                out.append((tasks.parents[1], args))
    return out


def _role_defaults() -> dict[str, Any]:
    """The roles' defaults that are plain paths (what the proxy templates name), as Ansible passes them."""
    out: dict[str, Any] = {}
    for defaults in ROLES.glob("*/defaults/main.yml"):
        out.update({k: v for k, v in (yaml.safe_load(defaults.read_text()) or {}).items() if "{{" not in str(v)})
    return out


def test_the_host_files_that_hold_the_password_are_0600() -> None:
    cfg = _config(http=HTTP, https=HTTPS)
    ev = {**_role_defaults(), **extravars(cfg, kubeconfig_dest=Path("/tmp/admin.conf"))}
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    tasks = _template_tasks()
    srcs = {args["src"] for _, args in tasks}
    assert {"apt-proxy.conf.j2", "apt-proxy-auth.conf.j2", "http-proxy.conf.j2", "http-proxy.env.j2"} <= srcs, srcs
    holding = []
    for role, args in tasks:
        text = env.from_string((role / "templates" / args["src"]).read_text()).render(
            **ev, ansible_managed="managed", os_prep_proxy_direct_hosts=[]
        )
        if leaks(text):
            holding.append((role.name, args["src"]))
            assert str(args.get("mode")) == "0600", (
                f"{role.name}/{args['src']} holds the password with mode {args.get('mode')}"
            )
        elif args["src"] == "apt-proxy.conf.j2":
            assert 'Acquire::http::Proxy "http://proxy.example:3128";' in text, text
            assert str(args.get("mode")) == "0644"  # every user's apt reads apt.conf.d
        elif args["src"] == "http-proxy.conf.j2":  # the unit drop-in names the 0600 file, holds no URL
            directives = [line for line in text.splitlines() if line and not line.startswith("#")]
            assert directives[0] == "[Service]" and len(directives) == 2, text
            assert directives[1].startswith("EnvironmentFile=/etc/systemd/system/") and directives[1].endswith(".env")
    assert sorted(holding) == [("containerd", "http-proxy.env.j2"), ("kubernetes_packages", "http-proxy.env.j2"),
                               ("os_prep", "apt-proxy-auth.conf.j2")], holding  # fmt: skip


def test_the_environment_files_parse_as_systemd_reads_them() -> None:
    """systemd's EnvironmentFile= syntax (systemd.exec(5), "EnvironmentFile="; src/basic/env-file.c): single
    quotes keep everything literal (``%``, ``$``, a backslash); a quote in a URL is percent-encoded, which is
    the same URL to a client."""
    url = "http://a'b:p%40$x\\y@proxy.example:3128"
    ev = {**_role_defaults(), **extravars(_config(http=url), kubeconfig_dest=Path("/tmp/admin.conf"))}
    text = jinja2.Template((ROLES / "containerd/templates/http-proxy.env.j2").read_text()).render(
        **ev, ansible_managed="managed"
    )
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines and all(line.count("'") == 2 and line.endswith("'") for line in lines), lines
    values = dict(line.split("=", 1) for line in lines)
    assert values["HTTP_PROXY"] == "'" + url.replace("'", "%27") + "'", values


def test_the_environment_file_tasks_hide_their_diff() -> None:
    """Ansible prints a changed template's diff with --diff: the tasks that write the password hide it."""
    seen = 0
    for tasks_file in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(tasks_file.read_text()) or []:
            args = task.get("ansible.builtin.template") if isinstance(task, dict) else None
            if args and args.get("src") == "http-proxy.env.j2":
                assert task.get("no_log") is True, f"{tasks_file}: {task.get('name')}"
                seen += 1
    assert seen == 2  # containerd's and the kubelet's


def test_apt_auth_file_is_removed_by_reset_and_probed() -> None:
    auth = yaml.safe_load((ROLES / "os_prep/defaults/main.yml").read_text())["os_prep_apt_proxy_auth_file"]
    assert auth.startswith("/etc/apt/auth.conf.d/") and auth.endswith(".conf")
    assert auth in yaml.safe_load((ROLES / "reset/defaults/main.yml").read_text())["reset_purge_files"]
    probes = yaml.safe_load((REPO / "playbooks/group_vars/all/stage_probes.yml").read_text())
    assert auth in probes["gpustack_stage_probes"]["os"]["files"]


@pytest.mark.parametrize("url", [HTTP, "http://proxy.example:3128"])
def test_apt_auth_entry_format(url: str) -> None:
    ev = extravars(_config(http=url), kubeconfig_dest=Path("/tmp/admin.conf"))
    text = jinja2.Template((ROLES / "os_prep/templates/apt-proxy-auth.conf.j2").read_text()).render(
        **ev, ansible_managed="managed"
    )
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    if url == HTTP:
        assert lines == [f"machine http://proxy.example:3128 login alice password {DECODED}"]
    else:
        assert lines == []


def test_module_arguments_that_carry_the_proxy_are_no_log() -> None:
    """Ansible logs every module invocation's arguments to the host's journal (AnsibleModule._log_invocation),
    except those its argument_spec marks no_log (ansible.module_utils.basic ``_log_invocation``); the preflight's
    facts module gets the proxy environment as an argument. The real-host side: tests/testbed/test_up_single.py
    searches the host's journal files for the password too."""
    carrying = []
    for module in sorted((REPO / "playbooks" / "library").glob("*.py")):
        text = module.read_text()
        for m in re.finditer(r'^ *"(?P<name>[a-z_]*proxy[a-z_]*)": \{"type"(?P<spec>.*)$', text, re.M):
            carrying.append(module.name)
            assert '"no_log": True' in m["spec"], f"{module.name}: argument {m['name']} is logged"
    assert carrying == ["gpustack_facts.py"], carrying
