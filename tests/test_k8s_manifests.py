"""deploy/k8s rendered offline (tests/support/kustomize.py) and checked: every object against the
Kubernetes and custom-resource schemas, and the manifests against the code (settings, CLI, metrics,
the worker's stop grace).

Each check returns the problems it finds; the rendered trees must have none, and deliberately broken
copies must have some, so that no check passes whatever the manifests say.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import typer
import yaml

from service.errors import ConfigError
from service.settings import FleetSettings
from service.tunings import load_tuning_file
from tests.support.grace import default_stop_grace_s, release_wait_s
from tests.support.k8s import (
    K8S,
    ROOT,
    Obj,
    container_port,
    env_of,
    env_value,
    find,
    pod_templates,
    schema_errors,
    selects,
)
from tests.support.kustomize import render
from tests.test_deploy_files import PENDING_SETTINGS, cli_commands, cli_group, instructions

BASE = K8S / "base"
OVERLAY = K8S / "overlays" / "external-redis"
SECRET_EXAMPLE = K8S / "secret.example.yaml"
SECRET_NAME = "tunefleet"
HEALTHZ, READYZ = "/healthz", "/readyz"

Check = Callable[[list[Obj]], list[str]]


@cache
def _rendered(folder: Path) -> tuple[Obj, ...]:
    return tuple(render(folder))


def rendered(folder: Path) -> list[Obj]:
    """A fresh copy of the objects a kustomization renders to (the render itself is done once)."""
    return copy.deepcopy(list(_rendered(folder)))


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


PENDING_DEFAULTS = {"health_host": "127.0.0.1", "health_port": 0}
"""The defaults of the health settings another branch adds (see PENDING_SETTINGS), until it is merged."""


def setting_default(name: str) -> Any:
    field = FleetSettings.model_fields.get(name)
    return field.default if field is not None else PENDING_DEFAULTS[name]


# ---------------------------------------------------------------------------------------------
# The checks


def schema_problems(objects: list[Obj]) -> list[str]:
    return [error for obj in objects for error in schema_errors(obj)]


def grace_problems(objects: list[Obj]) -> list[str]:
    """A worker pod's terminationGracePeriodSeconds exceeds its stop_grace_s plus the hand-back wait."""
    problems = []
    workers = fleet_containers(objects, "worker")
    if not workers:
        problems.append("no container runs `tunefleet worker`")
    for workload, container in workers:
        configured = env_value(container, "TUNEFLEET_STOP_GRACE_S")
        grace = float(configured) if configured is not None else default_stop_grace_s()
        needed = grace + release_wait_s()
        period = workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        if period <= needed:
            problems.append(
                f"{workload['metadata']['name']}: terminationGracePeriodSeconds {period} is not more than "
                f"stop_grace_s {grace:g} + the {release_wait_s():g} s hand-back wait"
            )
    return problems


def exported_metrics() -> set[str]:
    source = (ROOT / "service" / "metrics.py").read_text()
    return {f"tunefleet_{name}" for name in re.findall(r'_(?:gauge|counter)\(\s*"([a-z_]+)"', source)}


def scaling_problems(objects: list[Obj]) -> list[str]:
    """KEDA scales the worker Deployment on metrics the daemon exports, one worker per `concurrency`."""
    scaled = [o for o in objects if o["kind"] == "ScaledObject"]
    if len(scaled) != 1:
        return [f"expected one ScaledObject, found {len(scaled)}"]
    spec, problems = scaled[0]["spec"], []
    target = spec["scaleTargetRef"]["name"]
    workers = {
        w["metadata"]["name"]: c for w, c in fleet_containers(objects, "worker") if w["kind"] == "Deployment"
    }
    if target not in workers:
        return [f"the ScaledObject scales {target!r}, not a worker Deployment ({sorted(workers)})"]
    configured = env_value(workers[target], "TUNEFLEET_CONCURRENCY")
    concurrency = int(configured) if configured is not None else int(setting_default("concurrency"))
    namespace = scaled[0]["metadata"].get("namespace")
    for trigger in spec["triggers"]:
        metadata = trigger["metadata"]
        if trigger["type"] != "prometheus":
            problems.append(
                f"trigger {trigger['type']!r}: the queue is a sorted set, use the prometheus scaler"
            )
            continue
        if (
            float(metadata["threshold"]) != concurrency
            or trigger.get("metricType", "AverageValue") != "AverageValue"
        ):
            problems.append(
                f"threshold {metadata['threshold']} is not the worker's concurrency {concurrency}"
            )
        used = set(re.findall(r"tunefleet_[a-z_]+", metadata["query"]))
        if not {"tunefleet_queue_depth", "tunefleet_cases_in_progress"} <= used:
            problems.append(f"the query counts neither queued nor running cases: {metadata['query']}")
        if used - exported_metrics():
            problems.append(
                f"the query uses metrics the daemon does not export: {sorted(used - exported_metrics())}"
            )
        for queried in re.findall(r'namespace="([^"]*)"', metadata["query"]):
            if queried != namespace:
                problems.append(f"the query reads namespace {queried!r}; the fleet runs in {namespace!r}")
    down = (
        spec.get("advanced", {})
        .get("horizontalPodAutoscalerConfig", {})
        .get("behavior", {})
        .get("scaleDown", {})
    )
    if down.get("stabilizationWindowSeconds", 300) < 300:
        problems.append("scale-down stabilization under 5 minutes: workers would come and go with each poll")
    if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
        problems.append("minReplicaCount exceeds maxReplicaCount")
    return problems


