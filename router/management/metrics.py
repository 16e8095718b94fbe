"""Prometheus metrics, read from the management agent when scraped.

    metrics = Metrics(agent)                 # the router's, the process's and the runtime's metrics
    metrics.text()                           # what GET /metrics serves
    metrics.pieces()                         # the same in pieces, None where the server may let others run
    agent.register(MemoryType())             # the `memory` entity (`router stat memory`)

Nothing is counted here: a scrape reads the counters the router keeps anyway (through the
agent: the `router` entity and the core's per-address figures, the same numbers `router stat`
shows), so no metric object is created or touched per message. A scrape costs the router
about a microsecond per series, and a router with many addresses is read a slice of addresses at
a time, the HTTP server letting every connection run between slices: a monitor polling a
router with 10,000 addresses must not hold its clients for the whole scrape.

Metrics (all prefixed `amqp_router_`):
- `info{router_id, mode, version}`: 1
- gauges: `connections`, `links`, `addresses`, `nodes` (routers known), `uptime_seconds`,
  `failed_login_hosts`, `links_stuck`, `buffered_bytes`, `buffered_budget_bytes`,
  `connections_read_paused`
- counters: `deliveries_ingress_total`, `deliveries_egress_total`, `deliveries_transit_total`,
  `deliveries_accepted_total`, `deliveries_rejected_total`, `deliveries_released_total`,
  `deliveries_modified_total`, `deliveries_presettled_total`, `deliveries_dropped_presettled_total`,
  `failed_logins_total`, `failed_logins_delayed_total`, `unsettled_bound_reached_total`,
  `deliveries_released_over_budget_total`, `deliveries_redirected_to_fallback_total`,
  `flow_records_emitted_total`, `flow_records_dropped_total`,
  `management_reads_refused_total`,
  `management_writes_refused_total`, `http_reads_refused_total`, `http_writes_refused_total`
- per address (label `address`): counters `address_deliveries_ingress_total`,
  `address_deliveries_egress_total`, `address_deliveries_transit_total`; gauges
  `address_subscribers`, `address_remote_subscribers`
- per listener (label `listener`): counters `listener_accept_failures_total`,
  `listener_handshake_timeouts_total`, `listener_connections_refused_total`,
  `listener_websocket_upgrades_refused_total`, `listener_routers_refused_total`
- per vhost (label `vhost`, policy: docs/security.md): counters
  `vhost_connections_approved_total`, `vhost_connections_denied_total`,
  `vhost_sessions_denied_total`, `vhost_senders_denied_total`, `vhost_receivers_denied_total`,
  `vhost_max_message_size_denied_total`, `vhost_messages_denied_total`; gauge `vhost_connections`
- per collector generation (label `generation`, router.management.gcpauses): counter
  `gc_pause_seconds_total`, gauge `gc_longest_pause_seconds`
A router's totals cover what the router still remembers: an address whose entry the router drops
when it becomes unused loses its series, and Prometheus sees a counter reset if it comes back.

The `memory` entity type gives the management faces the same process figures (resident and
virtual size, peak resident size, open file descriptors, objects the garbage collector tracks,
collections per generation, and how long they held the router): what a Python process can
honestly say about its memory.

Owns: metric names, help texts and labels; the memory entity type.
Must not touch: the agent's or the core's state.
"""

from __future__ import annotations

import gc
import resource
import sys
from collections.abc import Iterator
from typing import Any

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, CollectorRegistry, generate_latest

from . import gcpauses
from .agent import ManagementAgent
from .entities import address_key
from .exposition import family, head, labelled, labels_of, number
from .model import Attribute, EntityType
from .procstat import PROCESS_FAMILIES, process_figures

PREFIX = "amqp_router_"

