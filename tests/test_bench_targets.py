"""The benchmark suite's targets read against a result (bench/targets.py)."""

from __future__ import annotations

from bench.targets import TARGETS, verdicts


def test_each_figure_is_read_against_its_bound_and_scenarios_not_run_are_left_out() -> None:
    results = {
        "1_anycast_100b_unsettled": {"ratio": 0.557, "router_cpu_us_per_msg": 0.71},
        "4_pingpong_latency": {"p50_ratio": 1.89},
        "3_anycast_10kib_unsettled": {"ratio": 0.489},
    }
    found = {row["target"]: (row["value"], row["bound"], row["met"]) for row in verdicts(results)}
    assert found == {
        "1. 100 B unsettled, ratio to direct": (0.557, ">= 0.55", True),
        "1. router CPU per 100 B message, us": (0.71, "<= 0.7", False),
        "3. 10 KiB unsettled, ratio to direct": (0.489, ">= 0.55", False),
        "4. ping-pong p50, router / direct": (1.89, "<= 2", True),
    }


def test_a_bound_itself_is_met_and_every_scenario_but_the_slow_consumer_has_a_target() -> None:
    for target in TARGETS:
        assert target.met(target.bound)
    suite_keys = {
        "1_anycast_100b_unsettled", "2_anycast_100b_presettled", "3_anycast_10kib_unsettled", "4_pingpong_latency",
        "5_idle_connections", "7_chain_of_3_100b_unsettled", "8_multicast_1_to_2_100b_unsettled",
    }  # fmt: skip
    assert {target.scenario for target in TARGETS} == suite_keys  # (6: reported, no bound)
