"""Helpers of the benchmark reports: the hypervisor's share of CPU time, tables, a subprocess's path."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

from bench.common import cpu_times, steal_percent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_steal_is_a_percentage_of_the_cpu_time_since_a_reading():
    start = cpu_times()
    assert start is not None and 0 <= start[0] <= start[1]
    deadline = time.perf_counter() + 0.1
    while time.perf_counter() < deadline:  # let the CPU clocks tick (100 per second)
        pass
    assert re.fullmatch(r"\d+%", steal_percent(start))
    assert steal_percent(None) == "unknown"
    # a reading from the future (more jiffies than now) cannot give a share
    assert steal_percent((start[0], start[1] + 10**12)) == "unknown"


def test_headline_rows_come_only_from_tables_shaped_like_the_headline():
    from bench.common import HEADLINE_TABLE_HEADER, headline_rows, markdown_table

    first = ["a / b", "0.50", "0.4-0.6", "<= 0.65", "met"]
    second = ["c", "2", "-", "<= 1", "MISSED"]
    text = "\n".join([
        "# results",
        markdown_table(["model", "value", "range", "target", "verdict"], [["no", "-", "-", "x", "-"]]),
        "",
        markdown_table(HEADLINE_TABLE_HEADER, [first]),
        "text between tables ends the first one",
        "| stray | row | after | the | table |",
        "",
        markdown_table(["comparison", "ratio (median)", "spread", "target", "verdict"], [second]),
    ])
    assert headline_rows(text) == [first, second]


def test_a_subprocess_path_puts_the_tree_first_and_keeps_the_callers_entries(monkeypatch):
    from bench.common import python_path

    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert python_path("/trees/a") == "/trees/a"
    # packages carried to a machine that lacks them (the 16-core device's /tmp/site) stay
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/carried/site", "/other"]))
    assert python_path("/trees/a").split(os.pathsep) == ["/trees/a", "/carried/site", "/other"]