def health_problems(objects: list[Obj]) -> list[str]:
    """Daemon and workers are probed on their health endpoints, on the port they serve them on."""
    problems = []
    for subcommand, port_var, host_var in (
        ("worker", "TUNEFLEET_HEALTH_PORT", "TUNEFLEET_HEALTH_HOST"),
        ("daemon", "TUNEFLEET_API_PORT", "TUNEFLEET_API_HOST"),
    ):
        for workload, container in fleet_containers(objects, subcommand):
            name = workload["metadata"]["name"]
            port = env_value(container, port_var) or str(
                setting_default(port_var.removeprefix("TUNEFLEET_").lower())
            )
            if env_value(container, host_var) != "0.0.0.0":
                problems.append(f"{name}: {host_var} is not 0.0.0.0: the kubelet could not reach the probes")
            wanted = {"livenessProbe": HEALTHZ, "readinessProbe": READYZ}
            for probe, path in wanted.items():
                get = (container.get(probe) or {}).get("httpGet") or {}
                served = container_port(container, get.get("port", 0))
                if get.get("path") != path or str(served) != port or port == "0":
                    problems.append(f"{name}: {probe} is not GET {path} on port {port} ({get or 'none'})")
    return problems


def security_problems(objects: list[Obj]) -> list[str]:
    """Every pod runs as non-root, read-only root filesystem, no privilege escalation, with resources."""
    problems = []
    for name, template in pod_templates(objects).items():
        pod = template["spec"]
        if (pod.get("securityContext") or {}).get("runAsNonRoot") is not True:
            problems.append(f"{name}: the pod is not runAsNonRoot")
        for container in pod["containers"]:
            context = container.get("securityContext") or {}
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{name}: allowPrivilegeEscalation is not false")
            if context.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{name}: the root filesystem is writable")
            if "ALL" not in (context.get("capabilities") or {}).get("drop", []):
                problems.append(f"{name}: capabilities are not all dropped")
            resources = container.get("resources") or {}
            if not {"cpu", "memory"} <= set(resources.get("requests", {})) or "memory" not in resources.get(
                "limits", {}
            ):
                problems.append(f"{name}: no cpu and memory requests and memory limit")
            image = str(container.get("image", ""))
            if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
                problems.append(f"{name}: image {image!r} has no pinned tag")
    return problems


def secret_keys() -> set[str]:
    secret = yaml.safe_load(SECRET_EXAMPLE.read_text())
    return set(secret.get("stringData", {})) | set(secret.get("data", {}))


def secret_refs(node: Any) -> list[Obj]:
    """Every reference to a Secret's key below `node` (env secretKeyRef, ServiceMonitor credentials)."""
    if isinstance(node, list):
        return [ref for item in node for ref in secret_refs(item)]
    if not isinstance(node, dict):
        return []
    found = [node[k] for k in ("secretKeyRef", "credentials") if isinstance(node.get(k), dict)]
    return found + [ref for value in node.values() for ref in secret_refs(value)]


def env_problems(objects: list[Obj]) -> list[str]:
    """TUNEFLEET_* variables are fleet settings; secret references name keys the Secret has."""
    problems, fields = [], set(FleetSettings.model_fields) | PENDING_SETTINGS
    for name, template in pod_templates(objects).items():
        for container in template["spec"]["containers"]:
            for var, entry in env_of(container).items():
                if var.startswith("TUNEFLEET_") and var.removeprefix("TUNEFLEET_").lower() not in fields:
                    problems.append(f"{name}: {var} is not a fleet setting")
                ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
                if ref and (ref["name"] != SECRET_NAME or ref["key"] not in secret_keys()):
                    problems.append(f"{name}: {var} reads {ref}, not a key of the Secret {SECRET_NAME}")
    return problems


