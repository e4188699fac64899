#!/usr/bin/env bash
# deploy/check.sh refuses broken manifests and names what broke: each case
# breaks one thing in a copy of deploy/ and expects check.sh to fail with the
# given words. Without this, a check that passes everything would look the
# same as one that works.
#   tests/deploy_check_test.sh TOOLS_DIR SPLITSPEC_SERVER
set -euo pipefail
TOOLS="${1:?usage: tests/deploy_check_test.sh TOOLS_DIR SPLITSPEC_SERVER}"
SERVER="${2:?usage: tests/deploy_check_test.sh TOOLS_DIR SPLITSPEC_SERVER}"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

# FILE (under deploy/)  SED_SCRIPT  EXPECTED_WORDS
refused() {
  rm -rf "$tmp/deploy" && cp -r "$SRC/deploy" "$tmp/deploy"
  sed -i "$2" "$tmp/deploy/$1"
  if cmp -s "$SRC/deploy/$1" "$tmp/deploy/$1"; then
    echo "FAIL: '$2' changed nothing in $1"; failures=$((failures + 1)); return
  fi
  local out
  if out="$("$tmp/deploy/check.sh" "$TOOLS" "$SERVER" "$tmp/work" 2>&1)"; then
    echo "FAIL: accepted $1 after '$2'"; failures=$((failures + 1))
  elif ! grep -qF -- "$3" <<<"$out"; then
    echo "FAIL: $1 after '$2' was refused, but not with '$3':"; tail -n 8 <<<"$out"; failures=$((failures + 1))
  else
    echo "ok: $1 '$2' -> $3"
  fi
}

K=kubernetes/base
refused $K/deployment.yaml 's/replicas: 2/replicas: two/' "spec/replicas must be integer"
refused $K/deployment.yaml 's/terminationGracePeriodSeconds: 45/terminationGracePeriodSeconds: 20/' \
  "terminationGracePeriodSeconds 20 < preStop 5 + shutdown_grace_s 30 + 5"
# Misspelt optional fields, which the schemas alone let through.
refused $K/deployment.yaml 's/revisionHistoryLimit: 5/revisionHistoryLimt: 5/' \
  "Deployment/splitspec-server: strict schema: Object literal may only specify known properties, and '\"revisionHistoryLimt\"'"
refused $K/deployment.yaml 's/imagePullPolicy: IfNotPresent/imagePulPolicy: IfNotPresent/' "'\"imagePulPolicy\"' does not exist in type 'IContainer'"
refused $K/servicemonitor.yaml 's/scrapeTimeout: 10s/scrapeTimout: 10s/' "ServiceMonitor/splitspec-server: strict schema"
refused $K/deployment.yaml 's/failureThreshold: 6/failureThreshold: 2/' "liveness would kill a draining replica"
refused $K/deployment.yaml 's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/' "root file system is writable"
refused $K/deployment.yaml '/readinessProbe:/,/successThreshold/d' "readinessProbe is not a gRPC probe on the health port"
refused $K/deployment.yaml 's/mountPath: \/etc\/splitspec\/tls$/mountPath: \/etc\/tls/' "tls_cert /etc/splitspec/tls/tls.crt is not on a Secret volume"
refused $K/server.json 's/0.0.0.0:50051/0.0.0.0:50061/' "is not container port grpc"
refused $K/server.json 's/"max_sessions": 8/"max_sesions": 8/' "unknown key 'max_sesions'"
refused $K/service-headless.yaml 's/name: splitspec-server$/name: splitspec-srv/' "selects no server pod"
refused $K/servicemonitor.yaml 's/port: metrics/port: prom/' "must select exactly the Service whose port it scrapes"
refused $K/networkpolicy.yaml 's/egress: \[\]/egress: [{}]/' "the server may call out"
refused $K/prometheusrule.yaml 's/  > 0.05/  > 0.5/' "FAILED"
refused $K/prometheusrule.yaml 's/for: 5m/for: 5 minutes/' "for must match pattern"
refused $K/prometheusrule.yaml 's/histogram_quantile(0.99,/histogram_quantile(0.99/' "parse error"
refused kubernetes/overlays/gpu/gpu-node-pool.yaml '/nvidia.com\/gpu: "1"/d' "the GPU overlay asks for no GPU"
refused kubernetes/overlays/gpu/server.json '/"device": "cuda"/d' "the GPU overlay's server computes on cpu, not its GPU"
refused kubernetes/overlays/gpu/kustomization.yaml 's/newTag: "0.3.0-gpu"/newTag: "0.3.0"/' "is not the GPU image"
refused kubernetes/overlays/gpu/server.json 's/"device": "cuda"/"device": "tpu"/' "computes on tpu, not its GPU"
refused prometheus/adapter-rules.yaml 's/as: splitspec_active_sessions/as: active_sessions/' \
  "splitspec_active_sessions has no rule in deploy/prometheus/adapter-rules.yaml"
refused kubernetes/secrets/kustomization.yaml 's/- tokens/- tokenz/' "tokenz"

[ "$failures" -eq 0 ] || { echo "deploy check test: $failures case(s) failed"; exit 1; }
echo "deploy check test: every broken copy was refused with its reason"
