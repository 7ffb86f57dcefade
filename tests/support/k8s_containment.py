"""Checks that rendered deploy/k8s objects keep agents away from the fleet: no service-account token and
no API token in worker pods, one Redis ACL user per role and no default user, an egress policy on the
workers, probes that wait longer than the health checks, and images pinned by digest. Each returns the
problems it finds, [] when there are none."""

from __future__ import annotations

import re

from service.core.io.health import CHECK_TIMEOUT_S
from tests.support.fleet_cli import setting_default
from tests.support.k8s import (
    ROOT,
    SECRET_NAME,
    Obj,
    env_of,
    env_value,
    fleet_containers,
    pod_templates,
    selects,
)

ACL_DIR = ROOT / "deploy" / "redis"
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
ROLE_USERS = {"worker": "worker", "daemon": "submitter"}
API_TOKENS = {"TUNEFLEET_API_TOKEN", "TUNEFLEET_API_READ_TOKEN"}


def pod_problems(objects: list[Obj]) -> list[str]:
    """No pod mounts a service-account token; every probe waits longer than the checks' own 2 s; every
    image but tunefleet's own (pinned in kustomization.yaml) is pinned by its digest."""
    problems = []
    for name, template in pod_templates(objects).items():
        pod = template["spec"]
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: the pod mounts a service-account token")
        for container in pod["containers"]:
            for probe in PROBES:
                timeout_s = (container.get(probe) or {"timeoutSeconds": CHECK_TIMEOUT_S + 1}).get(
                    "timeoutSeconds", 1
                )
                if timeout_s <= CHECK_TIMEOUT_S:
                    problems.append(
                        f"{name}: {probe} times out after {timeout_s} s, not more than the checks' "
                        f"{CHECK_TIMEOUT_S:g} s"
                    )
            image = str(container.get("image", ""))
            if not image.startswith("tunefleet") and not DIGEST.search(image):
                problems.append(f"{name}: image {image!r} is not pinned by digest")
    return problems


def worker_secret_problems(objects: list[Obj]) -> list[str]:
    """A worker reads no API token and no Secret key but its own Redis user's."""
    problems = []
    for workload, container in fleet_containers(objects, "worker"):
        name = workload["metadata"]["name"]
        for var, entry in env_of(container).items():
            ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
            if var in API_TOKENS or ref.get("key") == "api-token":
                problems.append(f"{name}: the worker gets the API token ({var})")
            elif ref and not str(ref.get("key", "")).startswith("redis-worker-"):
                problems.append(f"{name}: the worker reads the Secret's {ref.get('key')!r}")
    return problems


def egress_problems(objects: list[Obj]) -> list[str]:
    """An egress NetworkPolicy selects the workers; none of its rules opens everything or the daemon."""
    daemons = [w["spec"]["template"]["metadata"]["labels"] for w, _ in fleet_containers(objects, "daemon")]
    problems, guarded = [], False
    for workload, _ in fleet_containers(objects, "worker"):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
            spec = policy["spec"]
            if "Egress" not in spec.get("policyTypes", []) or not selects(spec["podSelector"], labels):
                continue
            guarded = True
            for rule in spec.get("egress", []):
                if not rule.get("to") or not rule.get("ports"):
                    problems.append(f"{policy['metadata']['name']}: a rule opens every destination or port")
                for peer in rule.get("to", []):
                    if "podSelector" in peer and any(selects(peer["podSelector"], d) for d in daemons):
                        problems.append(f"{policy['metadata']['name']}: the workers may reach the daemon")
    if not guarded:
        problems.append("no egress NetworkPolicy selects the workers")
    return problems


def acl_problems(objects: list[Obj]) -> list[str]:
    """The in-cluster Redis loads deploy/redis's users (no default user, no shared password), the daemon
    and the workers connect as their own users, and KEDA as `scaler` with its own password."""
    problems = []
    config = next(
        (o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "redis-acl"), {}
    )
    for file in ("users.acl", "render-acl.sh"):
        if config.get("data", {}).get(file) != (ACL_DIR / file).read_text():
            problems.append(f"ConfigMap redis-acl: {file} is not deploy/redis/{file}")
    redis = next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "redis")
    script = " ".join(map(str, redis["spec"]["template"]["spec"]["containers"][0].get("args", [])))
    if "--aclfile" not in script or "requirepass" in script:
        problems.append("redis: not started with the ACL file (or with a password shared by everyone)")
    for subcommand, user in ROLE_USERS.items():
        for workload, container in fleet_containers(objects, subcommand):
            url = env_value(container, "TUNEFLEET_REDIS_URL") or ""
            ref = (env_of(container).get("TUNEFLEET_REDIS_PASSWORD", {}).get("valueFrom") or {}).get(
                "secretKeyRef"
            )
            if not url.startswith(("redis://", "rediss://")) or f"//{user}@" not in url:
                problems.append(
                    f"{workload['metadata']['name']}: TUNEFLEET_REDIS_URL {url!r} is not user {user}"
                )
            if ref != {"name": SECRET_NAME, "key": f"redis-{user}-password"}:
                problems.append(f"{workload['metadata']['name']}: the Redis password is {ref}, not {user}'s")
    return problems


def trigger_problems(objects: list[Obj], trigger: Obj, concurrency: int, queue: str) -> list[str]:
    """KEDA's Redis scaler counts the queue's sorted set (queued plus running cases), `concurrency` per
    worker, as the ACL user `scaler` with its password from the Secret."""
    if trigger["type"] != "redis":
        return [f"trigger {trigger['type']!r}: count the queue itself with KEDA's redis scaler"]
    metadata, problems = trigger["metadata"], []
    if metadata.get("listName") != queue:
        problems.append(f"the trigger counts {metadata.get('listName')!r}, not the queue {queue!r}")
    per_worker = trigger.get("metricType", "AverageValue") == "AverageValue"
    if float(metadata.get("listLength", 5)) != concurrency or not per_worker:
        problems.append(
            f"listLength {metadata.get('listLength')} is not the worker's concurrency {concurrency}"
        )
    if metadata.get("username") != "scaler":
        problems.append(f"KEDA connects as {metadata.get('username')!r}, not the ACL user scaler")
    auths = {o["metadata"]["name"]: o for o in objects if o["kind"] == "TriggerAuthentication"}
    auth = auths.get((trigger.get("authenticationRef") or {}).get("name", ""))
    refs = {r["parameter"]: r for r in (auth or {}).get("spec", {}).get("secretTargetRef", [])}
    password = refs.get("password") or {}
    if (password.get("name"), password.get("key")) != (SECRET_NAME, "redis-scaler-password"):
        problems.append("KEDA's Redis password is not the scaler's from the Secret")
    return problems


def queue_of(container: Obj) -> str:
    return env_value(container, "TUNEFLEET_QUEUE") or str(setting_default("queue"))
