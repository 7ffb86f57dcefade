"""deploy/k8s rendered offline (tests/support/kustomize.py) and checked: every object against the
Kubernetes and custom-resource schemas, and the manifests against the code (settings, CLI, metrics,
the worker's stop grace).

Each check returns the problems it finds; the rendered trees must have none, and deliberately broken
copies must have some, so that no check passes whatever the manifests say.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.support.grace import default_stop_grace_s, release_wait_s
from tests.support.k8s import (
    K8S,
    SECRET_EXAMPLE,
    SECRET_NAME,
    Obj,
    env_of,
    env_value,
    find,
    fleet_containers,
    schema_errors,
    secret_refs,
)
from tests.support.k8s_checks import (
    READYZ,
    env_problems,
    grace_problems,
    health_problems,
    scaling_problems,
    schema_problems,
    secret_keys,
    security_problems,
    store_problems,
)
from tests.support.k8s_containment import acl_problems, egress_problems, pod_problems, worker_secret_problems
from tests.support.k8s_wiring import (
    command_problems,
    external_redis_problems,
    monitoring_problems,
    redis_problems,
)
from tests.support.keda import shipped_rule
from tests.support.kustomize import render
from tests.support.tools import require_tool

BASE = K8S / "base"
OVERLAY = K8S / "overlays" / "external-redis"
SANDBOXED = K8S / "overlays" / "bubblewrap"

Check = Callable[[list[Obj]], list[str]]


@cache
def _rendered(folder: Path) -> tuple[Obj, ...]:
    return tuple(render(folder))


def rendered(folder: Path) -> list[Obj]:
    """A fresh copy of the objects a kustomization renders to (the render itself is done once)."""
    return copy.deepcopy(list(_rendered(folder)))


# ---------------------------------------------------------------------------------------------
# The real trees

BOTH: dict[str, Check] = {
    "schemas": schema_problems,
    "grace": grace_problems,
    "scaling": scaling_problems,
    "health": health_problems,
    "security": security_problems,
    "env": env_problems,
    "store": store_problems,
    "commands": command_problems,
    "monitoring": monitoring_problems,
    "pods": pod_problems,
    "worker secrets": worker_secret_problems,
    "egress": egress_problems,
}
IN_CLUSTER: dict[str, Check] = {**BOTH, "redis": redis_problems, "redis acl": acl_problems}
TREES: dict[str, tuple[Path, dict[str, Check]]] = {
    "base": (BASE, IN_CLUSTER),
    "external-redis": (OVERLAY, {**BOTH, "external redis": external_redis_problems}),
    "bubblewrap": (SANDBOXED, IN_CLUSTER),
}


@pytest.mark.parametrize(("tree", "check"), [(t, c) for t, (_, checks) in TREES.items() for c in checks])
def test_rendered_tree_passes(tree: str, check: str) -> None:
    """The rendered kustomization has no problem of this kind."""
    folder, checks = TREES[tree]
    assert checks[check](rendered(folder)) == []


def test_both_trees_render_the_whole_fleet() -> None:
    """The base renders Redis, the daemon, the workers, their scaling and the store; the overlay the same
    without Redis; everything in the tunefleet namespace."""
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered(BASE)}
    assert {
        ("StatefulSet", "redis"),
        ("NetworkPolicy", "redis"),
        ("Deployment", "daemon"),
        ("Service", "daemon"),
        ("Deployment", "worker"),
        ("PodDisruptionBudget", "worker"),
        ("ScaledObject", "worker"),
        ("TriggerAuthentication", "redis-scaler"),
        ("NetworkPolicy", "worker-egress"),
        ("ConfigMap", "redis-acl"),
        ("ServiceMonitor", "daemon"),
        ("PersistentVolumeClaim", "store"),
    } <= kinds
    overlay = {(o["kind"], o["metadata"]["name"]) for o in rendered(OVERLAY)}
    in_cluster_redis = {("StatefulSet", "redis"), ("Service", "redis"), ("NetworkPolicy", "redis")}
    assert overlay == kinds - in_cluster_redis - {("ConfigMap", "redis-acl")}
    assert {(o["kind"], o["metadata"]["name"]) for o in rendered(SANDBOXED)} == kinds
    namespaced = [o for o in rendered(BASE) if o["kind"] != "Namespace"]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"tunefleet"}


def test_secret_example_is_valid_and_has_every_key_used() -> None:
    """The example Secret validates, and holds every key that a manifest reads from it."""
    secret = yaml.safe_load(SECRET_EXAMPLE.read_text())
    assert schema_errors(secret) == []
    refs = [ref for folder in (BASE, OVERLAY) for obj in rendered(folder) for ref in secret_refs(obj)]
    refs += [ref for folder in (BASE, OVERLAY) for obj in rendered(folder) for ref in _auth_refs(obj)]
    assert {ref["name"] for ref in refs} == {SECRET_NAME}
    used = {ref["key"] for ref in refs}
    assert {"api-token", "redis-worker-url", "redis-submitter-password", "redis-scaler-password"} <= used
    assert {"redis-monitor-password", "redis-scaler-address"} <= used
    assert used <= secret_keys()


def _auth_refs(obj: Obj) -> list[Obj]:
    """The Secret keys a KEDA TriggerAuthentication reads."""
    if obj["kind"] != "TriggerAuthentication":
        return []
    return list(obj["spec"].get("secretTargetRef", []))


@pytest.mark.parametrize("tree", list(TREES))
def test_kubectl_kustomize_renders_what_the_checks_read(tree: str) -> None:
    """`kubectl kustomize` (kustomize itself) renders each tree into exactly the objects the checks read
    (the offline renderer's), so that every check above holds for what `kubectl apply -k` applies."""
    kubectl = require_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(TREES[tree][0])], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    by_kubectl = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(by_kubectl, key=key) == sorted(rendered(TREES[tree][0]), key=key)


