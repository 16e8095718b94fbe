"""The HTTP listener's security, over real HTTPS (Hypercorn, certificates from trustme, urllib).

- `authenticate: basic` needs an ssl_profile (the configuration says why) and users.
- Over TLS: no credentials or wrong ones are 401 with a Basic challenge; a reader may GET and is
  refused writes with 403 (nothing changes); an operator may POST, PUT and DELETE; every refusal
  is counted (router entity and /metrics).
- /healthz and /metrics answer without credentials unless `open_health_metrics: false`.
- A listener without authentication, bound to loopback, refuses anonymous writes once operators are named (403).
- A stalled TLS handshake does not block other clients; repeated wrong credentials from one host
  are slowed down (failed_logins), a success forgets the host.
- Any Authorization header (hypothesis) is a user or none, never an error; only the right
  password logs in.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.scram_keys import make_credentials
from router.config.loader import ConfigError, parse_config
from router.config.models import RouterConfig
from router.config.users import write_users
from router.management.http_auth import HttpAuthenticator
from router.net.server import RouterServer

from .tlssupport import Pki, make_pki, serving

TIMEOUT_S = 5.0
MEDIA = "application/amqp-management+json"
ALICE, BOB = ("alice", "0pera+or"), ("bob", "re4der")


def _users(path: Path) -> str:
    write_users(path, {name: {m: make_credentials(m, pw) for m in ("SCRAM-SHA-256",)} for name, pw in (ALICE, BOB)})
    return str(path)


def _config(tmp_path: Path, pki: Pki, **http: Any) -> dict[str, Any]:
    return {
        "listeners": [{"name": "amqp", "port": 0}],
        "ssl_profiles": [{"name": "web", "cert_file": pki.cert_file, "key_file": pki.key_file}],
        "http": [{"name": "https", "port": 0, "ssl_profile": "web", "authenticate": "basic", **http}],
        "users_file": _users(tmp_path / "users.yaml"),
        "management": {"operators": ["alice"]},
    }


def _port(server: RouterServer) -> int:
    return next(port for name, _, port in server.http_addresses if name == "https")


def _request(url: str, method: str, ca_file: str, user: tuple[str, str] | None, body: Any) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": MEDIA} if body is not None else {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    context = ssl.create_default_context(cafile=ca_file)
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


async def _http(server: RouterServer, pki: Pki, method: str, path: str, user: tuple[str, str] | None = None,
                body: Any = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    url = f"https://localhost:{_port(server)}{path}"
    with trio.fail_after(TIMEOUT_S + 1):
        return await trio.to_thread.run_sync(_request, url, method, pki.ca_file, user, body)


def test_basic_needs_tls_and_users() -> None:
    with pytest.raises(ConfigError, match="authenticate: basic needs an ssl_profile"):
        parse_config({"http": [{"name": "h", "authenticate": "basic"}], "users": [{"username": "a", "password": "b"}]})
    profile = {"name": "web", "cert_file": "/nonexistent.pem"}
    with pytest.raises(ConfigError, match="HTTP basic but no users"):
        parse_config({"ssl_profiles": [profile], "http": [{"name": "h", "ssl_profile": "web", "authenticate": "basic"}]})
    with pytest.raises(ConfigError, match="no ssl profile named 'nope'"):
        parse_config({"http": [{"name": "h", "ssl_profile": "nope"}]})
    assert parse_config({"http": [{"name": "h"}]}).http[0].host == "127.0.0.1"


async def test_basic_over_tls_reader_and_operator(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    async with serving(_config(tmp_path, pki)) as server:
        status, headers, _ = await _http(server, pki, "GET", "/management/address")
        assert status == 401 and headers["www-authenticate"].startswith("Basic")
        assert (await _http(server, pki, "GET", "/management/address", ("bob", "wrong")))[0] == 401
        assert (await _http(server, pki, "GET", "/management/address", ("nobody", "x")))[0] == 401
        assert (await _http(server, pki, "GET", "/management/address", BOB))[0] == 200
        rule = {"name": "web-rule", "prefix": "web"}
        status, _, body = await _http(server, pki, "POST", "/management/address", BOB, rule)
        assert status == 403 and "user 'bob' may not change the router" in json.loads(body)["description"]
        assert not server.agent.entities("address")
        assert (await _http(server, pki, "POST", "/management/address", None, rule))[0] == 401
        status, _, body = await _http(server, pki, "POST", "/management/address", ALICE, rule)
        assert status == 201 and json.loads(body)["name"] == "web-rule"
        assert (await _http(server, pki, "PUT", "/management/address/web-rule", BOB, {"distribution": "closest"}))[0] == 403
        assert (await _http(server, pki, "DELETE", "/management/address/web-rule", BOB))[0] == 403
        assert (await _http(server, pki, "PUT", "/management/address/web-rule", ALICE, {"distribution": "closest"}))[0] == 200
        assert (await _http(server, pki, "DELETE", "/management/address/web-rule", ALICE))[0] == 204
        router = server.agent.entities("router")[0]
        assert router["httpWritesRefused"] == 4 and router["httpReadsRefused"] == 3
        status, _, metrics = await _http(server, pki, "GET", "/metrics")  # open by default
        assert status == 200 and b"amqp_router_http_writes_refused_total 4.0" in metrics
        assert (await _http(server, pki, "GET", "/healthz"))[0] == 200


async def test_health_and_metrics_closed_when_asked(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    async with serving(_config(tmp_path, pki, open_health_metrics=False)) as server:
        assert (await _http(server, pki, "GET", "/healthz"))[0] == 401
        assert (await _http(server, pki, "GET", "/metrics"))[0] == 401
        assert (await _http(server, pki, "GET", "/healthz", BOB))[0] == 200


async def test_an_unauthenticated_loopback_listener_refuses_anonymous_writes_once_operators_are_named(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = _config(tmp_path, pki)
    config["http"] = [{"name": "https", "port": 0, "ssl_profile": "web"}]  # TLS, no authentication: anonymous
    async with serving(config) as server:
        assert (await _http(server, pki, "GET", "/management/address"))[0] == 200
        status, _, body = await _http(server, pki, "POST", "/management/address", None, {"name": "x", "prefix": "x"})
        assert status == 403 and "anonymous requester may not change the router" in json.loads(body)["description"]


async def test_a_stalled_tls_handshake_does_not_block_others(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    async with serving(_config(tmp_path, pki)) as server:
        stalled = await trio.open_tcp_stream("127.0.0.1", _port(server))
        try:
            await stalled.send_all(b"\x16\x03\x01\x00\xff")  # the start of a ClientHello, then nothing
            assert (await _http(server, pki, "GET", "/management/address", BOB))[0] == 200
        finally:
            await stalled.aclose()


async def test_repeated_wrong_credentials_from_one_host_are_slowed_down(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = _config(tmp_path, pki)
    config["failed_logins"] = {"initial_delay_s": 0.01, "max_delay_s": 0.02}
    async with serving(config) as server:
        for _ in range(3):
            assert (await _http(server, pki, "GET", "/management/address", ("bob", "guess")))[0] == 401
        assert (await _http(server, pki, "GET", "/management/address"))[0] == 401  # no credentials: no failed login
        throttle = server._http_app().auth.logins
        assert (throttle.failures, throttle.delayed, throttle.hosts) == (3, 2, 1)
        assert (await _http(server, pki, "GET", "/management/address", BOB))[0] == 200
        assert throttle.hosts == 0  # a success forgets the host


@settings(max_examples=150, deadline=None)
@given(header=st.one_of(
    st.text(max_size=300),
    st.builds(lambda b: "Basic " + base64.b64encode(b).decode(), st.binary(max_size=200)),
    st.builds(lambda u, p: "Basic " + base64.b64encode(f"{u}:{p}".encode()).decode(), st.sampled_from(["bob", "alice", ""]), st.text(max_size=40)),
))
def test_any_authorization_header_is_a_user_or_none_never_an_error(header: str) -> None:
    user = _AUTH.basic_user(header)
    assert user is None or (user, header) == ("bob", "Basic " + base64.b64encode(b"bob:re4der").decode())


def test_the_right_password_and_only_it_logs_in() -> None:
    good = "Basic " + base64.b64encode(b"bob:re4der").decode()
    assert _AUTH.basic_user(good) == "bob" and _AUTH.basic_user(good) == "bob"  # the second from memory
    assert _AUTH.basic_user("basic " + base64.b64encode(b"bob:re4der").decode()) == "bob"  # the scheme is case-blind
    for bad in ("Basic " + base64.b64encode(b"bob:re4deR").decode(), "Bearer abc", "Basic !!!", "Basic " + "A" * 5000, ""):
        assert _AUTH.basic_user(bad) is None


def _authenticator() -> HttpAuthenticator:
    users = [{"username": name, "hashes": [make_credentials("SCRAM-SHA-256", pw).encode()]} for name, pw in (ALICE, BOB)]
    config = RouterConfig.model_validate({"users": users})
    return HttpAuthenticator(lambda: config, lambda: 0.0)


_AUTH = _authenticator()
