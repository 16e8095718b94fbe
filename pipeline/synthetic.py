"""Flow records made up in the shared format, written as the collector lays them out: for tests,
the benchmark (bench/pipeline.py) and trying the pipeline without a mesh. No Spark here.

Owns: record builders with the format's fields (every type), histograms from durations, and
writing gzip JSON lines under date=YYYY-MM-DD/hour=HH/router=<id>/part-<n>.json.gz.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from itertools import count
from pathlib import Path
from typing import Any

BUCKETS = 32


def bucket_of(duration_us: float) -> int:
    """The log2 bucket of a duration: 0 under 1 us, i for 2^(i-1) <= d < 2^i, 31 for the rest."""
    if duration_us < 1:
        return 0
    return min(BUCKETS - 1, int(duration_us).bit_length())


def histogram(durations_us: Iterable[float]) -> list[int]:
    counts = [0] * BUCKETS
    for d in durations_us:
        counts[bucket_of(d)] += 1
    return counts


class Emitter:
    """One start of one router: records with (router, boot, seq) and ts filled in."""

    def __init__(self, router: str, boot: str | None = None) -> None:
        self.router = router
        self.boot = boot or f"{router}-boot"
        self._seq = count(1)

    def record(self, type: str, ts: float, **fields: Any) -> dict[str, Any]:
        return {"type": type, "router": self.router, "boot": self.boot, "seq": next(self._seq), "ts": ts, **fields}

    def router_record(self, ts: float, neighbours: dict[str, int], mode: str = "interior") -> dict[str, Any]:
        return self.record("router", ts, mode=mode, version="0.1.0", compiled=False,
                           neighbours=[{"router": r, "cost": c} for r, c in sorted(neighbours.items())])  # fmt: skip

    def link(self, ts: float, link_id: str, *, role: str, peer: str, direction: str, address: str | None,
             state: str = "open", name: str | None = None) -> dict[str, Any]:  # fmt: skip
        return self.record("link", ts, link_id=link_id, connection_id=f"c-{link_id}", role=role, peer=peer,
                           direction=direction, address=address, name=name or link_id, state=state)  # fmt: skip

    def link_interval(self, ts: float, link_id: str, *, role: str, peer: str, direction: str, address: str | None,
                      deliveries: int, bytes: int, interval_s: float = 10.0, accepted: int | None = None,
                      rejected: int = 0, released: int = 0, modified: int = 0, dropped: int = 0,
                      credit_starved_s: float = 0.0, residence_us: Iterable[float] = (),
                      settle_us: Iterable[float] = (), records_deliveries: int = 0,
                      records_bytes: int = 0) -> dict[str, Any]:  # fmt: skip
        if accepted is None:
            accepted = deliveries - rejected - released - modified - dropped
        return self.record("link_interval", ts, link_id=link_id, peer=peer, role=role, direction=direction,
                           address=address, interval_s=interval_s, deliveries=deliveries, bytes=bytes,
                           accepted=accepted, rejected=rejected, released=released, modified=modified,
                           dropped=dropped, credit_starved_s=credit_starved_s,
                           residence_hist=histogram(residence_us), settle_hist=histogram(settle_us),
                           records_deliveries=records_deliveries, records_bytes=records_bytes)  # fmt: skip

    def address_interval(self, ts: float, address: str, *, deliveries: int, bytes: int, interval_s: float = 10.0,
                         rejected: int = 0, released: int = 0, residence_us: Iterable[float] = (),
                         settle_us: Iterable[float] = ()) -> dict[str, Any]:  # fmt: skip
        return self.record("address_interval", ts, address=address, interval_s=interval_s, deliveries=deliveries,
                           bytes=bytes, accepted=deliveries - rejected - released, rejected=rejected,
                           released=released, modified=0, dropped=0, residence_hist=histogram(residence_us),
                           settle_hist=histogram(settle_us))  # fmt: skip

    def hop(self, ts: float, trace_id: str, *, ingress: str, address: str, prev: str | None, next: str | None,
            residence_us: int, settle_us: int | None, outcome: str | None = "accepted") -> dict[str, Any]:  # fmt: skip
        return self.record("hop", ts, trace_id=trace_id, ingress=ingress, address=address, prev=prev, next=next,
                           residence_us=residence_us, settle_us=settle_us, outcome=outcome)  # fmt: skip


def partition_of(record: dict[str, Any]) -> str:
    when = datetime.fromtimestamp(record["ts"], tz=timezone.utc)
    return f"date={when:%Y-%m-%d}/hour={when:%H}/router={record['router']}"


def write_records(root: Path, records: Iterable[dict[str, Any]], *, part: int = 0) -> list[Path]:
    """Write records in the collector's layout (one part-<part>.json.gz per partition); the files."""
    by_partition: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_partition[partition_of(record)].append(record)
    written = []
    for partition, rows in sorted(by_partition.items()):
        path = root / partition / f"part-{part}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as f:
            for row in rows:
                f.write(json.dumps(row, separators=(",", ":")))
                f.write("\n")
        written.append(path)
    return written


def mesh_traffic(n: int, *, routers: int = 3, addresses: int = 50, start_ts: float = 1_764_000_000.0,
                 seed: int = 1) -> Iterator[dict[str, Any]]:  # fmt: skip
    """n records of a chain mesh R0 - R1 - ... under steady traffic (a mix of every type, mostly
    interval counters, as a busy mesh emits them): for the benchmark."""
    rng = random.Random(seed)
    names = [f"R{i}" for i in range(routers)]
    emitters = [Emitter(name) for name in names]
    made = 0
    ts = start_ts
    while made < n:
        i = made % routers
        e, kind = emitters[i], made % 10
        address = f"addr-{rng.randrange(addresses)}"
        ts += 0.001
        if kind < 5:
            d = rng.randrange(1, 500)
            yield e.link_interval(ts, f"L{rng.randrange(20)}", role="normal", peer="client", direction="in",
                                  address=address, deliveries=d, bytes=d * 100, rejected=d // 50,
                                  residence_us=(rng.expovariate(1 / 50) for _ in range(3)),
                                  settle_us=(rng.expovariate(1 / 400) for _ in range(3)))  # fmt: skip
        elif kind < 7:
            peer = names[(i + 1) % routers]
            d = rng.randrange(1, 500)
            yield e.link_interval(ts, f"IR-{peer}", role="inter-router", peer=peer, direction="out", address=None,
                                  deliveries=d, bytes=d * 120, settle_us=(rng.expovariate(1 / 300) for _ in range(3)))  # fmt: skip
        elif kind < 9:
            d = rng.randrange(1, 500)
            yield e.address_interval(ts, address, deliveries=d, bytes=d * 100,
                                     residence_us=(rng.expovariate(1 / 50) for _ in range(3)))  # fmt: skip
        else:
            nxt = names[i + 1] if i + 1 < routers else None
            yield e.hop(ts, f"t{made // 10}", ingress=names[0], address=address, prev=names[i - 1] if i else None,
                        next=nxt, residence_us=rng.randrange(10, 200), settle_us=rng.randrange(100, 2000))  # fmt: skip
        made += 1