def test_grace_follows_the_settings() -> None:
    """The worker's terminationGracePeriodSeconds is checked against stop_grace_s as configured, or the
    settings' default when unset, plus the hand-back wait read from the worker's code."""
    objects = rendered(BASE)
    worker, container = fleet_containers(objects, "worker")[0]
    pod = worker["spec"]["template"]["spec"]
    grace = float(env_value(container, "TUNEFLEET_STOP_GRACE_S") or default_stop_grace_s())
    assert pod["terminationGracePeriodSeconds"] > grace + release_wait_s()
    container["env"] = [e for e in container["env"] if e["name"] != "TUNEFLEET_STOP_GRACE_S"]
    pod["terminationGracePeriodSeconds"] = default_stop_grace_s() + release_wait_s()
    assert grace_problems(objects) != []
    pod["terminationGracePeriodSeconds"] = default_stop_grace_s() + release_wait_s() + 1
    assert grace_problems(objects) == []


# ---------------------------------------------------------------------------------------------
# Broken copies: each check must catch what it is for


def _worker(objects: list[Obj]) -> Obj:
    return fleet_containers(objects, "worker")[0][1]


def _daemon(objects: list[Obj]) -> Obj:
    return fleet_containers(objects, "daemon")[0][1]


def _set_env(container: Obj, name: str, value: str | None) -> None:
    container["env"] = [e for e in container["env"] if e["name"] != name]
    if value is not None:
        container["env"].append({"name": name, "value": value})


def _spec(objects: list[Obj], kind: str, name: str) -> Obj:
    spec = find(objects, kind, name)["spec"]
    assert isinstance(spec, dict)
    return spec


def _trigger(objects: list[Obj]) -> Obj:
    trigger = _spec(objects, "ScaledObject", "worker")["triggers"][0]
    assert isinstance(trigger, dict)
    return trigger


Mutation = Callable[[list[Obj]], None]

WRONG_FIELDS: dict[str, Mutation] = {
    "misspelt container field": lambda o: _worker(o).update(envv=[]),
    "replicas as a string": lambda o: _spec(o, "Deployment", "daemon").update(replicas="1"),
    "probe without a handler field": lambda o: _worker(o)["livenessProbe"].update(httpGett={}),
    "unknown pod field": lambda o: _spec(o, "Deployment", "worker")["template"]["spec"].update(
        gracePeriod=40
    ),
    "scaledobject minReplicas": lambda o: _spec(o, "ScaledObject", "worker").update(minReplicas=1),
    "scaledobject listLength not a string": lambda o: _trigger(o)["metadata"].update(listLength=10),
    "scaledobject fallback behavior unknown": lambda o: _spec(o, "ScaledObject", "worker")["fallback"].update(
        behavior="keepHigher"
    ),
    "scaledobject trigger field": lambda o: _trigger(o).update(metric="x"),
    "triggerauthentication field misspelt": lambda o: _spec(
        o, "TriggerAuthentication", "redis-scaler"
    ).update(secretTargetRefs=[]),
    "servicemonitor bearer token field": lambda o: _spec(o, "ServiceMonitor", "daemon")["endpoints"][
        0
    ].update(bearerToken="x"),
    "pdb field": lambda o: _spec(o, "PodDisruptionBudget", "worker").update(maxUnavailble=1),
}


@pytest.mark.parametrize("case", list(WRONG_FIELDS))
def test_a_manifest_with_a_wrong_field_fails_validation(case: str) -> None:
    """A misspelt, misplaced or mistyped field fails the schema check (Kubernetes' and the vendored CRDs')."""
    objects = rendered(BASE)
    WRONG_FIELDS[case](objects)
    assert schema_problems(objects) != []


