"""src/vramfit/data/accuracy.json (each estimate's error band) matches the benchmark it is written from."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benchmarks" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_band_data_is_up_to_date():
    bench = _bench()
    rows = [json.loads(x) for x in bench.DEFAULT_DATA.read_text().splitlines() if x.strip()]
    fresh = bench.bands_text(bench.bands(bench.score(rows)))
    assert bench.BANDS.read_text() == fresh, "run: python benchmarks/accuracy.py --write-bands"
    cases = json.loads(fresh)["cases"]
    assert len(cases) == len(rows) >= 76
    assert {c["id"]: c["error"] for c in cases}["PEFT_README-117"] == 0.0357  # DeepSpeed < 0.9 gather copy + ZeRO-3 linear inputs (was -0.207)


def test_the_benchmark_reports_per_framework(capsys):
    assert _bench().main([]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert lines["hf"][1] == "7" and lines["litgpt"][1] == "28" and lines["torchtune"][1] == "17"
    assert lines["torchtitan"][1] == "4"
