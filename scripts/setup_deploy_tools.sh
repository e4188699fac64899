#!/usr/bin/env bash
# The tools deploy/check.sh checks deploy/ with, all test-only, under one
# directory (default build/tools) and never on the PATH:
#   bin/kubectl   Debian's kubernetes-client (1.20; kustomize v2.0.3 inside)
#   bin/promtool  Debian's prometheus package (2.42)
#   deploy-check/node_modules  the npm packages of deploy/check/package-lock.json
# The .deb files are unpacked, not installed: another kubectl (a cloud SDK's,
# say) may own /usr/bin/kubectl, and the Prometheus server is not wanted.
# Safe to re-run: it does only what is missing or changed.
#   scripts/setup_deploy_tools.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="$(mkdir -p "${1:-build/tools}" && cd "${1:-build/tools}" && pwd)"
mkdir -p "$DIR/bin" "$DIR/deploy-check"

if [ ! -x "$DIR/bin/kubectl" ] || [ ! -x "$DIR/bin/promtool" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # apt-get download needs the package lists, which a fresh machine lacks.
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  (cd "$work" && apt-get download kubernetes-client prometheus 2>/dev/null) ||
    { $SUDO apt-get update -qq && (cd "$work" && apt-get download kubernetes-client prometheus); }
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
  install -m 755 "$work/root/usr/bin/kubectl" "$work/root/usr/bin/promtool" "$DIR/bin/"
fi

# npm ci again only when the lock file changed.
if ! cmp -s deploy/check/package-lock.json "$DIR/deploy-check/package-lock.json" ||
   [ ! -e "$DIR/deploy-check/node_modules/kubernetes-models/package.json" ]; then
  cp deploy/check/package.json deploy/check/package-lock.json "$DIR/deploy-check/"
  (cd "$DIR/deploy-check" && npm ci --silent --no-audit --no-fund)
fi
echo "setup_deploy_tools: $("$DIR/bin/kubectl" version --client --short 2>/dev/null || echo kubectl),"\
  "$("$DIR/bin/promtool" --version 2>&1 | head -1 | cut -d' ' -f1-3), npm packages in $DIR/deploy-check"
