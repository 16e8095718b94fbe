"""Brokers we did not write, from Debian, as private processes for tests: RabbitMQ (with its
AMQP 1.0 plugin) and ActiveMQ 5.17 (AMQP 1.0 transport connector with transactions). Debian 12's
activemq package lacks the AMQP transport module, so the ActiveMQ fixture skips saying so
unless an activemq-amqp jar is installed beside the broker's.

Each broker runs as a private node: its own temp directory (data, logs, configuration), bound
to 127.0.0.1 on free ports, started and stopped by its own pid (RabbitMQ's epmd too: the
fixture starts one of its own on a private port, so nothing of the machine's is touched).
`start()`, `stop()` and `restart()` may be called in a test (a broker restarted mid-stream
keeps its ports, data and durable queues). When the Debian package is missing, the fixture
skips the test naming it (CI installs both: see .ci/run).

    def test_x(rabbitmq: RabbitMQ):     # session-scoped: one node for the whole run
        ... connect to 127.0.0.1:rabbitmq.port (SASL ANONYMOUS is user guest) ...

RabbitMQ 3.10 (Debian 12) AMQP 1.0 addresses: `/queue/NAME` (declared on attach),
`/amq/queue/NAME` (an existing queue), `/exchange/NAME/KEY`, `/topic/KEY`; a bare `NAME` is
the queue of that name through the default exchange. RabbitMQ 4's `/queues/NAME` is not
understood (the attach is never answered).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
ACTIVEMQ_JAR = Path("/usr/share/activemq/bin/activemq.jar")
ACTIVEMQ_HOME = Path("/usr/share/activemq")
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], deadline: float, what: str, log: Path) -> None:
    """Poll the broker's AMQP port until it accepts (there is no event across the process boundary)."""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {START_TIMEOUT_S} s: {_tail(log)}")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return "(no output)"


