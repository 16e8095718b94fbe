"""What a password check costs the router (defect: every SASL PLAIN attempt derived PBKDF2 on
the event loop, limited only per host, so many hosts could stall every connection).

- The cache of verified PLAIN passwords: a hit costs no derivation; a changed or removed user,
  another password or another authorisation identity never matches; it is bounded (LRU).
- The router-wide budget of derivations (a token bucket on `now`): never more than the burst
  plus the rate times the time passed (hypothesis); past it a login is refused at once with
  sys-temp (security 5.3.3.6), and a cached login still passes.
- SCRAM: the server side derives nothing (it checks the proof against StoredKey).
- Over sockets: a flood of failing logins from many hosts spends at most the budget's
  derivations, and a client that logged in before logs in again at no derivation at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import router.amqp.scram as scram_module
import router.amqp.scram_keys as scram_keys_module
import router.config.users as users_module
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.events import Authenticated, AuthenticationFailed
from router.amqp.framing import FRAME_SASL, SASL_HEADER, frame
from router.amqp.performatives import SASL_AUTH, SASL_OK, SASL_SYS_TEMP, SaslInit, SaslOutcome
from router.amqp.sasl import PasswordChecksBusy, SaslClientConfig
from router.amqp.scram import ScramClient, ScramServer
from router.config.models import FailedLogins, Listener, RouterConfig, RouterSection, User
from router.config.users import CredentialStore, DerivationBudget, hash_password, parse_users, write_users
from router.core.connections import new_engine
from router.net.server import RouterServer

TIMEOUT_S = 10.0


def _store(*users: User, path: Path | None = None, rate: float = 1000.0, burst: int = 1000) -> CredentialStore:
    limits = FailedLogins(max_password_checks_per_s=rate, password_checks_burst=burst)
    return CredentialStore(RouterConfig(users=users, users_file=str(path) if path else None, failed_logins=limits))


def test_a_verified_password_is_answered_from_the_cache() -> None:
    store = _store(User(username="ann", password="pw-1"))
    assert store.check_plain("", "ann", "pw-1", 0.0) and store.derivations == 1
    assert store.check_plain("", "ann", "pw-1", 0.0) and store.check_plain("ann", "ann", "pw-1", 0.0)
    assert (store.derivations, store.cache_hits) == (1, 2)
    assert not store.check_plain("bob", "ann", "pw-1", 0.0)  # acting for another user: refused, hit or not
    assert not store.check_plain("", "ann", "pw-2", 0.0)  # another password: a miss, derived and refused
    assert not store.check_plain("", "nobody", "pw-1", 0.0)  # unknown: derived like a real user, refused
    assert store.derivations == 3


def test_a_changed_or_removed_user_never_matches_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    write_users(path, {"ann": _entry("old")})
    store = _store(path=path)
    assert store.check_plain("", "ann", "old", 0.0)
    assert store.check_plain("", "ann", "old", 0.0) and store.derivations == 1
    write_users(path, {"ann": _entry("new"), "filler": _entry("x")})  # another size: re-read
    assert not store.check_plain("", "ann", "old", 0.0)  # the old password: derived against the new hash
    assert store.check_plain("", "ann", "new", 0.0) and store.derivations == 3
    write_users(path, {"ann": _entry("old")})  # the same password again, a new salt
    assert store.check_plain("", "ann", "old", 0.0) and store.derivations == 4
    write_users(path, {"someone-else": _entry("old")})
    assert not store.check_plain("", "ann", "old", 0.0)  # removed: never a hit
    assert store.derivations == 5


def _entry(password: str) -> dict[str, scram_keys_module.StoredCredentials]:
    """A users-file entry for `password` (fresh salts)."""
    return parse_users({"users": {"u": list(hash_password(password))}}, "test")["u"]


def test_the_cache_is_bounded_least_recently_used_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(users_module, "VERIFIED_CACHE_SIZE", 2)
    store = _store(*(User(username=f"u{i}", password=f"p{i}") for i in range(3)))
    for i in (0, 1, 0, 2):  # u0 used again after u1: u1 is the least recently used when u2 comes
        assert store.check_plain("", f"u{i}", f"p{i}", 0.0)
    assert store.derivations == 3
    assert store.check_plain("", "u0", "p0", 0.0) and store.check_plain("", "u2", "p2", 0.0)
    assert store.derivations == 3
    assert store.check_plain("", "u1", "p1", 0.0) and store.derivations == 4  # evicted: derived again


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.5, max_value=500.0), st.integers(min_value=1, max_value=50),
       st.lists(st.floats(min_value=0.0, max_value=0.5), max_size=200))  # fmt: skip
def test_derivations_never_exceed_burst_plus_rate_times_time(rate: float, burst: int, steps: list[float]) -> None:
    budget = DerivationBudget(rate, burst)
    now, taken = 0.0, 0
    for dt in steps:
        now += dt
        taken += budget.take(now)
        assert taken <= burst + rate * now + 1e-9
    assert budget.take(now + (burst + 1) / rate)  # a quiet spell refills it


def test_a_clock_going_back_refills_nothing() -> None:
    budget = DerivationBudget(10.0, 1)
    assert budget.take(100.0) and not budget.take(100.0)
    assert not budget.take(0.0) and not budget.take(100.05)
    assert budget.take(100.2)  # 0.1 s after 100.0 at 10 per second (and a little more for rounding)


def test_past_the_budget_a_login_is_refused_at_once_but_a_cached_one_passes() -> None:
    store = _store(User(username="ann", password="pw"), rate=1.0, burst=2)
    assert store.check_plain("", "ann", "pw", 5.0)  # cached from now on
    assert not store.check_plain("", "ann", "bad", 5.0)
    with pytest.raises(PasswordChecksBusy):
        store.check_plain("", "ann", "bad", 5.0)
    with pytest.raises(PasswordChecksBusy):
        store.check_plain("", "unknown", "pw", 5.0)  # unknown users spend the budget too
    assert store.check_plain("", "ann", "pw", 5.0)  # a hit needs no derivation
    assert (store.derivations, store.refused_busy) == (2, 2)
    assert store.check_plain("", "ann", "pw", 6.0)


def _outcome(engine: Connection, password: str, now: float, code: int) -> object:
    """A PLAIN login at `now`: the engine's sasl-outcome must carry `code`; its one event."""
    engine.receive_data(SASL_HEADER, now)
    engine.data_to_send()
    init = SaslInit(mechanism="PLAIN", initial_response=f"\x00cost-eve\x00{password}".encode())
    engine.receive_data(frame(0, init, frame_type=FRAME_SASL), now)
    assert engine.data_to_send() == frame(0, SaslOutcome(code=code), frame_type=FRAME_SASL)
    [event] = engine.events()
    return event