# (metric name, help, router entity attribute)
GAUGES = (
    ("connections", "Open connections.", "connectionCount"),
    ("links", "Attached links.", "linkCount"),
    ("addresses", "Addresses in the address table.", "addrCount"),
    ("nodes", "Other routers known to this router.", "nodeCount"),
    ("uptime_seconds", "Seconds since the router started.", "uptimeSeconds"),
    ("failed_login_hosts", "Hosts remembered for their failed logins (bounded).", "failedLoginHosts"),
    ("links_stuck", "Consumer links stuck now at their unsettled bound.", "stuckLinkCount"),
    ("buffered_bytes", "Message bytes held for producers (waiting for consumer credit).", "bufferedBytes"),
    ("buffered_budget_bytes", "The router-wide budget of bytes held for producers.", "bufferedBudgetBytes"),
    ("connections_read_paused", "Connections not read now because the router holds too much from them.", "pausedConnectionCount"),
)
COUNTERS = (
    ("deliveries_ingress", "Deliveries received from clients and routers.", "deliveriesIngress"),
    ("deliveries_egress", "Deliveries sent to clients.", "deliveriesEgress"),
    ("deliveries_transit", "Deliveries forwarded to other routers.", "deliveriesTransit"),
    ("deliveries_accepted", "Deliveries settled as accepted.", "acceptedDeliveries"),
    ("deliveries_rejected", "Deliveries settled as rejected.", "rejectedDeliveries"),
    ("deliveries_released", "Deliveries settled as released.", "releasedDeliveries"),
    ("deliveries_modified", "Deliveries settled as modified.", "modifiedDeliveries"),
    ("deliveries_presettled", "Deliveries that arrived settled.", "presettledDeliveries"),
    ("deliveries_dropped_presettled", "Presettled deliveries dropped.", "droppedPresettledDeliveries"),
    ("failed_logins", "SASL logins that failed.", "failedLogins"),
    ("failed_logins_delayed", "Failed logins whose outcome was held back.", "failedLoginsDelayed"),
    ("unsettled_bound_reached", "Times a consumer link or connection reached its unsettled bound.", "unsettledBoundReached"),
    ("deliveries_released_over_budget", "Deliveries released because holding them would pass a byte bound.",
     "releasedOverBudget"),
    ("deliveries_redirected_to_fallback", "Deliveries sent to fallback destinations (no consumer anywhere).",
     "deliveriesRedirectedToFallback"),
    ("flow_records_emitted", "Flow records sent or written.", "flowRecordsEmitted"),
    ("flow_records_dropped", "Flow records dropped because their buffer was full.", "flowRecordsDropped"),
    ("management_reads_refused", "Management reads refused over AMQP (403).", "managementReadsRefused"),
    ("management_writes_refused", "Management writes refused over AMQP (403).", "managementWritesRefused"),
    ("http_reads_refused", "Management reads refused over HTTP (401 or 403).", "httpReadsRefused"),
    ("http_writes_refused", "Management writes refused over HTTP (401 or 403).", "httpWritesRefused"),
    ("busy_polls_caught", "Busy polls that found work (router.busy_poll_us).", "busyPollCaught"),
    ("busy_polls_missed", "Busy polls that found none (the router slept after all).", "busyPollMissed"),
)
# (metric name, help, router entity attribute, factor from the attribute's unit to the metric's)
SCALED_COUNTERS = (("busy_poll_seconds", "Time spent busy polling.", "busyPollMicroseconds", 1e-6),)
ADDRESS_COUNTERS = (
    ("address_deliveries_ingress", "Deliveries that arrived for the address.", "deliveriesIngress"),
    ("address_deliveries_egress", "Deliveries sent to the address's local consumers.", "deliveriesEgress"),
    ("address_deliveries_transit", "Deliveries of the address forwarded to other routers.", "deliveriesTransit"),
)
LISTENER_COUNTERS = (
    ("listener_accept_failures", "Accepts that failed on the listener (out of descriptors or memory).", "acceptFailures"),
    ("listener_handshake_timeouts", "Connections dropped for not finishing the handshake in time.", "handshakeTimeouts"),
    ("listener_connections_refused", "Connections refused at the router's connection limit.", "connectionsRefused"),
    ("listener_routers_refused", "Peers refused on a router listener for who they are.", "routersRefused"),
    ("listener_websocket_upgrades_refused", "WebSocket upgrade requests refused with an HTTP error.", "websocketUpgradesRefused"),
)
VHOST_COUNTERS = (
    ("vhost_connections_approved", "Client connections policy granted in the vhost.", "connectionsApproved"),
    ("vhost_connections_denied", "Client connections policy refused in the vhost.", "connectionsDenied"),
    ("vhost_sessions_denied", "Sessions ended at their group's limit.", "sessionDenied"),
    ("vhost_senders_denied", "Sending links refused by policy.", "senderDenied"),
    ("vhost_receivers_denied", "Receiving links refused by policy.", "receiverDenied"),
    ("vhost_max_message_size_denied", "Links detached for a message over the group's size.", "maxMessageSizeDenied"),
    ("vhost_messages_denied", "Messages rejected by policy (user-id, target).", "messagesDenied"),
)
ADDRESS_GAUGES = (
    ("address_subscribers", "Local consumers of the address.", "subscriberCount"),
    ("address_remote_subscribers", "Other routers with consumers of the address.", "remoteCount"),
)
VHOST_GAUGES = (("vhost_connections", "Client connections open in the vhost.", "connectionsCurrent"),)


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# Addresses read and written between two points where a scrape lets the router run (about a
# millisecond's work each, compiled or not).
ADDRESS_SLICE = 250
_ADDRESS_LABEL = "address"
# (name, kind, help) of the per-address families, in the order _per_address writes their lines.
_ADDRESS_FAMILIES = tuple(
    [(PREFIX + name + "_total", "counter", doc) for name, doc, _ in ADDRESS_COUNTERS]
    + [(PREFIX + name, "gauge", doc) for name, doc, _ in ADDRESS_GAUGES]
)


