"""The base of every configuration model (router/config/models.py and the section modules it
re-exports: connections.py, addresses.py, access.py, policy.py): frozen, unknown fields refused,
defaults validated; and the name type those modules share.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@-]+$")]
