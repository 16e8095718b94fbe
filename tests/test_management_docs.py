"""docs/management.md keeps up with the model: every entity type and every attribute the agent
serves is documented (the entity reference there is the model's own description)."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.config.models import RouterConfig
from router.core.router import RouterCore
from router.management import EntityType, ManagementAgent
from router.management.metrics import MemoryType

DOC = Path(__file__).resolve().parent.parent / "docs" / "management.md"


def _agent() -> ManagementAgent:
    config = RouterConfig()
    agent = ManagementAgent(RouterCore(config), config)
    agent.register(MemoryType())
    return agent


@pytest.mark.parametrize("etype", _agent().entity_types(), ids=lambda t: t.short_name)
def test_every_type_and_attribute_is_documented(etype: EntityType) -> None:
    text = DOC.read_text()
    section = text.split(f"### `{etype.short_name}`\n", 1)
    assert len(section) == 2, f"no section for {etype.short_name}"
    body = section[1].split("\n### ", 1)[0]
    for attribute in etype.attributes:
        assert f"| `{attribute.name}` |" in body, attribute.name
