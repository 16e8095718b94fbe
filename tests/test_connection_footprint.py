"""What every idle connection holds is shared where it can be: the engine settings of a
listener's connections (bench/idlemem.py measures the rest)."""

from __future__ import annotations

from router.config.models import Listener, RouterConfig, RouterSection, User
from router.core.connections import new_engine


def _config(*listeners: Listener) -> RouterConfig:
    return RouterConfig(router=RouterSection(id="footprint"), listeners=listeners)


def test_connections_of_one_listener_share_their_engine_settings() -> None:
    listener = Listener(host="127.0.0.1", port=0)
    config = _config(listener)
    first, second = new_engine(config, listener), new_engine(config, listener)
    assert first.config is second.config
    assert first.config.sasl_server is not None and first.config.sasl_server.external_identity is None


def test_settings_of_their_own_are_not_shared() -> None:
    # EXTERNAL needs an ssl_profile to validate; the engine settings do not look at it
    fields = Listener(host="127.0.0.1", port=0).model_dump()
    listener = Listener.model_construct(**{**fields, "sasl_mechanisms": ("EXTERNAL", "ANONYMOUS")})
    config = _config()
    alice = new_engine(config, listener, "alice", tls=True)
    bob = new_engine(config, listener, "bob", tls=True)
    assert alice.config.sasl_server is not None and alice.config.sasl_server.external_identity == "alice"
    assert bob.config.sasl_server is not None and bob.config.sasl_server.external_identity == "bob"

    plain = Listener(host="127.0.0.1", port=0, sasl_mechanisms=["PLAIN"], allow_insecure_plain=True)
    config = RouterConfig(router=RouterSection(id="footprint"), listeners=(plain,), users=(User(username="u", password="p"),))
    # PLAIN's check runs on each engine's own clock
    assert new_engine(config, plain).config is not new_engine(config, plain).config


def test_a_changed_listener_gets_its_own_settings() -> None:
    old = Listener(host="127.0.0.1", port=0, max_frame_size=65536)
    new = Listener(host="127.0.0.1", port=0, max_frame_size=16384)
    assert new_engine(_config(old), old).config.max_frame_size == 65536
    assert new_engine(_config(new), new).config.max_frame_size == 16384


def test_a_connection_has_link_sets_only_once_it_has_links() -> None:
    from router.core.connections import ConnState

    listener = Listener(host="127.0.0.1", port=0)
    state = ConnState(new_engine(_config(listener), listener), listener)
    assert state._in_links is None and state._out_links is None and state.link_count == 0
    assert state._in_links is None  # counting made nothing
    state.out_links.add("a link")  # type: ignore[arg-type]
    assert state.link_count == 1 and state.out_links == {"a link"} and state.in_links == set()
