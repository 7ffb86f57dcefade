"""Checks of rendered deploy/k8s objects against the code: schemas, the stop grace, scaling, health,
security, settings and the store. Each returns the problems it finds, [] when there are none."""

from __future__ import annotations

import yaml

from tests.support.fleet_cli import is_setting, setting_default
from tests.support.grace import default_stop_grace_s, release_wait_s
from tests.support.k8s import (
    SECRET_EXAMPLE,
    SECRET_NAME,
    Obj,
    container_port,
    env_of,
    env_value,
    fleet_containers,
    pod_templates,
    schema_errors,
)
from tests.support.k8s_containment import queue_of, trigger_problems

HEALTHZ, READYZ = "/healthz", "/readyz"


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


def scaling_problems(objects: list[Obj]) -> list[str]:
    """KEDA scales the worker Deployment on the queue itself, one worker per `concurrency`, slowly
    downwards, never down for want of its metric, and the Deployment leaves the count to it."""
    scaled = [o for o in objects if o["kind"] == "ScaledObject"]
    if len(scaled) != 1:
        return [f"expected one ScaledObject, found {len(scaled)}"]
    spec, problems = scaled[0]["spec"], []
    target = spec["scaleTargetRef"]["name"]
    workers = {
        w["metadata"]["name"]: (w, c)
        for w, c in fleet_containers(objects, "worker")
        if w["kind"] == "Deployment"
    }
    if target not in workers:
        return [f"the ScaledObject scales {target!r}, not a worker Deployment ({sorted(workers)})"]
    workload, container = workers[target]
    if "replicas" in workload["spec"]:
        problems.append(f"Deployment {target} sets replicas: every apply would reset KEDA's count")
    configured = env_value(container, "TUNEFLEET_CONCURRENCY")
    concurrency = int(configured) if configured is not None else int(setting_default("concurrency"))
    for trigger in spec["triggers"]:
        problems += trigger_problems(objects, trigger, concurrency, queue_of(container))
    if (spec.get("fallback") or {}).get("behavior") != "currentReplicasIfHigher":
        problems.append("fallback may scale a busy fleet down when the metric is missing")
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
    if behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 300) < 300:
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


def env_problems(objects: list[Obj]) -> list[str]:
    """TUNEFLEET_* variables are fleet settings; secret references name keys the Secret has."""
    problems = []
    for name, template in pod_templates(objects).items():
        for container in template["spec"]["containers"]:
            for var, entry in env_of(container).items():
                if var.startswith("TUNEFLEET_") and not is_setting(var):
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
