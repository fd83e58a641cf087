"""src/vramfit/data/accuracy.json (each estimate's error band) matches the benchmark it is written from."""

import json
from pathlib import Path

from benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_benchmark("accuracy")


def test_the_band_data_is_up_to_date():
    bench = _bench()
    paths = bench.find_data(None)
    assert [p.name for p in paths] == ["public.jsonl", "found.jsonl", "stages.jsonl", "vramfit_h200.jsonl", "vramfit_h100.jsonl",
                                      "vlm.jsonl"]
    rows = bench.load(paths)
    fresh = bench.bands_text(bench.bands(bench.score(rows), paths))
    assert bench.BANDS.read_text() == fresh, "run: python benchmarks/accuracy.py --write-bands"
    cases = {c["id"]: c["error"] for c in json.loads(fresh)["cases"]}
    # every row of every set; the DPO/SimPO/PPO rows (stages.jsonl, SWIFT_EX_2601-3/-10/-16) on paths naming their stage
    assert list(cases) == [r["id"] for r in rows] and len(cases) >= 120
    methods = {c["id"]: c["path"]["method"] for c in json.loads(fresh)["cases"]}
    assert (methods["ODYN_DPO_2607-1"], methods["SWIFT_EX_2601-3"]) == ("lora+dpo", "lora+dpo")
    assert (methods["SWIFT_EX_2601-10"], methods["SWIFT_EX_2601-16"]) == ("full+simpo", "full+ppo")
    assert methods["SWIFT_EX_2601-15"] == "full"  # the packed fa2 SFT run
    # vision-language runs with images on paths naming them (vlm.jsonl): a VLM estimate is vouched for by these only
    assert (methods["UNSLOTH_VLM_NB-5"], methods["MSSWIFT_VLM-3"]) == ("qlora+images", "lora+images")
    assert cases["PEFT_README-117"] == 0.0357  # DeepSpeed < 0.9 gather copy + ZeRO-3 linear inputs (was -0.207)
    # a found row on the counter its source measured: fsdp_qlora's peak allocated, LoRA on 2 GPUs at 512
    # with the loop-kept fp32 logits (keeps_outputs), the v4 RoPE caches and FSDP1's root gathered whole beside its shard
    # (estimate/fsdp1_moments.py) and one block gathered through a block's recompute (the adapter units take its prefetch,
    # adapter_units_prefetch); +0.0067 with two, -0.018 with the root less its shard, -0.0256 without the caches either
    assert cases["AAI_FSDPQLORA_2403-5"] == -0.0087


def test_the_benchmark_reports_per_framework_and_per_source(capsys):
    assert _bench().main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Accuracy on rows with an exact sequence length (233 of 361):")
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    # hf: the 7 PEFT rows of public.jsonl, the 19 exact-length fsdp_qlora rows, 7 axolotl rows, a packed ms-swift row and
    # llama-recipes' 4 packed FSDP LoRA figures of found.jsonl, ms-swift's two packed full fine-tunes with Liger and its three
    # packed Qwen2.5-7B ZeRO-3 runs (liger/sft.sh with and without Liger, flash_attention_3/transformers.sh's fa2 line);
    # litgpt: the 18 LIT_RES rows whose peak micro-batch is seq_len long (not the 10 FSDP no_sync rows) and lit-gpt's 3 October-2023 tutorial rows at micro-batch 4; torchtitan: the 4 TITAN_BENCH rows
    # and torchao's bf16 baselines of March, June and August 2025 (TORCHAO_FP8_2503, TORCHAO_TUT_2506, TORCHAO_MX_2508); hf also: fms-acceleration's 19 packed A100 runs
    # (FMS_ACCEL_2502: full, LoRA and QLoRA of Mistral-7B, Mixtral-8x7B and Llama-2-70B, 1 GPU and FSDP1 on 2)
    # and the 19 runs of the same scenarios in fms-acceleration's November-2024 CSV (FMS_ACCEL_2411: transformers 4.45.2)
    # and the 10 full and LoRA ones in fp16 in its July-2024 CSV (FMS_ACCEL_2407: transformers 4.43.3); and the
    # 27 counters of this project's 9 H200 runs and the 42 of its 14 H100 runs (vramfit_h200.jsonl, vramfit_h100.jsonl:
    # transformers 5.17, three counters each); and the
    # packed or padded README figures of axolotl (April 2024 and August 2023) and DeepSpeed's Muon blog (May 2026); and
    # ms-swift's packed Qwen2.5-VL LoRA on 4 GPUs (vlm.jsonl, MSSWIFT_VLM-2)
    assert lines["MSSWIFT_VLM"][1] == "1"
    assert lines["FMS_ACCEL_2502"][1] == "19" and lines["FMS_ACCEL_2411"][1] == "19"
    assert lines["vramfit-measure"][1] == "69"
    assert lines["FMS_ACCEL_2407"][1] == "10"
    # and the same CSV's runs of 2024-07-15 (FMS_ACCEL_240715: transformers 4.39.3, fp16) and 2024-09-16 (FMS_ACCEL_2409:
    # transformers 4.44.2 with the --bf16 flag), 10 full and LoRA runs each
    assert lines["FMS_ACCEL_240715"][1] == "10" and lines["FMS_ACCEL_2409"][1] == "10"
    assert lines["hf"][1] == "185" and lines["litgpt"][1] == "26" and lines["torchtune"][1] == "15"
    assert lines["torchtitan"][1] == "7" and lines["AAI_FSDPQLORA_2403"][1] == "19"
    assert lines["AXOLOTL_EX_2508"][1] == "7" and lines["AXOLOTL_EX_2308"][1] == "2"
    assert lines["AXOLOTL_EX_2404"][1] == "1" and lines["DS_MUON_2605"][1] == "1"


def test_one_set_alone_scores_as_before(capsys):
    bench = _bench()
    assert bench.main(["--data", str(bench.DEFAULT_DATA)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Accuracy on rows with an exact sequence length (43 of 80):")
    assert "AAI_FSDPQLORA_2403" not in out
    assert bench.main(["--all", "--data", str(bench.MEASURED / "found.jsonl"),
                       "--data", str(bench.MEASURED / "stages.jsonl")]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.split()}
    assert lines["SWIFT_EX_2601"][1] == "16" and lines["PEFT_MMQA_2607"][1] == "5" and lines["ODYN_DPO_2607"][1] == "1"
    assert lines["LIT_HUB_2409"][1] == "26"
