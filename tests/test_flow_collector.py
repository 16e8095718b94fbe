"""The collector against `router run` processes: `router collect` writes the partitioned gzip
JSON lines files, survives the router's restart (a new boot) and its own without losing or
doubling a record (seqs 1..N per boot, N the count the router logs when it stops), refuses
messages that are not records, and says in one line what is wrong with its arguments or an
unreachable router."""

from __future__ import annotations

import gzip
import json
import re
import signal
import socket
import subprocess
import time
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.cli.collect_files import PartitionWriter, partition

from .support.router_process import RouterProcess, router_command, router_env

EMITTED = re.compile(r"flow records: (\d+) emitted, (\d+) dropped, (\d+) left unsent \(boot (\w+)\)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_all(root: Path, complete: bool = False) -> list[dict[str, Any]]:
    """The records in the collector's files: complete ones (`complete`), or in progress too,
    where a member it is still writing is skipped (the next poll reads it whole)."""
    records = []
    pattern = "part-*.json.gz" if complete else "*part-*.json.gz*"
    for path in sorted(root.glob(f"date=*/hour=*/router=*/{pattern}")):
        try:
            with gzip.open(path, "rt") as f:
                lines = f.read().splitlines()
        except (EOFError, OSError, zlib.error):
            continue
        records += [json.loads(line) for line in lines]
    return records


def _wait_for(predicate: Any, timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling files a process writes: no event crosses the boundary


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(router_command(*args), capture_output=True, text=True, env=router_env(), timeout=30)


class Collector:
    def __init__(self, port: int, directory: Path) -> None:
        self.proc = subprocess.Popen(
            router_command("collect", "--connect", f"127.0.0.1:{port}", "--dir", str(directory)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=router_env(),
        )  # fmt: skip

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, err
        return err


def _config(port: int) -> dict[str, Any]:
    return {
        "router": {"id": "flow-r1"},
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": port}],
        "flow": {"enabled": True, "interval_s": 1, "sample_one_in": 1},
    }


def _traffic(port: int, count: int) -> None:
    receiver = subprocess.Popen(router_command("receive", "orders", "-b", f"127.0.0.1:{port}", "-n", str(count),
                                               "--timeout", "20", "--quiet"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=router_env())  # fmt: skip
    sent = _run("send", "orders", "-b", f"127.0.0.1:{port}", "-n", str(count), "--timeout", "20")
    out, err = receiver.communicate(timeout=30)
    assert sent.returncode == 0 and receiver.returncode == 0, (sent.stderr, err)


def test_the_collector_writes_partitions_and_survives_restarts_without_loss_or_doubles(tmp_path: Path) -> None:
    port = _free_port()
    out = tmp_path / "flows"
    (tmp_path / "r").mkdir()
    config_path = tmp_path / "r" / "router.yaml"
    config_path.write_text(yaml.safe_dump(_config(port)))
    first = RouterProcess(config_path, listeners=1)
    first.start()
    collector = Collector(port, out)
    try:
        _traffic(port, 20)
        _wait_for(lambda: any(r["type"] == "hop" for r in _read_all(out)), what="hop records")
        assert first.stop() == 0
        (emitted_1, _, unsent_1, boot_1), = EMITTED.findall("\n".join(first.stderr))
        second = RouterProcess(config_path, listeners=1)
        second.start()
        try:
            _traffic(port, 10)
            _wait_for(lambda: sum(1 for r in _read_all(out) if r["type"] == "hop" and r["boot"] != boot_1) >= 10,
                      what="the second boot's hop records")  # fmt: skip
            err = collector.stop()
            assert "connecting again" in err, err
            collector = Collector(port, out)  # the collector restarts: what waited in the router comes now
            _traffic(port, 5)
            _wait_for(lambda: sum(1 for r in _read_all(out) if r["type"] == "hop" and r["boot"] != boot_1) >= 15,
                      what="hop records after the collector's restart")  # fmt: skip
        finally:
            assert second.stop() == 0
        (emitted_2, _, unsent_2, boot_2), = EMITTED.findall("\n".join(second.stderr))
        _wait_for(lambda: len([r for r in _read_all(out) if r["boot"] == boot_2]) >= int(emitted_2), timeout=5,
                  what="the second boot's last records")  # fmt: skip
    finally:
        collector.stop()
    records = _read_all(out, complete=True)  # every file completed at the stop
    by_boot: dict[str, list[int]] = defaultdict(list)
    for r in records:
        by_boot[r["boot"]].append(r["seq"])
        assert partition(r) == (time.strftime("%Y-%m-%d", time.gmtime(r["ts"])), time.strftime("%H", time.gmtime(r["ts"])), "flow-r1")
    assert set(by_boot) == {boot_1, boot_2}
    for boot, emitted, unsent in ((boot_1, emitted_1, unsent_1), (boot_2, emitted_2, unsent_2)):
        assert int(unsent) == 0
        assert sorted(by_boot[boot]) == list(range(1, int(emitted) + 1)), boot  # none lost, none doubled
    hops = [r for r in records if r["type"] == "hop"]
    assert len(hops) == 35 and all(r["outcome"] == "accepted" and r["next"] is None for r in hops)
    totals = [r for r in records if r["type"] == "address_interval" and r["address"] == "orders"]
    assert sum(r["deliveries"] for r in totals) == 35 and sum(r["accepted"] for r in totals) == 35
    assert list(out.glob("date=*/hour=*/router=flow-r1/part-*.json.gz"))


def _unsettled_to_collectors(port: int) -> int:
    done = _run("stat", "links", "-b", f"127.0.0.1:{port}", "--json")
    assert done.returncode == 0, done.stderr
    links = json.loads(done.stdout)
    rows = links if isinstance(links, list) else links.get("rows", links.get("links", []))
    return sum(int(row.get("unsettledCount") or 0) for row in rows
               if row.get("address") == "_flow/records" and row.get("linkDir") == "out")  # fmt: skip


def test_a_collector_killed_before_it_writes_loses_no_record_and_doubles_none(tmp_path: Path) -> None:
    port = _free_port()
    out = tmp_path / "flows"
    (tmp_path / "r").mkdir()
    config_path = tmp_path / "r" / "router.yaml"
    config_path.write_text(yaml.safe_dump(_config(port)))
    router = RouterProcess(config_path, listeners=1)
    router.start()
    first = Collector(port, out)
    second: Collector | None = None
    try:
        _wait_for(lambda: _read_all(out), what="the first records")
        first.proc.send_signal(signal.SIGSTOP)  # between two batches: it will receive, and never write
        _traffic(port, 10)
        _wait_for(lambda: _unsettled_to_collectors(port) > 0, what="a batch in flight to the stopped collector")
        before = {r["seq"] for r in _read_all(out)}
        first.proc.kill()  # SIGKILL with the batch unsettled
        first.proc.communicate(timeout=10)
        second = Collector(port, out)  # the same files: the batch comes again, after the router's backoff
        _traffic(port, 5)
        _wait_for(lambda: sum(1 for r in _read_all(out) if r["type"] == "hop") >= 15, what="every hop record")
    finally:
        assert router.stop() == 0
    ((emitted, _, unsent, boot),) = EMITTED.findall("\n".join(router.stderr))
    try:
        _wait_for(lambda: len(_read_all(out)) >= int(emitted), timeout=5, what="the last records")
    finally:
        err = second.stop() if second is not None else ""
    records = _read_all(out, complete=True)  # the killed one's file in progress too, recovered
    assert {r["boot"] for r in records} == {boot} and int(unsent) == 0
    assert sorted(r["seq"] for r in records) == list(range(1, int(emitted) + 1)), err  # none lost, none doubled
    assert before and len([r for r in records if r["type"] == "hop"]) == 15
    again = re.search(r"(\d+) batch\(es\) accepted, (\d+) sent again", "\n".join(router.stderr))
    assert again is not None and int(again[2]) >= 1  # the killed collector's batch went again


def test_duplicates_are_written_once_across_writer_restarts(tmp_path: Path) -> None:
    records = [{"type": "hop", "router": "a/b", "boot": "b1", "seq": i, "ts": 1_700_000_000.5 + i} for i in range(1, 6)]
    writer = PartitionWriter(tmp_path)
    assert writer.write(records[:3]) == 3
    writer.close()
    again = PartitionWriter(tmp_path)  # a restart: the state says what was written
    assert again.write(records) == 2 and again.duplicates == 3
    again.close()
    assert sorted(r["seq"] for r in _read_all(tmp_path, complete=True)) == [1, 2, 3, 4, 5]
    (directory,) = {p.parent for p in tmp_path.glob("date=*/hour=*/router=*/part-*.json.gz")}
    assert directory.name == "router=a%2Fb" and directory.parent.name == "hour=22"
    assert len(list(directory.iterdir())) == 2  # the second run started a part of its own


def test_files_in_progress_are_hidden_until_complete_and_recovered_after_a_crash(tmp_path: Path) -> None:
    records = [{"type": "hop", "router": "R", "boot": "b1", "seq": i, "ts": 1_700_000_000.5 + i} for i in range(1, 10)]
    now = [0.0]
    writer = PartitionWriter(tmp_path, finish_after_s=60, clock=lambda: now[0])
    assert writer.write(records[:3]) == 3
    (path,) = tmp_path.glob("date=*/hour=*/router=R/*")
    assert path.name == ".part-00000.json.gz.inprogress"  # hidden from readers (Spark skips dot files)
    assert not _read_all(tmp_path, complete=True) and len(_read_all(tmp_path)) == 3
    now[0] = 61.0
    assert writer.write(records[3:5]) == 2  # the file is old enough: complete after this write
    assert [p.name for p in path.parent.iterdir()] == ["part-00000.json.gz"]
    assert writer.write(records[5:7]) == 2  # a new file in progress
    acknowledged = sorted(r["seq"] for r in _read_all(tmp_path))
    # The collector dies: a member written but not in the state yet, then one cut short.
    (progress,) = path.parent.glob(".part-*")
    with open(progress, "ab") as f:
        f.write(gzip.compress(b'{"type":"hop","router":"R","boot":"b1","seq":8,"ts":1700000008.5}\n'))
        f.write(gzip.compress(b'{"type":"hop","router":"R","boot":"b1","seq":9,"ts":1700000009.5}\n')[:20])
    again = PartitionWriter(tmp_path)
    assert again.recovered == 1 and acknowledged == [1, 2, 3, 4, 5, 6, 7]
    assert sorted(p.name for p in path.parent.iterdir()) == ["part-00000.json.gz", "part-00001.json.gz"]
    assert sorted(r["seq"] for r in _read_all(tmp_path, complete=True)) == acknowledged  # cut back to what was acknowledged
    assert again.write(records[5:]) == 2 and again.duplicates == 2  # 8 and 9 come again: written once
    again.close()
    assert sorted(r["seq"] for r in _read_all(tmp_path, complete=True)) == list(range(1, 10))
    assert not list(tmp_path.glob("date=*/hour=*/router=*/.part-*"))


def test_bad_arguments_and_an_unreachable_router_are_one_line_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (("collect", "--dir", str(tmp_path / "x"), "--connect", "nohostport:"), "HOST:PORT"),
        (("collect", "--connect", "127.0.0.1:1"), "--dir"),
        (("collect", "--dir", str(blocker / "sub"), "--connect", "127.0.0.1:1"), "--dir"),
        (("collect", "--dir", str(tmp_path / "y"), "--connect", f"127.0.0.1:{_free_port()}"), "cannot connect"),
    ]
    for args, expected in cases:
        done = _run(*args)
        assert done.returncode in (1, 2) and expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_message_that_is_not_records_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with RouterProcess.running(tmp_path, {"listeners": [{"name": "amqp", "port": 0}]}) as router:
        port = router.ports["amqp"]
        out = tmp_path / "flows"
        collector = Collector(port, out)
        try:
            deadline = time.monotonic() + 15
            while True:  # until the collector's link is attached (the send then gets an outcome)
                sent = _run("send", "_flow/records", "-b", f"127.0.0.1:{port}", "--body", "not records", "--timeout", "5")
                if "rejected" in sent.stdout or time.monotonic() > deadline:
                    break
            assert sent.returncode == 1 and "rejected 1" in sent.stdout, sent.stdout + sent.stderr
        finally:
            err = collector.stop()
        assert "1 message(s) refused" in err and not _read_all(out)