def test_the_engine_answers_sys_temp_past_the_budget_on_its_now() -> None:
    config = RouterConfig(
        router=RouterSection(id="cost"),
        listeners=(Listener(name="l", sasl_mechanisms=("PLAIN",), allow_insecure_plain=True),),
        users=(User(username="cost-eve", password="pw"),),
        failed_logins=FailedLogins(max_password_checks_per_s=1.0, password_checks_burst=1),
    )
    listener = config.listeners[0]
    event = _outcome(new_engine(config, listener), "bad", 1000.0, SASL_AUTH)
    assert isinstance(event, AuthenticationFailed)
    event = _outcome(new_engine(config, listener), "pw", 1000.5, SASL_SYS_TEMP)  # no token yet
    assert isinstance(event, AuthenticationFailed) and event.code == SASL_SYS_TEMP
    assert isinstance(_outcome(new_engine(config, listener), "pw", 1001.0, SASL_OK), Authenticated)  # derived
    assert isinstance(_outcome(new_engine(config, listener), "pw", 1001.0, SASL_OK), Authenticated)  # cached


def test_the_scram_server_derives_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(User(username="ann", password="pw"))  # inline password hashed here, once
    derived: list[str] = []
    real = scram_keys_module.salted_password

    def counting(*args: object) -> bytes:
        derived.append("x")
        return real(*args)  # type: ignore[arg-type]

    def count_derivations() -> None:
        # Both where the exchange derives (the client) and where the stored keys are made and checked.
        for module in (scram_module, scram_keys_module):
            monkeypatch.setattr(module, "salted_password", counting)

    client = ScramClient("SCRAM-SHA-256", "ann", "pw")
    server = ScramServer("SCRAM-SHA-256", lambda user: store.scram("SCRAM-SHA-256", user), b"k" * 32)
    first = client.first()
    count_derivations()
    server_first = server.first(first)
    monkeypatch.undo()
    client_final = client.final(server_first)  # the client derives, once
    count_derivations()
    server_final, user = server.final(client_final)
    assert user == "ann" and derived == []
    monkeypatch.undo()
    client.verify(server_final)


