# Sourced by scripts/run, scripts/test and scripts/bench: make the virtual environment and
# install the package into it. Re-running is cheap: pip skips what is already there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in .venv"
  "$PYTHON" -m venv "$VENV"
fi
# The extras each mode installs: `run` (scripts/run, scripts/demo) the host and what the demo
# needs; `dev` (scripts/test, scripts/bench) everything.
case "${1:-run}" in
  run) extras=demo ;;
  dev) extras=dev ;;
  *) echo "[setup] unknown mode ${1}" >&2; exit 2 ;;
esac
stamp="$VENV/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-${1:-run}"
if [ ! -f "$stamp" ]; then
  echo "[setup] installing mcp-host (${1:-run}) into .venv"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
  touch "$stamp"
fi

ensure_bwrap() {
  if command -v bwrap >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing bubblewrap with apt-get"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "[setup] bubblewrap (bwrap) is missing: install it (Debian/Ubuntu: sudo apt-get install bubblewrap)," >&2
    echo "        or run children unsandboxed for development only with MCP_HOST_SANDBOX=off" >&2
    return 1
  fi
}

ensure_haproxy() {
  # HAProxy in front of several replicas (scripts/cluster, tests/cluster).
  if command -v haproxy >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing haproxy with apt-get"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
  else
    echo "[setup] haproxy is missing: install it (Debian/Ubuntu: sudo apt-get install haproxy)" >&2
    return 1
  fi
}

ensure_chromium() {
  # Debian's Chromium and its driver, for the console's browser tests (tests/owner_console):
  # Selenium drives them; no browser is downloaded (CI has no internet but the registries).
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing chromium and chromium-driver with apt-get"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "[setup] chromium is missing: install it (Debian: sudo apt-get install chromium chromium-driver)" >&2
    return 1
  fi
}

ensure_conformance_suite() {
  # Optional: the conformance test skips (saying why) when Node is missing or the install fails.
  "$ROOT/scripts/install-conformance" || true
}

ensure_oauth_upstream() {
  # Optional: the upstream sign-in tests (tests/children/test_remote_sign_in.py) skip, saying
  # why, when Node is missing or the install fails.
  "$ROOT/scripts/install-oauth-upstream" || true
}

ensure_ecosystem() {
  # Optional: the ecosystem tests (tests/ecosystem) skip, saying why, when Node is missing or
  # an install fails.
  "$ROOT/scripts/install-ecosystem" 2> >(grep -v "^WARNING: Location 'file:" >&2) || true
  # The MCP Apps example server (tests/apps, bench/apps.py) and the test app host the Chromium
  # tests render apps with (tests/apps/test_in_chromium.py): the same, on their own stamps.
  "$ROOT/scripts/install-apps" || true
}

ensure_oauth_clients() {
  # Optional: the OAuth client tests (tests/oauth: Claude Code) skip, saying why, when Node is
  # missing or the install fails.
  "$ROOT/scripts/install-oauth-clients" || true
}