class Metrics:
    """/metrics's text, read through the agent at every scrape (see the module docstring)."""

    def __init__(self, agent: ManagementAgent) -> None:
        self.agent = agent
        # The Python runtime's own (python_info, python_gc_*): a few lines, written by the
        # client library (a registry of this router's own: two routers in one process, as in
        # tests, must not see each other's).
        self._runtime = CollectorRegistry(auto_describe=False)
        for collector in (PLATFORM_COLLECTOR, GC_COLLECTOR):
            self._runtime.register(collector)

    def text(self) -> bytes:
        """The whole exposition at once."""
        return b"".join(piece.encode() for piece in self.pieces() if piece is not None)

    def pieces(self) -> Iterator[str | None]:
        """The exposition in pieces, None between slices of the per-address series: where a
        caller may let the router's connections run before the next (a router with 10,000
        addresses writes 50,000 series)."""
        routers = self.agent.entities("router")
        router = routers[0] if routers else {}
        info = (("mode", str(router.get("mode", ""))), ("router_id", str(router.get("id", ""))),
                ("version", str(router.get("version", ""))))  # fmt: skip
        yield family(PREFIX + "info", "gauge", "The router's identity.", [(labels_of(info), 1)])
        for kind, table in (("gauge", GAUGES), ("counter", COUNTERS)):
            for name, doc, attribute in table:
                value = _number(router.get(attribute))
                if value is not None:
                    yield family(PREFIX + name + ("_total" if kind == "counter" else ""), kind, doc, [(" ", value)])
        for name, doc, attribute, factor in SCALED_COUNTERS:
            value = _number(router.get(attribute))
            if value is not None:
                yield family(PREFIX + name + "_total", "counter", doc, [(" ", value * factor)])
        yield None
        yield from self._per_address()
        yield from _per_entity(self.agent.entities("listener"), "listener", "name", LISTENER_COUNTERS)
        vhosts = self.agent.entities("vhostStats")
        yield from _per_entity(vhosts, "vhost", "hostname", VHOST_COUNTERS)
        yield from _per_entity(vhosts, "vhost", "hostname", VHOST_GAUGES, "gauge")
        yield from _gc_pauses()
        yield from _process()
        yield generate_latest(self._runtime).decode()

    def _per_address(self) -> Iterator[str | None]:
        """Five families of one series per address. Read a slice at a time: an address removed
        before its slice is left out, one added after the scrape began waits for the next."""
        read = self.agent.core.read
        keys = read.address_keys()
        ingress, egress, transit, subscribers, remote = (name for name, _, _ in _ADDRESS_FAMILIES)
        lines: list[list[str]] = [[], [], [], [], []]
        for start in range(0, len(keys), ADDRESS_SLICE):
            if start:
                yield None
            for counts in read.address_counts(keys[start : start + ADDRESS_SLICE]):
                label = labelled(_ADDRESS_LABEL, counts.address or address_key(counts.table_key))
                lines[0].append(f"{ingress}{label}{number(counts.ingress)}\n")
                lines[1].append(f"{egress}{label}{number(counts.egress)}\n")
                lines[2].append(f"{transit}{label}{number(counts.transit)}\n")
                lines[3].append(f"{subscribers}{label}{number(counts.consumers)}\n")
                lines[4].append(f"{remote}{label}{number(counts.remote_routers)}\n")
        for (name, kind, doc), written in zip(_ADDRESS_FAMILIES, lines):
            yield None
            yield head(name, kind, doc) + "".join(written)
        yield None


