"""Reading rendered Kubernetes objects: validation against schemas offline, and the parts of pods the
checks of tests/test_k8s_manifests.py look at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = K8S / "schemas"
SECRET_EXAMPLE = K8S / "secret.example.yaml"
SECRET_NAME = "tunefleet"
KUBERNETES_VERSION = "1.30.0"
"""The oldest Kubernetes the manifests are written for (PodDisruptionBudget policy/v1, HPA v2 behavior)."""

Obj = dict[str, Any]


def vendored_schema(obj: Obj) -> Obj | None:
    """The schema of a custom resource kept in deploy/k8s/schemas, if there is one for its kind, closed
    as `kubectl apply --validate=strict` reads it: a field its schema does not list is an error."""
    group_version = str(obj.get("apiVersion", "")).replace("/", "-")
    path = SCHEMAS / f"{group_version}-{str(obj.get('kind', '')).lower()}.json"
    if not path.is_file():
        return None
    schema = closed(json.loads(path.read_text()))
    assert isinstance(schema, dict)
    return schema


def closed(schema: Any) -> Any:
    """`schema` with every object that lists its properties closed to others (additionalProperties
    false), unless it keeps unknown fields (x-kubernetes-preserve-unknown-fields) or says otherwise."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def schema_errors(obj: Obj) -> list[str]:
    """Why `obj` does not match its kind's schema (strict: unknown fields are errors); [] when it does.
    A kind with no schema at all is an error too."""
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    schema = vendored_schema(obj)
    if schema is not None:
        validator = jsonschema.Draft202012Validator(schema)
        return [
            f"{name}: {'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)
        ]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{name}: {'.'.join(map(str, exc.path))}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"{name}: no schema: {exc.message}"]
    return []


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_templates(objects: list[Obj]) -> dict[str, Obj]:
    """Each workload's pod template, by workload name."""
    return {
        o["metadata"]["name"]: o["spec"]["template"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
    }


def env_of(container: Obj) -> dict[str, Obj]:
    """A container's env entries by name (each the whole entry: value or valueFrom)."""
    return {e["name"]: e for e in container.get("env", [])}


def env_value(container: Obj, name: str) -> str | None:
    entry = env_of(container).get(name)
    return None if entry is None or "value" not in entry else str(entry["value"])


def container_port(container: Obj, port: str | int) -> int | None:
    """A probe's port (a number, or the name of one of the container's ports) as a number."""
    if isinstance(port, int):
        return port
    named = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    value = named.get(port)
    return int(value) if value is not None else None


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions with In/NotIn/Exists) picks these labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not ok:
            return False
    return True


def fleet_containers(objects: list[Obj], subcommand: str) -> list[tuple[Obj, Obj]]:
    """(workload, container) for every container that runs `tunefleet <subcommand>`."""
    found = []
    for workload in objects:
        if workload["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in workload["spec"]["template"]["spec"]["containers"]:
            if container.get("args", [None])[0] == subcommand and "command" not in container:
                found.append((workload, container))
    return found


def secret_refs(node: Any) -> list[Obj]:
    """Every reference to a Secret's key below `node` (env secretKeyRef, ServiceMonitor credentials)."""
    if isinstance(node, list):
        return [ref for item in node for ref in secret_refs(item)]
    if not isinstance(node, dict):
        return []
    found = [node[k] for k in ("secretKeyRef", "credentials") if isinstance(node.get(k), dict)]
    return found + [ref for value in node.values() for ref in secret_refs(value)]