def store_problems(objects: list[Obj]) -> list[str]:
    """The daemon and every worker mount one ReadWriteMany claim at their store path."""
    problems, claims = [], set()
    for workload, container in fleet_containers(objects, "worker") + fleet_containers(objects, "daemon"):
        store = env_value(container, "TUNEFLEET_STORE") or str(setting_default("store"))
        mounted = [m["name"] for m in container.get("volumeMounts", []) if m["mountPath"] == store]
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
        claim = (volumes.get(mounted[0], {}) if mounted else {}).get("persistentVolumeClaim", {})
        if not claim:
            problems.append(f"{workload['metadata']['name']}: no claim mounted at the store path {store}")
        else:
            claims.add(claim["claimName"])
    for claim_name in claims:
        pvcs = [
            o for o in objects if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == claim_name
        ]
        if not pvcs or pvcs[0]["spec"].get("accessModes") != ["ReadWriteMany"]:
            problems.append(f"the store claim {claim_name!r} is not a ReadWriteMany PersistentVolumeClaim")
    if len(claims) > 1:
        problems.append(f"daemon and workers mount different stores: {sorted(claims)}")
    return problems


def redis_problems(objects: list[Obj]) -> list[str]:
    """In-cluster Redis: AOF on a claimed volume, reached by URL, and only by the daemon and the workers."""
    problems = []
    redis = find(objects, "StatefulSet", "redis")
    container = redis["spec"]["template"]["spec"]["containers"][0]
    script = " ".join([*container.get("command", []), *container.get("args", [])])
    if "--appendonly yes" not in script:
        problems.append("redis: the append-only file is not on")
    claimed = {t["metadata"]["name"] for t in redis["spec"].get("volumeClaimTemplates", [])}
    if not any(m["mountPath"] == "/data" and m["name"] in claimed for m in container.get("volumeMounts", [])):
        problems.append("redis: /data is not on a PersistentVolumeClaim")
    service = find(objects, "Service", "redis")
    for workload, fleet in fleet_containers(objects, "worker") + fleet_containers(objects, "daemon"):
        url = env_value(fleet, "TUNEFLEET_REDIS_URL") or ""
        if not re.match(rf"^rediss?://(?:[^@/]*@)?{service['metadata']['name']}:6379/", url):
            problems.append(
                f"{workload['metadata']['name']}: TUNEFLEET_REDIS_URL {url!r} is not the redis Service"
            )
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    redis_labels = redis["spec"]["template"]["metadata"]["labels"]
    guarding = [p for p in policies if selects(p["spec"]["podSelector"], redis_labels)]
    if not guarding:
        return [*problems, "no NetworkPolicy guards the Redis pods"]
    allowed = set()
    for name, template in pod_templates(objects).items():
        labels = template["metadata"].get("labels", {})
        for rule in guarding[0]["spec"].get("ingress", []):
            sources = rule.get("from")
            if sources is None or any(
                "podSelector" in s and "namespaceSelector" not in s and selects(s["podSelector"], labels)
                for s in sources
            ):
                allowed.add(name)
    fleet_pods = {
        w["metadata"]["name"]
        for w, _ in fleet_containers(objects, "worker") + fleet_containers(objects, "daemon")
    }
    if allowed != fleet_pods:
        problems.append(
            f"Redis is reachable from {sorted(allowed)}, not exactly the fleet's pods {sorted(fleet_pods)}"
        )
    return problems


def external_redis_problems(objects: list[Obj]) -> list[str]:
    """No Redis in the cluster; daemon and workers take the URL and the password from the Secret."""
    problems = [f"{o['kind']}/redis is still there" for o in objects if o["metadata"]["name"] == "redis"]
    for workload, container in fleet_containers(objects, "worker") + fleet_containers(objects, "daemon"):
        env = env_of(container)
        for var in ("TUNEFLEET_REDIS_URL", "TUNEFLEET_REDIS_PASSWORD"):
            if "secretKeyRef" not in (env.get(var, {}).get("valueFrom") or {}):
                problems.append(f"{workload['metadata']['name']}: {var} does not come from the Secret")
    return problems


def image_paths() -> dict[PurePosixPath, Path]:
    """Where the Dockerfile's COPY puts repository folders in the image."""
    steps = instructions((ROOT / "deploy" / "Dockerfile").read_text())
    copies = [a.split() for k, a in steps if k == "COPY" and "--from" not in a]
    return {PurePosixPath(words[-1]): ROOT / words[0] for words in copies if len(words) == 2}


