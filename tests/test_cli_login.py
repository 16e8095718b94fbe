"""The command-line tools log in: `router users` writes the users file; `router stat`,
`router manage`, `topology` and `router send` reach a router secured as docs/security.md
recommends (TLS, SCRAM-SHA-256 or PLAIN inside it, no ANONYMOUS) with --ssl-ca, --username and
--password or --password-file; a refused login is one line in words, exit 1; `router run`
refuses a users file that does not load with one line, exit 2.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
import trio
import yaml

from router.amqp.scram_keys import StoredCredentials
from router.config.users import read_users

from .support.router_process import router_command, router_env
from .tlssupport import Pki, make_pki, serving

pytestmark = pytest.mark.process

TIMEOUT_S = 30.0


async def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(TIMEOUT_S):
        return await trio.run_process(router_command(*args), stdin=stdin, capture_stdout=True, capture_stderr=True,
                                      check=False, env=router_env())  # fmt: skip


async def topology(*args: str) -> subprocess.CompletedProcess[bytes]:
    command = [router_command()[0], "-m", "topology.cli.main", *args]
    with trio.fail_after(TIMEOUT_S):
        return await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False, env=router_env())


def _one_line(result: subprocess.CompletedProcess[bytes], code: int) -> str:
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == code and len(lines) == 1 and lines[0].startswith("error: "), result
    return lines[0]


async def test_users_add_list_remove_and_hash(tmp_path: Path) -> None:
    users, secret = tmp_path / "users.yaml", tmp_path / "alice.pass"
    secret.write_text("s3cret\n")
    added = await cli("users", "add", "alice", "--file", str(users), "--password-file", str(secret))
    assert added.returncode == 0 and "added user 'alice'" in added.stderr.decode()
    piped = await cli("users", "add", "bob", "--file", str(users), stdin=b"hunter2\n")  # a pipe: its first line
    assert piped.returncode == 0
    assert stat.S_IMODE(users.stat().st_mode) == 0o600 and "s3cret" not in users.read_text()
    assert sorted(read_users(users)) == ["alice", "bob"]
    listed = await cli("users", "list", "--file", str(users))
    assert listed.stdout.decode().splitlines() == ["alice\tSCRAM-SHA-1 SCRAM-SHA-256\tPLAIN", "bob\tSCRAM-SHA-1 SCRAM-SHA-256\tPLAIN"]
    removed = await cli("users", "remove", "bob", "--file", str(users))
    assert removed.returncode == 0 and sorted(read_users(users)) == ["alice"]
    assert "no user 'bob'" in _one_line(await cli("users", "remove", "bob", "--file", str(users)), 1)
    hashed = await cli("users", "hash", "--password-file", str(secret))
    lines = hashed.stdout.decode().split()
    assert [StoredCredentials.decode(line).mechanism for line in lines] == ["SCRAM-SHA-256", "SCRAM-SHA-1"]
    assert "empty" in _one_line(await cli("users", "add", "carol", "--file", str(users), stdin=b"\n"), 2)


async def test_run_refuses_a_users_file_that_does_not_load(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({"listeners": [{"name": "amqp", "port": 0, "sasl_mechanisms": ["SCRAM-SHA-256"]}],
                                      "users_file": str(tmp_path / "gone.yaml")}))  # fmt: skip
    line = _one_line(await cli("run", "-c", str(config)), 2)
    assert "users_file" in line and "gone.yaml" in line and "cannot read" in line


async def test_config_check_warns_about_plain_text_passwords(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({"listeners": [{"name": "amqp", "port": 0, "sasl_mechanisms": ["SCRAM-SHA-256"]}],
                                      "users": [{"username": "old", "password": "s3cret"}]}))  # fmt: skip
    result = await cli("config", "check", str(config))
    assert result.returncode == 0 and result.stdout.decode().strip() == f"{config}: ok"
    assert "warning: user 'old' has a plain-text password" in result.stderr.decode()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


async def test_the_tools_log_in_to_a_secured_router(pki: Pki, tmp_path: Path) -> None:
    users, secret = tmp_path / "users.yaml", tmp_path / "ops.pass"
    secret.write_text("0pera+or\n")
    assert (await cli("users", "add", "ops", "--file", str(users), "--password-file", str(secret))).returncode == 0
    config = {
        "router": {"id": "secured"},
        "ssl_profiles": [{"name": "site", "cert_file": pki.cert_file, "key_file": pki.key_file}],
        "listeners": [{"name": "amqps", "port": 0, "ssl_profile": "site", "require_sasl": True,
                       "sasl_mechanisms": ["SCRAM-SHA-256", "PLAIN"]}],
        "users_file": str(users),
    }  # fmt: skip
    async with serving(config) as server:
        bus = f"127.0.0.1:{server.listener_ports()['amqps']}"
        tls = ("-b", bus, "--ssl-ca", pki.ca_file)
        general = await cli("stat", "general", "--json", *tls, "--username", "ops", "--password-file", str(secret))
        assert general.returncode == 0 and b'"secured"' in general.stdout, general
        query = await cli("manage", "query", "--type", "listener", *tls, "--username", "ops", "--password", "0pera+or")
        assert query.returncode == 0 and b"amqps" in query.stdout, query
        routers = await topology("routers", "--json", *tls, "--username", "ops", "--password-file", str(secret))
        assert routers.returncode == 0 and b"secured" in routers.stdout, routers
        received = await cli("receive", "orders", "--timeout", "0.1", *tls, "--username", "ops", "--password-file", str(secret))
        assert received.returncode == 0 and b"received 0 message(s)" in received.stderr, received

        wrong = _one_line(await cli("stat", *tls, "--username", "ops", "--password", "guess"), 1)
        assert wrong == f"error: authentication failed at {bus}: SCRAM-SHA-256 login refused: wrong user name or password, or the mechanism was refused"
        anonymous = _one_line(await cli("manage", "query", "--type", "listener", *tls), 1)
        assert "no usable mechanism without credentials (the server offers SCRAM-SHA-256, PLAIN)" in anonymous
        wrong_topology = _one_line(await topology("routers", *tls, "--username", "ops", "--password", "guess"), 1)
        assert "wrong user name or password" in wrong_topology
        for line in (wrong, anonymous, wrong_topology):
            assert "UByte" not in line and "sasl-code" not in line
        usage = _one_line(await cli("stat", *tls, "--password", "x"), 2)
        assert "a password needs --username" in usage
        assert server.core.logins.failures == 2
