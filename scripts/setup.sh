#!/usr/bin/env bash
# Set up coreepi in this clone: system tools (apt-get when root), a virtualenv
# in .venv, and the package with its test dependencies. Idempotent.
# Sourced by scripts/test and scripts/demo; not meant to be run alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# command -> Debian package that provides it
declare -A NEED=(
  [gcc]=gcc [g++]=g++ [gdb]=gdb [readelf]=binutils
  [eu-stack]=elfutils [eu-readelf]=elfutils [eu-unstrip]=elfutils
  [java]=openjdk-17-jre-headless  # Spark local mode (report --engine spark, its parity test)
)
# the web UI's browser tests (tests/test_ui_browser.py): installed when root,
# else the tests skip with a reason (CI runs as root, so it runs them)
declare -A BROWSER=([chromium]=chromium [chromedriver]=chromium-driver)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
if [[ $(id -u) -eq 0 ]]; then
  for cmd in "${!BROWSER[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${BROWSER[$cmd]}")
  done
fi
if ! python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  missing+=(python3 python3-venv)
fi
if ((${#missing[@]})); then
  pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "coreepi setup: installing system packages: $pkgs" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null
  else
    echo "coreepi setup: missing system packages. Install them, then re-run:" >&2
    echo "    sudo apt-get install -y $pkgs" >&2
    exit 1
  fi
fi

# PostgreSQL server binaries for the PostgreSQL store's tests (a throwaway
# cluster per test session, tests/pgcluster.py). Debian keeps them under
# /usr/lib/postgresql/<major>/bin. Installed without a default cluster and
# with service starts denied, so nothing is left running.
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! command -v initdb >/dev/null; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "coreepi setup: installing postgresql (server binaries for the store tests)" >&2
    mkdir -p /etc/postgresql-common
    [[ -e /etc/postgresql-common/createcluster.conf ]] || \
      echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
    policy_made=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      policy_made=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || status=$?
    ((policy_made)) && rm -f /usr/sbin/policy-rc.d
    # a cluster the package started anyway (no policy-rc.d honoured): stop it
    if command -v pg_lsclusters >/dev/null; then
      pg_lsclusters --no-header 2>/dev/null | awk '$4 == "online" {print $1, $2}' |
        while read -r ver name; do pg_ctlcluster "$ver" "$name" stop || true; done
    fi
    [[ ${status:-0} -eq 0 ]] || { echo "coreepi setup: apt-get install postgresql failed" >&2; exit 1; }
  else
    echo "coreepi setup: PostgreSQL is not installed: the PostgreSQL store tests will be" \
         "skipped (sudo apt-get install -y postgresql)" >&2
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
stamp=.venv/.coreepi-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  echo "coreepi setup: installing coreepi and its dependencies into .venv (first run: about a minute)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
