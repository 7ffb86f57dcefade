"""The scaling rule deploy/k8s ships, as KEDA applies it: read from the rendered ScaledObject, with the
question KEDA's Redis scaler asks Redis (the key's type, then its size: ZCARD for arq's sorted set).
bench/autoscale.py drives workers with it; tests/test_redis_acl.py asks it as the ACL user `scaler`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tests.support.k8s import K8S, env_value, find, fleet_containers
from tests.support.kustomize import render

COUNT_QUEUE = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'zset' then return redis.call('ZCARD', KEYS[1]) end
if kind == 'list' or kind == 'none' then return redis.call('LLEN', KEYS[1]) end
return redis.error_reply('unsupported type ' .. kind)
"""
"""What KEDA's Redis scaler asks of `listName`: its type, then its size."""


@dataclass(frozen=True)
class ScaleRule:
    """The ScaledObject's rule: the key counted, cases per worker, the bounds and the fallback."""

    list_name: str
    per_worker: int
    min_workers: int
    max_workers: int
    fallback_workers: int
    fallback_behavior: str

    def desired(self, count: int | None, current: int) -> int:
        """The HPA's answer for an AverageValue target of `per_worker` cases a worker, within the bounds;
        with no count (Redis unreadable), the fallback as KEDA applies it."""
        if count is None:
            if self.fallback_behavior == "currentReplicasIfHigher":
                return max(current, self.fallback_workers)
            return self.fallback_workers
        wanted = math.ceil(count / self.per_worker) if count else self.min_workers
        return max(self.min_workers, min(self.max_workers, wanted))


def shipped_rule(tree: Path = K8S / "base") -> ScaleRule:
    """The rule of the worker ScaledObject that `kubectl apply -k tree` would apply."""
    objects = render(tree)
    spec = find(objects, "ScaledObject", "worker")["spec"]
    metadata = spec["triggers"][0]["metadata"]
    _, worker = fleet_containers(objects, "worker")[0]
    per_worker = int(metadata["listLength"])
    assert per_worker == int(env_value(worker, "TUNEFLEET_CONCURRENCY") or 0), "listLength is the concurrency"
    return ScaleRule(
        list_name=metadata["listName"],
        per_worker=per_worker,
        min_workers=int(spec.get("minReplicaCount", 0)),
        max_workers=int(spec.get("maxReplicaCount", 100)),
        fallback_workers=int(spec["fallback"]["replicas"]),
        fallback_behavior=str(spec["fallback"].get("behavior", "static")),
    )
