"""The base of every configuration model (router/config/models.py, policy.py): frozen, unknown
fields refused, defaults validated."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