def test_a_wrong_field_in_a_file_fails_through_the_overlay(tmp_path: Path) -> None:
    """A field misspelt in a base file (copied) is rendered into the overlay and fails validation there."""
    shutil.copytree(K8S, tmp_path / "k8s")
    worker = tmp_path / "k8s" / "base" / "worker.yaml"
    text = worker.read_text()
    assert "      terminationGracePeriodSeconds: 40\n" in text
    worker.write_text(text.replace("terminationGracePeriodSeconds: 40", "terminationGracePeriod: 40"))
    problems = schema_problems(render(tmp_path / "k8s" / "overlays" / "external-redis"))
    assert len(problems) == 1 and "terminationGracePeriod" in problems[0]


BROKEN: dict[str, tuple[Path, Mutation, Check]] = {
    "grace too short": (
        BASE,
        lambda o: _spec(o, "Deployment", "worker")["template"]["spec"].update(
            terminationGracePeriodSeconds=15
        ),
        grace_problems,
    ),
    "stop grace raised": (
        BASE,
        lambda o: _set_env(_worker(o), "TUNEFLEET_STOP_GRACE_S", "60"),
        grace_problems,
    ),
    "threshold off concurrency": (
        BASE,
        lambda o: _set_env(_worker(o), "TUNEFLEET_CONCURRENCY", "4"),
        scaling_problems,
    ),
    "prometheus scaler": (BASE, lambda o: _trigger(o).update(type="prometheus"), scaling_problems),
    "counts another key": (
        BASE,
        lambda o: _trigger(o)["metadata"].update(listName="arq:queue"),
        scaling_problems,
    ),
    "queue renamed": (BASE, lambda o: _set_env(_worker(o), "TUNEFLEET_QUEUE", "q2"), scaling_problems),
    "keda as the default user": (BASE, lambda o: _trigger(o)["metadata"].pop("username"), scaling_problems),
    "keda with the worker's password": (
        OVERLAY,
        lambda o: _spec(o, "TriggerAuthentication", "redis-scaler")["secretTargetRef"][0].update(
            key="redis-worker-password"
        ),
        scaling_problems,
    ),
    "static fallback": (
        BASE,
        lambda o: _spec(o, "ScaledObject", "worker")["fallback"].pop("behavior"),
        scaling_problems,
    ),
    "scales the daemon": (
        BASE,
        lambda o: _spec(o, "ScaledObject", "worker")["scaleTargetRef"].update(name="daemon"),
        scaling_problems,
    ),
    "replicas fight keda": (
        BASE,
        lambda o: _spec(o, "Deployment", "worker").update(replicas=2),
        scaling_problems,
    ),
    "health off": (BASE, lambda o: _set_env(_worker(o), "TUNEFLEET_HEALTH_PORT", None), health_problems),
    "health on loopback": (
        BASE,
        lambda o: _set_env(_worker(o), "TUNEFLEET_HEALTH_HOST", "127.0.0.1"),
        health_problems,
    ),
    "liveness on readyz": (
        BASE,
        lambda o: _worker(o)["livenessProbe"]["httpGet"].update(path=READYZ),
        health_problems,
    ),
    "daemon probed elsewhere": (
        BASE,
        lambda o: _set_env(_daemon(o), "TUNEFLEET_API_PORT", "9000"),
        health_problems,
    ),
    "root pod": (
        BASE,
        lambda o: _spec(o, "Deployment", "worker")["template"]["spec"]["securityContext"].update(
            runAsNonRoot=False
        ),
        security_problems,
    ),
    "writable root": (
        BASE,
        lambda o: _daemon(o)["securityContext"].update(readOnlyRootFilesystem=False),
        security_problems,
    ),
    "no limits": (BASE, lambda o: _worker(o)["resources"].pop("limits"), security_problems),
    "latest image": (BASE, lambda o: _worker(o).update(image="tunefleet:latest"), security_problems),
    "misspelt setting": (BASE, lambda o: _set_env(_worker(o), "TUNEFLEET_STOP_GRACE", "10"), env_problems),
    "unknown secret key": (
        BASE,
        lambda o: env_of(_daemon(o))["TUNEFLEET_API_TOKEN"]["valueFrom"]["secretKeyRef"].update(key="token"),
        env_problems,
    ),
    "store read-write-once": (
        BASE,
        lambda o: _spec(o, "PersistentVolumeClaim", "store").update(accessModes=["ReadWriteOnce"]),
        store_problems,
    ),
    "store elsewhere": (BASE, lambda o: _set_env(_worker(o), "TUNEFLEET_STORE", "/data"), store_problems),
    "redis without aof": (
        BASE,
        lambda o: _spec(o, "StatefulSet", "redis")["template"]["spec"]["containers"][0].update(
            args=["redis-server"]
        ),
        redis_problems,
    ),
    "redis open to all": (
        BASE,
        lambda o: _spec(o, "NetworkPolicy", "redis").update(ingress=[{}]),
        redis_problems,
    ),
    "redis url elsewhere": (
        BASE,
        lambda o: _set_env(_worker(o), "TUNEFLEET_REDIS_URL", "redis://localhost:6379/0"),
        redis_problems,
    ),
    "workers as submitter": (
        OVERLAY,
        lambda o: env_of(_worker(o))["TUNEFLEET_REDIS_URL"]["valueFrom"]["secretKeyRef"].update(
            key="redis-submitter-url"
        ),
        external_redis_problems,
    ),
    "overlay url literal": (
        OVERLAY,
        lambda o: _set_env(_worker(o), "TUNEFLEET_REDIS_URL", "redis://redis:6379/0"),
        external_redis_problems,
    ),
    "unknown subcommand": (BASE, lambda o: _worker(o).update(args=["wroker"]), command_problems),
    "tuning not in the image": (
        BASE,
        lambda o: _daemon(o).update(args=["daemon", "/tunings/mine.yaml"]),
        command_problems,
    ),
    "service-account token": (
        SANDBOXED,
        lambda o: _spec(o, "Deployment", "worker")["template"]["spec"].pop("automountServiceAccountToken"),
        pod_problems,
    ),
    "probe of kubernetes' default timeout": (
        BASE,
        lambda o: _worker(o)["readinessProbe"].pop("timeoutSeconds"),
        pod_problems,
    ),
    "redis by tag": (
        BASE,
        lambda o: _spec(o, "StatefulSet", "redis")["template"]["spec"]["containers"][0].update(
            image="redis:7.2.5"
        ),
        pod_problems,
    ),
    "worker gets the api token": (
        OVERLAY,
        lambda o: _worker(o)["env"].append(env_of(_daemon(o))["TUNEFLEET_API_TOKEN"]),
        worker_secret_problems,
    ),
    "worker reads the submitter's password": (
        BASE,
        lambda o: env_of(_worker(o))["TUNEFLEET_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"].update(
            key="redis-submitter-password"
        ),
        worker_secret_problems,
    ),
    "no egress policy": (
        BASE,
        lambda o: o.remove(find(o, "NetworkPolicy", "worker-egress")),
        egress_problems,
    ),
    "egress to everything": (
        OVERLAY,
        lambda o: _spec(o, "NetworkPolicy", "worker-egress")["egress"].append({}),
        egress_problems,
    ),
    "egress to the daemon": (
        BASE,
        lambda o: _spec(o, "NetworkPolicy", "worker-egress")["egress"].append(
            {
                "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "daemon"}}}],
                "ports": [{"port": 8321}],
            }
        ),
        egress_problems,
    ),
    "acl file drifted": (
        BASE,
        lambda o: find(o, "ConfigMap", "redis-acl")["data"].update(
            {"users.acl": "user default on nopass ~* +@all\n"}
        ),
        acl_problems,
    ),
    "redis with one shared password": (
        BASE,
        lambda o: _spec(o, "StatefulSet", "redis")["template"]["spec"]["containers"][0].update(
            args=["exec redis-server --requirepass x --appendonly yes"]
        ),
        acl_problems,
    ),
    "worker as the default user": (
        SANDBOXED,
        lambda o: _set_env(_worker(o), "TUNEFLEET_REDIS_URL", "redis://redis:6379/0"),
        acl_problems,
    ),
    "scrape without token": (
        BASE,
        lambda o: _spec(o, "ServiceMonitor", "daemon")["endpoints"][0].pop("authorization"),
        monitoring_problems,
    ),
    "pdb selects nothing": (
        BASE,
        lambda o: _spec(o, "PodDisruptionBudget", "worker").update(selector={"matchLabels": {"x": "y"}}),
        monitoring_problems,
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_manifest_is_caught(case: str) -> None:
    """A manifest broken in this way is reported by the check responsible for it."""
    folder, mutate, check = BROKEN[case]
    objects = rendered(folder)
    assert check(objects) == []
    mutate(objects)
    assert check(objects) != []


def test_the_fallback_never_scales_a_busy_fleet_down() -> None:
    """When KEDA cannot read the queue, the shipped rule keeps every worker count it may find (at least
    the fallback's), and with the queue readable it wants one worker per TUNEFLEET_CONCURRENCY cases."""
    rule = shipped_rule()
    for current in range(rule.min_workers, rule.max_workers + 1):
        assert rule.desired(None, current) >= current
    assert rule.desired(None, rule.min_workers) == rule.fallback_workers
    assert rule.desired(rule.per_worker * 3, 1) == 3 and rule.desired(0, 5) == rule.min_workers
