#!/usr/bin/env bash
# What the Kubernetes manifests' offline checks need (tests/deploy/kubernetes.rs):
#   - kubectl, to render deploy/kubernetes with its built-in kustomize. Debian's
#     `kubernetes-client` is installed only when no kubectl command exists: Google's `kubectl`
#     package (or any other) owns /usr/bin/kubectl too, and the two would conflict. The
#     kustomizations are written for both Debian's kustomize v2.0.3 and v5.
#   - .venv-deploy: kubernetes-validate (Kubernetes' OpenAPI schemas for 1.25 to 1.37, offline)
#     and the PyYAML it brings, which the checks use to read the rendered YAML.
# Prometheus, for tests/deploy/prometheus.rs, is a Debian package in scripts/apt-packages.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! command -v kubectl >/dev/null 2>&1; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup-deploy: need root (or sudo) to apt-get install kubernetes-client" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
fi

exec scripts/venv.sh .venv-deploy "kubernetes-validate==1.37.0"
