"""scenario_profile is memoised on PROFILE_KEYS: the list holds every scenario key its code reads, and the memo
returns what resolving afresh returns (a profile swapped into PROFILES included: tests/estimate/test_extending.py)."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

from vramfit.errors import ScenarioError
from vramfit.estimate import framework
from vramfit.estimate.framework import PROFILE_KEYS, resolve_profile, scenario_profile
from vramfit.scenario import parse_scenario

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured"


def _read_keys(fn) -> set[str]:
    tree = ast.parse(inspect.getsource(fn))
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "sc"}


def test_the_memo_key_names_every_key_the_profile_reads():
    read = _read_keys(resolve_profile) | _read_keys(framework.with_fsdp_version)
    assert read == set(PROFILE_KEYS)  # a key read but not in the memo's key would return a stale profile


def test_the_memo_returns_the_resolved_profile():
    rows = [json.loads(line)["scenario"] for p in sorted(MEASURED.glob("*.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    seen = set()
    for raw in rows:
        for extra in ({}, {"optimizer_impl": "foreach"}, {"use_reentrant": "yes"}):
            try:
                sc = parse_scenario({**raw, **extra})
            except ScenarioError:  # a key the row's framework does not take
                continue
            assert scenario_profile(sc) == resolve_profile(sc)
            seen.add(scenario_profile(sc))
    assert len(seen) >= 20  # the rows run many distinct profiles
