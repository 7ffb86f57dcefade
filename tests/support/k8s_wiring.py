"""Checks of how rendered deploy/k8s objects are wired together: Redis (in the cluster or outside),
the CLI's arguments and the tuning files in the image, Prometheus and the disruption budget. Each
returns the problems it finds, [] when there are none."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from service.client.tunings import load_tuning_file
from service.core.errors import ConfigError
from tests.support.dockerfile import DOCKERFILE, image_paths
from tests.support.fleet_cli import argv_problems
from tests.support.k8s import (
    SECRET_NAME,
    Obj,
    env_of,
    env_value,
    find,
    fleet_containers,
    pod_templates,
    selects,
)


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


ACL_USERS = {"worker": "worker", "daemon": "submitter"}
"""The user of deploy/redis/users.acl each subcommand connects as, to a Redis run with that file."""


def external_redis_problems(objects: list[Obj]) -> list[str]:
    """No Redis in the cluster; the daemon and the workers each connect as their own ACL user, URL and
    password from the Secret."""
    problems = [f"{o['kind']}/redis is still there" for o in objects if o["metadata"]["name"] == "redis"]
    for subcommand, user in ACL_USERS.items():
        for workload, container in fleet_containers(objects, subcommand):
            env = env_of(container)
            for var, key in (("TUNEFLEET_REDIS_URL", "url"), ("TUNEFLEET_REDIS_PASSWORD", "password")):
                ref = (env.get(var, {}).get("valueFrom") or {}).get("secretKeyRef") or {}
                wanted = {"name": SECRET_NAME, "key": f"redis-{user}-{key}"}
                if ref != wanted:
                    problems.append(
                        f"{workload['metadata']['name']}: {var} reads {ref or 'no Secret'}, not {wanted}"
                    )
    return problems


def command_problems(objects: list[Obj]) -> list[str]:
    """Every tunefleet container's args parse as a subcommand; a daemon's tuning files are in the image."""
    problems = []
    for name, template in pod_templates(objects).items():
        for container in template["spec"]["containers"]:
            args = [str(a) for a in container.get("args", [])]
            if "command" in container or not str(container["image"]).startswith("tunefleet"):
                continue
            problems += [f"{name}: {problem}" for problem in argv_problems(args)]
            if args[:1] == ["daemon"]:
                problems += tuning_problems(name, [a for a in args[1:] if not a.startswith("-")])
    return problems


def tuning_problems(name: str, files: list[str]) -> list[str]:
    problems = []
    for file in files:
        inside = PurePosixPath(file)
        hosts = [
            src / inside.relative_to(dst)
            for dst, src in image_paths(DOCKERFILE.read_text()).items()
            if dst in inside.parents
        ]
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