def command_problems(objects: list[Obj]) -> list[str]:
    """Every tunefleet container's args parse as a subcommand; a daemon's tuning files are in the image."""
    problems, group, commands = [], cli_group(), cli_commands()
    for name, template in pod_templates(objects).items():
        for container in template["spec"]["containers"]:
            args = [str(a) for a in container.get("args", [])]
            if "command" in container or not str(container["image"]).startswith("tunefleet"):
                continue
            command = commands.get(args[0]) if args else None
            if command is None:
                problems.append(f"{name}: args {args} do not start with a tunefleet subcommand")
                continue
            try:
                command.make_context(args[0], args[1:], parent=typer.Context(group, info_name="tunefleet"))
            except (typer.TyperException, typer.Exit) as exc:
                problems.append(f"{name}: `tunefleet {' '.join(args)}` does not parse: {exc}")
            if args[0] == "daemon":
                problems += tuning_problems(name, [a for a in args[1:] if not a.startswith("-")])
    return problems


def tuning_problems(name: str, files: list[str]) -> list[str]:
    problems = []
    for file in files:
        inside = PurePosixPath(file)
        hosts = [src / inside.relative_to(dst) for dst, src in image_paths().items() if dst in inside.parents]
        if not hosts:
            problems.append(f"{name}: tuning file {file} is not in the image (deploy/Dockerfile's COPY)")
            continue
        try:
            load_tuning_file(hosts[0])
        except ConfigError as exc:
            problems.append(f"{name}: tuning file {file}: {exc}")
    return problems


def monitoring_problems(objects: list[Obj]) -> list[str]:
    """Prometheus scrapes the daemon's /metrics with the API token from the Secret; the PDB covers workers."""
    problems = []
    daemon = find(objects, "Service", "daemon")
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    if not monitors or not selects(monitors[0]["spec"]["selector"], daemon["metadata"].get("labels", {})):
        problems.append("no ServiceMonitor selects the daemon's Service")
    ports = {p.get("name") for p in daemon["spec"]["ports"]}
    for endpoint in monitors[0]["spec"]["endpoints"] if monitors else []:
        credentials = (endpoint.get("authorization") or {}).get("credentials") or {}
        if endpoint.get("port") not in ports or endpoint.get("path") != "/metrics":
            problems.append(f"the ServiceMonitor scrapes {endpoint.get('port')}{endpoint.get('path')}")
        if (credentials.get("name"), credentials.get("key")) != (SECRET_NAME, "api-token"):
            problems.append("the ServiceMonitor sends no bearer token from the Secret (/metrics needs it)")
    worker_labels = [
        w["spec"]["template"]["metadata"]["labels"] for w, _ in fleet_containers(objects, "worker")
    ]
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    if not any(selects(b["spec"]["selector"], labels) for b in budgets for labels in worker_labels):
        problems.append("no PodDisruptionBudget covers the workers")
    return problems


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
}
TREES: dict[str, tuple[Path, dict[str, Check]]] = {
    "base": (BASE, {**BOTH, "redis": redis_problems}),
    "external-redis": (OVERLAY, {**BOTH, "external redis": external_redis_problems}),
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
        ("ServiceMonitor", "daemon"),
        ("PersistentVolumeClaim", "store"),
    } <= kinds
    overlay = {(o["kind"], o["metadata"]["name"]) for o in rendered(OVERLAY)}
    assert overlay == kinds - {("StatefulSet", "redis"), ("Service", "redis"), ("NetworkPolicy", "redis")}
    namespaced = [o for o in rendered(BASE) if o["kind"] != "Namespace"]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"tunefleet"}


def test_secret_example_is_valid_and_has_every_key_used() -> None:
    """The example Secret validates, and holds every key that a manifest reads from it."""
    secret = yaml.safe_load(SECRET_EXAMPLE.read_text())
    assert schema_errors(secret) == []
    refs = [ref for folder in (BASE, OVERLAY) for obj in rendered(folder) for ref in secret_refs(obj)]
    assert {ref["name"] for ref in refs} == {SECRET_NAME}
    assert {"api-token", "redis-password", "redis-url"} <= {ref["key"] for ref in refs} <= secret_keys()


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
    "scaledobject threshold not a string": lambda o: _trigger(o)["metadata"].update(threshold=10),
    "scaledobject prometheus field misspelt": lambda o: _trigger(o)["metadata"].update(serverAdress="x"),
    "scaledobject trigger field": lambda o: _trigger(o).update(metric="x"),
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
    "redis list scaler": (BASE, lambda o: _trigger(o).update(type="redis"), scaling_problems),
    "query of no metric": (
        BASE,
        lambda o: _trigger(o)["metadata"].update(query="sum(tunefleet_queue_length)"),
        scaling_problems,
    ),
    "query of another namespace": (
        OVERLAY,
        lambda o: _trigger(o)["metadata"].update(
            query=_trigger(o)["metadata"]["query"].replace('tunefleet"', 'x"')
        ),
        scaling_problems,
    ),
    "scales the daemon": (
        BASE,
        lambda o: _spec(o, "ScaledObject", "worker")["scaleTargetRef"].update(name="daemon"),
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
