"""The base of every configuration model (router/config/models.py and the section modules it
re-exports: connections.py, addresses.py, access.py, policy.py): frozen, unknown fields refused,
defaults validated; the name type those modules share and the "exactly one of two fields" rule.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@-]+$")]


def require_one_of(model: Model, first: str, second: str) -> None:
    """Exactly one of the optional fields `first` and `second` of `model` is set; else a
    ValueError naming both (pydantic reports it with the model's location)."""
    if (getattr(model, first) is None) == (getattr(model, second) is None):
        raise ValueError(f"give exactly one of {first} or {second}")
