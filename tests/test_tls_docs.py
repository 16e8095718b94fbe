"""docs/security.md keeps up with the configuration: every complete router configuration it shows
(a block with a `router:` section) is valid, and names the fields the models have."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from router.config.models import RouterConfig
from router.config.users import parse_users

DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"


def test_the_example_configurations_are_valid() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    configs = [yaml.safe_load(block) for block in blocks]
    # The users file shown (a mapping of users, not a configuration) loads as one.
    users_files = [config for config in configs if isinstance(config.get("users"), dict)]
    assert len(users_files) == 1 and list(parse_users(users_files[0], "docs")) == ["alice"]
    configs = [config for config in configs if config not in users_files]
    complete = [config for config in configs if "router" in config]
    assert len(complete) == 3  # the two sites, and the router with users
    for config in complete:
        parsed = RouterConfig.model_validate(config)
        assert parsed.ssl_profiles and all(p.cert_file for p in parsed.ssl_profiles)
    # The fragments are valid pieces too: the profile on its own, and the listener and connector
    # with a profile to name.
    profile = next(config for config in configs if "ssl_profiles" in config and "router" not in config)
    RouterConfig.model_validate(profile)
    for fragment in configs:
        if "router" in fragment or "ssl_profiles" in fragment:
            continue
        RouterConfig.model_validate({"router": {"mode": "interior"}, **profile, **fragment})
