#!/usr/bin/env bash
# Renders and checks deploy/kubernetes, as the test suite runs it
# (ctest -R Deploy):
#   deploy/check.sh TOOLS_DIR SPLITSPEC_SERVER [WORK_DIR]
# TOOLS_DIR is what scripts/setup_deploy_tools.sh made: Debian's kubectl
# (kubernetes-client 1.20, its built-in kustomize v2.0.3) and promtool
# (prometheus 2.42) under bin/, and the npm schema packages under
# deploy-check/node_modules.
#  1. `kubectl kustomize` renders each overlay, and the Secrets from throwaway
#     files (a certificate made here, a token);
#  2. deploy/check/validate.mjs checks every object against its schema and
#     the server's needs (probes, drain timing, mounts, ports, security);
#  3. splitspec-server --check-config accepts each overlay's server.json;
#  4. promtool checks the alert rules and runs deploy/prometheus/rules.test.yaml.
set -euo pipefail
TOOLS="${1:?usage: deploy/check.sh TOOLS_DIR SPLITSPEC_SERVER [WORK_DIR]}"
SERVER="${2:?usage: deploy/check.sh TOOLS_DIR SPLITSPEC_SERVER [WORK_DIR]}"
HERE="$(cd "$(dirname "$0")" && pwd)"
TOOLS="$(cd "$TOOLS" 2>/dev/null && pwd || echo "$TOOLS")"
SERVER="$(cd "$(dirname "$SERVER")" 2>/dev/null && pwd)/$(basename "$SERVER")"
WORK="${3:-$(mktemp -d)}"
KUBECTL="$TOOLS/bin/kubectl"
PROMTOOL="$TOOLS/bin/promtool"
MODULES="$TOOLS/deploy-check/node_modules"
for f in "$KUBECTL" "$PROMTOOL" "$MODULES/kubernetes-models/package.json"; do
  [ -e "$f" ] || { echo "deploy check: $f is missing: run scripts/setup.sh (it runs scripts/setup_deploy_tools.sh)"; exit 1; }
done
command -v node >/dev/null || { echo "deploy check: needs node (scripts/setup.sh installs it)"; exit 1; }
command -v openssl >/dev/null || { echo "deploy check: needs openssl"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK/secrets"
echo "deploy check: $("$KUBECTL" version --client --short 2>/dev/null || "$KUBECTL" version --client | head -1), $("$PROMTOOL" --version 2>&1 | head -1), node $(node --version)"

for overlay in cpu gpu; do
  "$KUBECTL" kustomize "$HERE/kubernetes/overlays/$overlay" >"$WORK/$overlay.yaml"
done
# A newer kubectl on the PATH (kustomize v4/v5) must render the same objects.
if command -v kubectl >/dev/null && [ "$(command -v kubectl)" != "$KUBECTL" ]; then
  objects() { grep -E '^(kind|  name):' "$1" | paste - - | sort; }
  for overlay in cpu gpu; do
    kubectl kustomize "$HERE/kubernetes/overlays/$overlay" 2>/dev/null >"$WORK/$overlay.path.yaml"
    if ! diff <(objects "$WORK/$overlay.yaml") <(objects "$WORK/$overlay.path.yaml") >/dev/null; then
      echo "deploy check: $(command -v kubectl) renders other objects of overlay $overlay than Debian's kubectl"
      exit 1
    fi
  done
  echo "deploy check: $(command -v kubectl) ($(kubectl version --client 2>/dev/null | grep -o 'Kustomize Version: .*' || echo its kustomize)) renders the same objects"
fi
# The Secrets as an operator makes them: the kustomization beside throwaway files.
cp "$HERE/kubernetes/secrets/kustomization.yaml" "$WORK/secrets/"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=splitspec-server" \
  -keyout "$WORK/secrets/tls.key" -out "$WORK/secrets/tls.crt" 2>/dev/null
: >"$WORK/secrets/ca.crt"
echo "a-token-for-the-check" >"$WORK/secrets/tokens"
"$KUBECTL" kustomize "$WORK/secrets" >"$WORK/secrets.yaml"

node "$HERE/check/validate.mjs" "$MODULES" "$WORK" cpu="$WORK/cpu.yaml" gpu="$WORK/gpu.yaml" secrets="$WORK/secrets.yaml"

for overlay in cpu gpu; do
  # The image's /models/target is not here; --check-config reads only a
  # target's config.json, so a small model's stands in.
  mkdir -p "$WORK/stand-in-target"
  echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256, "max_position_embeddings": 64}' \
    >"$WORK/stand-in-target/config.json"
  "$SERVER" --check-config --config "$WORK/$overlay-server.json" --target "$WORK/stand-in-target"
  cp "$WORK/$overlay-rules.yaml" "$WORK/rules.yaml"
  cp "$HERE/prometheus/rules.test.yaml" "$WORK/"
  "$PROMTOOL" check rules "$WORK/rules.yaml"
  (cd "$WORK" && "$PROMTOOL" test rules rules.test.yaml)
done
echo "deploy check: every overlay renders, validates, configures the server and passes its alert tests"
