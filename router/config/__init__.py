"""Router configuration: pydantic models (the schema) and the YAML loader."""

from .loader import ConfigError, load_config, parse_config, schema
from .models import AddressConfig, Connector, HttpListener, Limits, Listener, RouterConfig, RouterSection, User

__all__ = [
    "AddressConfig", "ConfigError", "Connector", "HttpListener", "Limits", "Listener", "RouterConfig", "RouterSection", "User",
    "load_config", "parse_config", "schema",
]  # fmt: skip