def _stop(process: subprocess.Popen[bytes] | None, grace_s: float = 15.0) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class RabbitMQ:
    """A private RabbitMQ node with rabbitmq_amqp1_0 enabled (user guest, loopback_users none)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.nodename = f"amqptest{self.port}@localhost"
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.start_seconds: list[float] = []  # how long each start took (until AMQP listens)
        (root / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
            "log.console = true\nlog.file = false\n"
        )
        (root / "advanced.config").write_text('[{rabbitmq_amqp1_0, [{default_user, "guest"}]}].\n')
        self.env = dict(
            os.environ,
            HOME=str(root),  # the Erlang cookie
            RABBITMQ_MNESIA_BASE=str(root / "mnesia"),
            RABBITMQ_LOG_BASE=str(root / "log"),
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(root / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(root / "rabbitmq"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(root / "advanced.config"),
            RABBITMQ_PID_FILE=str(root / "pid"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
        )
        subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmq-plugins"), "enable", "--offline", "rabbitmq_amqp1_0"],
            env=self.env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        begin = time.monotonic()
        if self.epmd is None or self.epmd.poll() is not None:
            # Our own epmd, in the foreground (a child we stop by its pid), before the node
            # would start a daemon of its own.
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        log = self.root / "server.log"
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [str(RABBITMQ_BIN / "rabbitmq-server")], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        _wait_listening(self.port, self.process, begin + START_TIMEOUT_S, "rabbitmq-server", log)
        self.start_seconds.append(time.monotonic() - begin)

    def queue_depth(self, queue: str) -> int:
        """Messages ready and unacknowledged in `queue` (by name: `orders`, not `/queue/orders`;
        0 if there is no such queue), as rabbitmqctl reports them."""
        out = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.nodename, "list_queues", "-q", "--no-table-headers",
             "name", "messages"],
            env=self.env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        for line in out.stdout.splitlines():
            name, _, count = line.rpartition("\t")
            if name.strip() == queue:
                return int(count)
        return 0

    def stop(self) -> None:
        """Stop the node by its pid (SIGTERM: Erlang's orderly stop; durable queues survive)."""
        _stop(self.process)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        _stop(self.epmd, 5.0)
        self.epmd = None


class ActiveMQ:
    """A private ActiveMQ 5.17 broker: one AMQP 1.0 transport connector (transactions on) on a
    free 127.0.0.1 port, its own data directory, no other connectors, on the machine's Java."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.start_seconds: list[float] = []
        conf = root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (root / "data").mkdir(exist_ok=True)
        for name in ("log4j2.properties", "credentials.properties", "jetty-realm.properties", "users.properties",
                     "groups.properties", "login.config"):  # fmt: skip
            for source in (Path("/etc/activemq") / name, ACTIVEMQ_HOME / "conf" / name):
                if source.exists():
                    shutil.copy(source, conf / name)
                    break
        (conf / "activemq.xml").write_text(f"""<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="amqptest{self.port}"
          dataDirectory="{root / 'data'}" useJmx="false" advisorySupport="false" schedulerSupport="false">
    <persistenceAdapter><kahaDB directory="{root / 'data' / 'kahadb'}"/></persistenceAdapter>
    <systemUsage><systemUsage>
      <memoryUsage><memoryUsage limit="64 mb"/></memoryUsage>
      <storeUsage><storeUsage limit="1 gb"/></storeUsage>
      <tempUsage><tempUsage limit="256 mb"/></tempUsage>
    </systemUsage></systemUsage>
    <transportConnectors>
      <transportConnector name="amqp"
        uri="amqp://127.0.0.1:{self.port}?maximumConnections=100&amp;wireFormat.maxFrameSize=1048576&amp;transport.transactions=true"/>
    </transportConnectors>
  </broker>
</beans>
""")

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        begin = time.monotonic()
        log = self.root / "activemq.log"
        java = shutil.which("java") or "java"
        command = [
            java, "-Xms64M", "-Xmx256M", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            f"-Dactivemq.home={ACTIVEMQ_HOME}", f"-Dactivemq.base={self.root}",
            f"-Dactivemq.conf={self.root / 'conf'}", f"-Dactivemq.data={self.root / 'data'}",
            f"-Djava.io.tmpdir={self.root / 'data'}",
            f"-Dlog4j2.configurationFile={self.root / 'conf' / 'log4j2.properties'}",
            "-jar", str(ACTIVEMQ_JAR), "start", f"xbean:file:{self.root / 'conf' / 'activemq.xml'}",
        ]  # fmt: skip
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, cwd=self.root, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)  # fmt: skip
        _wait_listening(self.port, self.process, begin + START_TIMEOUT_S, "activemq", log)
        self.start_seconds.append(time.monotonic() - begin)

    def stop(self) -> None:
        _stop(self.process)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()


def rabbitmq_missing() -> str | None:
    """Why a RabbitMQ node cannot be started here (None: it can)."""
    if not (RABBITMQ_BIN / "rabbitmq-server").exists() or shutil.which("epmd") is None:
        return "RabbitMQ unavailable: apt-get install -y rabbitmq-server"
    return None


def activemq_missing() -> str | None:
    if not ACTIVEMQ_JAR.exists():
        return "ActiveMQ unavailable: apt-get install -y activemq"
    if shutil.which("java") is None:
        return "ActiveMQ needs Java: apt-get install -y default-jre-headless"
    # Debian's activemq 5.17 ships no AMQP transport (activemq-amqp and Proton-J are not
    # packaged): the broker then fails at start with "Could not find factory class for
    # resource: META-INF/services/org/apache/activemq/transport/amqp".
    jars = [*(ACTIVEMQ_HOME / "lib").glob("**/activemq-amqp*.jar"), *Path("/usr/share/java").glob("activemq-amqp*.jar")]
    if not jars:
        return "ActiveMQ from Debian has no AMQP 1.0 transport (activemq-amqp.jar is not packaged)"
    return None


def new_rabbitmq() -> Iterator[RabbitMQ]:
    """A started node, closed afterwards (the body of a fixture of any scope)."""
    reason = rabbitmq_missing()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="rabbitmq-") as root:
        node = RabbitMQ(Path(root))
        try:
            node.start()
            yield node
        finally:
            node.close()


def new_activemq() -> Iterator[ActiveMQ]:
    reason = activemq_missing()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="activemq-") as root:
        broker = ActiveMQ(Path(root))
        try:
            broker.start()
            yield broker
        finally:
            broker.close()


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[RabbitMQ]:
    """One RabbitMQ node for the session (tests use queues of their own names)."""
    yield from new_rabbitmq()


@pytest.fixture(scope="session")
def rabbitmq2() -> Iterator[RabbitMQ]:
    """A second, independent node (a queue sharded over two brokers)."""
    yield from new_rabbitmq()


@pytest.fixture(scope="session")
def activemq() -> Iterator[ActiveMQ]:
    yield from new_activemq()


@pytest.fixture
def rabbitmq_private() -> Iterator[RabbitMQ]:
    """A node of this test alone (tests that stop or restart it)."""
    yield from new_rabbitmq()
