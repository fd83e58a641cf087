#!/usr/bin/env bash
# System packages some tests drive (Debian), each with the reason it is needed. Installed only when
# missing and when we may (root with apt-get); otherwise the tests that need them skip with a clear reason.
# Says what it installs and why, and shows apt-get's own output when the install fails.
set -u
need=()
why=()
if ! command -v chromium >/dev/null 2>&1; then
  need+=(chromium chromium-driver)
  why+=("chromium, chromium-driver: the browser tests (tests/web, marker 'browser') drive headless Chromium")
fi
if ! command -v pg_ctlcluster >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  need+=(postgresql)
  why+=("postgresql: tests/measure/test_measure_postgres.py starts a throwaway server for the shared runs database")
fi
if [ ${#need[@]} -eq 0 ]; then
  echo "system packages: chromium and postgresql present, nothing to install"
  exit 0
fi
echo "system packages needed by some tests:"
for w in "${why[@]}"; do echo "  - $w"; done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing with apt-get (as root): ${need[*]}"
  log=$(mktemp)
  if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >"$log" 2>&1; then
    echo "installed: ${need[*]}"
  else
    tail -n 20 "$log"
    echo "warning: could not install ${need[*]}; the tests that need them will skip"
  fi
  rm -f "$log"
else
  echo "not installing (needs root and apt-get): the tests that need them will skip;"
  echo "to run them: sudo apt-get install ${need[*]}"
fi
exit 0
