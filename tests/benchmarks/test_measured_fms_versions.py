"""fms-acceleration's benchmark CSV re-run on older stacks (found.jsonl): c3a069c (FMS_ACCEL_240715, transformers 4.39.3,
peft 0.11.1, torch 2.2.2, fp16 weights) and 4e81c64 (FMS_ACCEL_2409, transformers 4.44.2, the --bf16 flag). The runs
differ from the rows already taken (FMS_ACCEL_2407 at b6c1455, FMS_ACCEL_2411 at 9239802) by mechanisms the estimator
models, and the byte differences between the CSVs are those mechanisms' sizes."""

import json
from pathlib import Path

from vramfit import estimate

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured"
ROWS = {r["id"]: r for r in (json.loads(x) for x in (MEASURED / "found.jsonl").read_text().splitlines() if x.strip())}


def _source(source_id):
    return [r for r in ROWS.values() if r["source_id"] == source_id]


def _bytes(row_id):
    return ROWS[row_id]["measured"]["bytes"]


def _est(scenario):
    return estimate(scenario).peak.allocated_bytes


def test_the_two_csvs_give_ten_rows_each_of_the_same_scenarios():
    older, later = _source("FMS_ACCEL_240715"), _source("FMS_ACCEL_2409")
    assert len(older) == 10 and len(later) == 10
    for r in older:
        twin = ROWS[r["id"].replace("FMS_ACCEL_240715", "FMS_ACCEL_2407")]
        assert "@c3a069c" in r["source"] and r["source"].endswith(f"mem_peak_torch_mem_alloc_in_bytes {_bytes(r['id'])}")
        assert r["scenario"] == {**twin["scenario"], "framework_version": "transformers-4.40+peft-0.11+torch-2.2"}
    for r in later:
        twin = ROWS[r["id"].replace("FMS_ACCEL_2409", "FMS_ACCEL_2411")]
        assert "@4e81c64" in r["source"] and r["source"].endswith(f"mem_peak_torch_mem_alloc_in_bytes {_bytes(r['id'])}")
        upcast = r["scenario"]["method"] == "full" and r["scenario"]["num_gpus"] == 2
        assert r["scenario"] == {**twin["scenario"], "precision": "bf16-mixed" if upcast else "bf16-true"}
        assert r["seq_exact"] and r["measured"]["metric"] == "allocated"


def test_transformers_4_39s_rope_buffers_are_the_512_mib_between_the_july_csvs():
    # Mistral-7B full fine-tuning peaks in the optimizer step: c3a069c reads 2**29 B more than b6c1455 on one GPU at
    # both batches, the per-layer fp16 cos/sin buffers of transformers 4.39.3 (32 x 2 x 32,768 x 128 x 2 B), which
    # buffers keep whole on each GPU under FSDP too (the two-GPU rows differ by 32,768 B more)
    for n in (1, 3):
        assert _bytes(f"FMS_ACCEL_240715-{n}") - _bytes(f"FMS_ACCEL_2407-{n}") == 2**29
    for n in (2, 4):
        assert _bytes(f"FMS_ACCEL_240715-{n}") - _bytes(f"FMS_ACCEL_2407-{n}") == 2**29 + 32_768
    # the one-GPU LoRA runs differ by the buffers less peft 0.11's fp16 adapters (peft 0.12 made them fp32): 6 bytes
    # for each of the 13,631,488 adapter parameters (2 of the weight, 4 of the two AdamW states) at the backward peak
    for n in (5, 7):
        assert _bytes(f"FMS_ACCEL_240715-{n}") - _bytes(f"FMS_ACCEL_2407-{n}") == 2**29 - 6 * 13_631_488
        older, later = ROWS[f"FMS_ACCEL_240715-{n}"]["scenario"], ROWS[f"FMS_ACCEL_2407-{n}"]["scenario"]
        assert _est(older) - _est(later) == 2**29 - 6 * 13_631_488
    # and the estimate meets every full fine-tuning row of the older stack to the byte's 0.01 %
    for n in (1, 2, 3, 4):
        r = ROWS[f"FMS_ACCEL_240715-{n}"]
        assert abs(_est(r["scenario"]) - _bytes(r["id"])) < 1e-4 * _bytes(r["id"])


def test_the_bf16_flag_under_fsdp1_upcasts_the_sharded_weights_to_fp32():
    # 4e81c64 passed --bf16 to the full fine-tunes; accelerate 0.33.0 then upcasts each trainable flat parameter to fp32
    # (accelerator.py l. 1502-1552): 16 bytes a parameter sharded over two GPUs plus foreach AdamW's fp32 sqrt copy is
    # the one-GPU run's 10 bytes a parameter, so the two-GPU rows read the one-GPU figure, not half of it
    for one, two in ((1, 2), (3, 4)):
        assert abs(_bytes(f"FMS_ACCEL_2409-{two}") / _bytes(f"FMS_ACCEL_2409-{one}") - 1) < 1e-5
        assert abs(_bytes(f"FMS_ACCEL_2411-{two}") / _bytes(f"FMS_ACCEL_2411-{one}") - 0.5) < 5e-4
        r = ROWS[f"FMS_ACCEL_2409-{two}"]
        assert abs(_est(r["scenario"]) - _bytes(r["id"])) < 1e-4 * _bytes(r["id"])
        assert abs(_est({**r["scenario"], "precision": "bf16-true"}) / _bytes(r["id"]) - 0.5) < 1e-3
    # the LoRA rows: only the adapters require grad, fp32 already; every row within 4 %
    for n in range(5, 11):
        r = ROWS[f"FMS_ACCEL_2409-{n}"]
        assert abs(_est(r["scenario"]) / _bytes(r["id"]) - 1) < 0.04, r["id"]
