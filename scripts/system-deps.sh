#!/usr/bin/env bash
# System packages some tests drive (Debian): Chromium for the browser tests, PostgreSQL for the
# shared-database test. Installed only when missing and when we may (root); tests that need them
# skip with a clear reason otherwise.
set -u
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
command -v pg_ctlcluster >/dev/null 2>&1 || [ -x /usr/lib/postgresql/*/bin/postgres ] 2>/dev/null || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing system packages: ${need[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null 2>&1 \
      || echo "warning: could not install ${need[*]}; the tests that need them will skip"
  else
    echo "note: ${need[*]} missing and not root; the tests that need them will skip"
  fi
fi
exit 0
