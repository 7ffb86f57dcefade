"""The base of every JSON value the fleet keeps in Redis, so that writer and reader share one model."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ValidationError


class RedisValue(BaseModel):
    """A JSON value the fleet keeps in Redis: written as `model_dump_json()`, read back with `parse`."""

    @classmethod
    def parse(cls, raw: bytes | str | None) -> Self | None:
        """The value; None when there is none or it is not one (a hand-written or garbled value)."""
        if raw is None:
            return None
        try:
            return cls.model_validate_json(raw)
        except ValidationError:
            return None