def _per_entity(entities: list[dict[str, Any]], label: str, label_attribute: str,
                table: tuple[tuple[str, str, str], ...], kind: str = "counter") -> Iterator[str]:  # fmt: skip
    """One family per (name, help, attribute) of `table`, a series per entity labelled by its
    `label_attribute`."""
    suffix = "_total" if kind == "counter" else ""
    for name, doc, attribute in table:
        samples = [(labelled(label, str(e.get(label_attribute, ""))), e[attribute])
                   for e in entities if _number(e.get(attribute)) is not None]  # fmt: skip
        yield family(PREFIX + name + suffix, kind, doc, samples)


def _gc_pauses() -> Iterator[str]:
    """The collector's pauses (router.management.gcpauses), per generation."""
    pauses = gcpauses.current()
    if pauses is None:
        return
    generations = [labelled("generation", str(n)) for n in range(len(pauses.seconds))]
    yield family(PREFIX + "gc_pause_seconds_total", "counter", "Time the garbage collector held the router.",
                 zip(generations, pauses.seconds))  # fmt: skip
    yield family(PREFIX + "gc_longest_pause_seconds", "gauge", "The longest single garbage collection.",
                 zip(generations, pauses.longest))  # fmt: skip


def _process() -> Iterator[str]:
    """The process's figures (procstat.py), under the client library's names."""
    figures = process_figures()
    for name, kind, doc in PROCESS_FAMILIES:
        if name in figures:
            yield family(name, kind, doc, [(" ", figures[name])])


# --- the memory entity ------------------------------------------------------------------------------

PROCESS_SAMPLES = {  # procstat.py's figures the entity shows (the same /metrics has)
    "process_resident_memory_bytes": "residentMemoryBytes",
    "process_virtual_memory_bytes": "virtualMemoryBytes",
    "process_open_fds": "openFds",
}


def process_memory() -> dict[str, Any]:
    figures: dict[str, Any] = dict.fromkeys(PROCESS_SAMPLES.values())
    process = process_figures()
    for name, attribute in PROCESS_SAMPLES.items():
        if name in process:
            figures[attribute] = int(process[name])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures["peakResidentMemoryBytes"] = peak if sys.platform == "darwin" else peak * 1024  # KiB on Linux
    # No count of the objects the collector tracks: len(gc.get_objects()) walked every one of
    # them, ~20 ms with 2,000 connections, while every connection waited (a 1,000-pair run's
    # p99.9 went from 2-6 ms to 17-34 ms when the memory entity was read once in its window).
    figures["gcCollections"] = [generation["collections"] for generation in gc.get_stats()]
    figures["gcCounts"] = list(gc.get_count())
    figures["gcThresholds"] = list(gc.get_threshold())
    figures["gcFrozenObjects"] = gc.get_freeze_count()
    pauses = gcpauses.current()
    figures["gcPauseSeconds"] = [round(s, 6) for s in pauses.seconds] if pauses is not None else None
    figures["gcLongestPauseSeconds"] = [round(s, 6) for s in pauses.longest] if pauses is not None else None
    return figures


class MemoryType(EntityType):
    short_name = "memory"
    description = "This router process's memory (as the operating system and the Python runtime report it)"
    attributes = (
        Attribute("residentMemoryBytes", "ulong", "Resident set size"),
        Attribute("virtualMemoryBytes", "ulong", "Virtual memory size"),
        Attribute("peakResidentMemoryBytes", "ulong", "Largest resident set size so far"),
        Attribute("openFds", "ulong", "Open file descriptors (sockets included)"),
        Attribute("gcCollections", "list", "Garbage collections so far, per generation"),
        Attribute("gcCounts", "list", "Allocations (gen 0) or collections (gen 1, 2) since the last collection"),
        Attribute("gcThresholds", "list", "When each generation is collected (`router run` raises gen 0's)"),
        Attribute("gcFrozenObjects", "ulong", "Objects from start-up left out of every collection (`router run`)"),
        Attribute("gcPauseSeconds", "list", "Time the garbage collector held the router, per generation, since it started"),
        Attribute("gcLongestPauseSeconds", "list", "The longest single collection per generation (every connection waits for one)"),
    )

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        yield self.entity("memory", "memory", **process_memory())
