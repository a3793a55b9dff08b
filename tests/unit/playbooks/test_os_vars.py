"""The per-OS variables against the supported releases (gpustack/config/pins.py OS_RELEASES):
every release has its vars file, found the way the role looks it up from Ansible's facts on that
OS, naming its bundle repository; the roles' platforms are the releases' codenames. What this
cannot check (there is no Ubuntu host or archive here) is written in docs/decisions.md, "Ubuntu's
per-OS variables"."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import PLAYBOOKS

from gpustack.config import pins

ROLE = PLAYBOOKS / "roles" / "os_prep"
#: what Ansible's setup module reports on each release (distribution, distribution_major_version)
FACTS = {
    ("ubuntu", "22.04"): ("Ubuntu", "22"),
    ("ubuntu", "24.04"): ("Ubuntu", "24"),
    ("debian", "12"): ("Debian", "12"),
    ("debian", "13"): ("Debian", "13"),
}
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")  # Debian policy 5.6.1


@pytest.mark.parametrize("release", pins.OS_RELEASES, ids=lambda r: f"{r.id}-{r.version}")
def test_each_release_has_its_vars(release: pins.OsRelease) -> None:
    distribution, major = FACTS[(release.id, release.version)]
    # roles/os_prep/tasks/main.yml: first_found of <distribution>-<major>.yml, then <os_family>.yml
    path = ROLE / "vars" / f"{distribution}-{major}.yml"
    data = yaml.safe_load(path.read_text())
    assert data["os_prep_release"] == f"{release.id}-{release.version}"
    for name in data["os_prep_distro_packages"]:
        assert PACKAGE_NAME.match(name), name
    supported = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["os_prep_supported"]
    assert f"{distribution}-{major}" in supported


def test_supported_list_and_platforms_are_the_pinned_releases() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert sorted(defaults["os_prep_supported"]) == sorted(f"{d}-{m}" for d, m in FACTS.values())
    assert all(PACKAGE_NAME.match(p) for p in defaults["os_prep_base_packages"])
    codenames = {r.id: sorted(o.codename for o in pins.OS_RELEASES if o.id == r.id) for r in pins.OS_RELEASES}
    for meta in sorted((PLAYBOOKS / "roles").glob("*/meta/main.yml")):
        platforms = {
            p["name"]: sorted(p["versions"]) for p in yaml.safe_load(meta.read_text())["galaxy_info"]["platforms"]
        }
        assert platforms == {"Ubuntu": codenames["ubuntu"], "Debian": codenames["debian"]}, meta