# --- over sockets ----------------------------------------------------------------------------------


async def _login(port: int, source: str, password: str) -> Authenticated | AuthenticationFailed:
    engine = Connection(ConnectionConfig(container_id=f"c-{source}", sasl_client=SaslClientConfig(
        mechanisms=("PLAIN",), username="cost-eve", password=password)))  # fmt: skip
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    async with stream:
        with trio.fail_after(TIMEOUT_S):
            while True:
                out = engine.data_to_send()
                if out:
                    await stream.send_all(out)
                for event in engine.events():
                    if isinstance(event, (Authenticated, AuthenticationFailed)):
                        return event
                data = await stream.receive_some(65536)
                engine.receive_data(data, trio.current_time())
                assert data, "the router ended the stream without a sasl-outcome"


async def test_a_flood_of_bad_logins_spends_the_budget_only_and_a_known_client_still_gets_in() -> None:
    rate, burst, hosts = 2.0, 5, 40
    config = RouterConfig(
        router=RouterSection(id="cost-router"),
        listeners=(Listener(name="plain", host="0.0.0.0", port=0, sasl_mechanisms=("PLAIN",), allow_insecure_plain=True),),
        users=(User(username="cost-eve", password="good"),),
        failed_logins=FailedLogins(max_password_checks_per_s=rate, password_checks_burst=burst),
    )
    server = RouterServer(config)
    store = users_module.credential_store(config)
    async with trio.open_nursery() as nursery:
        [(_, _, port)] = await nursery.start(server.run)
        try:
            started = trio.current_time()
            assert isinstance(await _login(port, "127.0.0.1", "good"), Authenticated)
            assert store.derivations == 1
            results: list[Authenticated | AuthenticationFailed] = []

            async def bad(host: int) -> None:
                results.append(await _login(port, f"127.0.1.{host}", "wrong"))

            async with trio.open_nursery() as flood:
                for host in range(1, hosts + 1):
                    flood.start_soon(bad, host)
            elapsed = trio.current_time() - started
            assert len(results) == hosts and all(isinstance(r, AuthenticationFailed) for r in results)
            codes = sorted(r.code for r in results if isinstance(r, AuthenticationFailed))
            assert store.derivations <= burst + rate * elapsed + 1  # bounded, however many came
            assert codes.count(SASL_SYS_TEMP) == store.refused_busy >= hosts - burst - rate * elapsed - 1
            assert codes.count(SASL_AUTH) == store.derivations - 1
            before = store.derivations
            # The budget is spent: the client that logged in before gets in at no derivation.
            assert isinstance(await _login(port, "127.0.0.1", "good"), Authenticated)
            assert store.derivations == before and store.cache_hits == 1
            assert server.core.logins.failures == hosts  # refusals count as failed logins
        finally:
            server.shutdown()
            with trio.fail_after(5):
                await server.wait_stopped()
