"""Read rendered Kubernetes YAML (kubectl kustomize's output) on stdin; print one JSON object:

  {"objects": [every document, as JSON],
   "validation": [{"kind", "name", "version", "result"}, ...]}

where result is "ok" (valid against that Kubernetes version's OpenAPI schema, strictly: unknown
fields are errors), "no-schema" (kubernetes-validate has none: a custom resource such as KEDA's
ScaledObject or Prometheus Operator's ServiceMonitor), "not-a-resource" (a YAML document without
apiVersion and kind, such as Helm values) or "error: ..." with the path and message.
tests/deploy/kubernetes.rs asserts on it; run from .venv-deploy (scripts/setup-deploy.sh), whose
kubernetes-validate brings PyYAML.

  python kubernetes_check.py 1.25.0 1.37.0 < rendered.yaml
"""

import json
import sys

import yaml
from kubernetes_validate import utils


def check(document, version):
    if not isinstance(document, dict) or "apiVersion" not in document or "kind" not in document:
        return "not-a-resource"
    try:
        utils.validate(document, version, strict=True)
        return "ok"
    except utils.SchemaNotFoundError:
        return "no-schema"
    except utils.ValidationError as error:
        where = ".".join(str(part) for part in error.path)
        return "error: %s: %s" % (where, error.message)


def describe(document):
    if isinstance(document, dict):
        return document.get("kind"), (document.get("metadata") or {}).get("name")
    return None, None


def main():
    versions = sys.argv[1:]
    if not versions:
        raise SystemExit("usage: kubernetes_check.py VERSION... < rendered.yaml")
    objects = [document for document in yaml.safe_load_all(sys.stdin.read()) if document]
    validation = []
    for document in objects:
        kind, name = describe(document)
        for version in versions:
            validation.append(
                {
                    "kind": kind,
                    "name": name,
                    "version": version,
                    "result": check(document, version),
                }
            )
    json.dump({"objects": objects, "validation": validation}, sys.stdout)


if __name__ == "__main__":
    main()
