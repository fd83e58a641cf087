"""Every number the estimator prints is unchanged unless the golden file was regenerated for a
stated reason (see regen.py)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regen import GOLDEN, snapshot, without_fits  # noqa: E402


def test_estimates_match_golden_snapshot():
    # "fits" is a verdict of the planner (vramfit.plan.verdict), no longer a figure of the estimator
    old = {k: without_fits(v) for k, v in json.loads(GOLDEN.read_text()).items()}
    new = snapshot()
    changed = sorted(k for k in new if old.get(k) != new[k])
    missing = sorted(k for k in old if k not in new)
    assert not missing, f"scenarios dropped from the snapshot: {missing[:3]}"
    assert not changed, f"{len(changed)} estimates changed, first: {changed[:3]}"
    assert len(new) > 300
