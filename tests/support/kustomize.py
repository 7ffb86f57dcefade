"""A small kustomize, for rendering deploy/k8s offline where no `kustomize` or `kubectl` can be installed.

It does what deploy/k8s uses, as kustomize v5 does it, and refuses anything else by name rather than
ignoring it: `resources` (files, and folders holding a kustomization.yaml), `namespace` (set on every
namespaced object), `labels` with `includeSelectors: false` (added to every object's own labels),
`images` (`newName`, `newTag` for containers whose image is the name), and `patches`, from `path` or
inline `patch`: a JSON 6902 list of operations (`test`, `replace`, `add`, `remove`) on the objects a
`target` selects by kind and name, or a strategic-merge `$patch: delete` that removes one object.
Its output was compared with `kubectl kustomize` (kustomize v5.5.0) on both deploy/k8s trees.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


class KustomizeError(Exception):
    """A kustomization this renderer cannot render (or kustomize would refuse)."""


def render(folder: Path) -> list[Obj]:
    """The objects `kustomize build folder` prints, in the order of their resources."""
    path = folder / "kustomization.yaml"
    spec = yaml.safe_load(path.read_text())
    unknown = set(spec) - KUSTOMIZATION_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: fields this renderer does not support: {sorted(unknown)}")
    objects: list[Obj] = []
    for entry in spec.get("resources", []):
        source = (folder / entry).resolve()
        if source.is_dir():
            objects += render(source)
        else:
            objects += [doc for doc in yaml.safe_load_all(source.read_text()) if doc]
    for patch in spec.get("patches", []):
        objects = _apply_patch(objects, patch, folder)
    for image in spec.get("images", []):
        _set_image(objects, image)
    for label in spec.get("labels", []):
        _add_labels(objects, label, path)
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj.setdefault("metadata", {})["namespace"] = spec["namespace"]
    return objects


def _apply_patch(objects: list[Obj], patch: Obj, folder: Path) -> list[Obj]:
    text = (folder / patch["path"]).read_text() if "path" in patch else patch["patch"]
    body = yaml.safe_load(text)
    if isinstance(body, list):
        target = patch.get("target") or {}
        chosen = [o for o in objects if _selected(o, target)]
        if not chosen:
            raise KustomizeError(f"patch target {target} selects nothing")
        for obj in chosen:
            for operation in body:
                _json_patch(obj, operation)
        return objects
    if body.get("$patch") != "delete":
        raise KustomizeError("only `$patch: delete` strategic-merge patches are supported")
    kind, name = body["kind"], body["metadata"]["name"]
    kept = [o for o in objects if not (o["kind"] == kind and o["metadata"]["name"] == name)]
    if len(kept) != len(objects) - 1:
        raise KustomizeError(f"$patch: delete of {kind}/{name} matches {len(objects) - len(kept)} objects")
    return kept


def _selected(obj: Obj, target: Obj) -> bool:
    unknown = set(target) - {"kind", "name"}
    if unknown:
        raise KustomizeError(f"patch target fields this renderer does not support: {sorted(unknown)}")
    kind, name = target.get("kind", obj["kind"]), target.get("name", obj["metadata"]["name"])
    return bool(obj["kind"] == kind and obj["metadata"]["name"] == name)


def _json_patch(obj: Obj, operation: Obj) -> None:
    steps = [s.replace("~1", "/").replace("~0", "~") for s in operation["path"].lstrip("/").split("/")]
    parent: Any = obj
    for step in steps[:-1]:
        parent = parent[int(step)] if isinstance(parent, list) else parent[step]
    last: Any = steps[-1]
    if isinstance(parent, list):
        last = len(parent) if last == "-" else int(last)
    op = operation["op"]
    if op == "test":
        if parent[last] != operation["value"]:
            raise KustomizeError(f"test failed at {operation['path']}: {parent[last]!r}")
    elif op == "replace":
        exists = last < len(parent) if isinstance(parent, list) else last in parent
        if not exists:
            raise KustomizeError(f"replace of {operation['path']}, which does not exist")
        parent[last] = copy.deepcopy(operation["value"])
    elif op == "add":
        if isinstance(parent, list):
            parent.insert(last, copy.deepcopy(operation["value"]))
        else:
            parent[last] = copy.deepcopy(operation["value"])
    elif op == "remove":
        del parent[last]
    else:
        raise KustomizeError(f"JSON patch op {op!r} is not supported")


def _containers(obj: Obj) -> list[Obj]:
    if obj["kind"] not in WORKLOADS:
        return []
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def _set_image(objects: list[Obj], image: Obj) -> None:
    for obj in objects:
        for container in _containers(obj):
            name = container["image"].split("@")[0].rsplit(":", 1)[0] if ":" in container["image"] else None
            if container["image"] == image["name"] or name == image["name"]:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def _add_labels(objects: list[Obj], label: Obj, path: Path) -> None:
    if label.get("includeSelectors", False) or label.get("includeTemplates", False):
        raise KustomizeError(f"{path}: only labels with includeSelectors: false are supported")
    for obj in objects:
        obj.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
