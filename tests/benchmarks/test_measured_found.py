"""benchmarks/data/measured/found.jsonl: published peaks found later, in the row schema of the README."""

import json
import re
from pathlib import Path

from benchmark_modules import load_benchmark
from vramfit.measure.records import parse_lines
from vramfit.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "data" / "measured"
ROWS = [json.loads(x) for x in (MEASURED / "found.jsonl").read_text().splitlines() if x.strip()]
FIELDS = {"id", "source_id", "source", "scenario", "measured", "seq_exact", "confidence", "notes"}


def _bench():
    return load_benchmark("accuracy")


def test_rows_follow_the_schema_and_parse():
    assert len(ROWS) == 202
    for r in ROWS:
        assert set(r) == FIELDS, r["id"]
        assert r["id"].startswith(r["source_id"] + "-")
        assert r["measured"]["metric"] in {"allocated", "reserved", "device", "unknown"}
        assert isinstance(r["measured"]["bytes"], int) and r["measured"]["bytes"] > 0
        assert isinstance(r["seq_exact"], bool) and r["confidence"] in {"high", "medium", "low"}
        assert len(r["notes"]) > 80  # every assumption written down
        parse_scenario(dict(r["scenario"]))  # every key and value is the schema's
    # `vramfit runs import` reads the file (the format of measure/records.py)
    assert len(parse_lines((MEASURED / "found.jsonl").read_text())) == 202


def test_ids_are_unique_across_every_set_and_each_source_is_documented():
    bench = _bench()
    ids = [r["id"] for r in bench.load(bench.find_data(None))]
    assert len(ids) == len(set(ids))
    sources = (MEASURED / "README.md").read_text().split("## Sources", 1)[1]
    for sid in {r["source_id"] for r in ROWS}:
        assert f"**`{sid}`**" in sources and sid in bench.SOURCE_FRAMEWORK


def test_figures_are_the_printed_numbers_in_bytes():
    by_id = {r["id"]: r for r in ROWS}
    for r in ROWS:
        if r["source_id"] == "AAI_FSDPQLORA_2403" and r["measured"]["metric"] == "reserved":
            # the table row ends with its 'Peak Memory (GiB)' cell (the Time column is left out)
            gib = float(re.search(r"\| ([0-9.]+)'$", r["source"]).group(1))
            assert r["measured"]["bytes"] == round(gib * 2**30)
        if r["source_id"] == "PEFT_MMQA_2607":  # exact bytes from the results JSON
            assert f"({r['measured']['bytes']} bytes)" in r["source"]
    assert by_id["AAI_FSDPQLORA_2403-5"]["measured"]["bytes"] == round(8.28 * 2**30)
    assert by_id["SWIFT_EX_2601-1"]["measured"]["bytes"] == 18 * 2**30  # '# 18GiB * 2'
    assert by_id["SWIFT_EX_2601-4"]["measured"]["bytes"] == 42 * 10**9  # '# 42GB'
    assert by_id["SWIFT_EX_2601-5"]["measured"]["bytes"] == 22 * 10**9  # packing/llm.sh '# 22GB'
    assert by_id["SWIFT_EX_2601-6"]["measured"]["bytes"] == 76 * 2**30  # full/train.sh '# 76GiB'
    assert by_id["SWIFT_EX_2601-11"]["measured"]["bytes"] == 35 * 2**30  # agent/qwen2_5.sh '# 35GiB'
    # ms-swift's docs: '# 4 * 60GB' (per GPU), '# GPU Memory Usage: 22GB', '# 13GB'
    assert [by_id[f"SWIFT_DOCS_2506-{i}"]["measured"]["bytes"] for i in (1, 2, 3)] == [60 * 10**9, 22 * 10**9, 13 * 10**9]
    # liger/sft.sh '4 * 42GB', '4 * 54GB', '4 * 52GB' (per GPU); flash_attention_3/transformers.sh '# fa2: 4 * 43GiB'
    assert [by_id[f"SWIFT_EX_2601-{i}"]["measured"]["bytes"] for i in (12, 13, 14, 15)] == [42 * 10**9, 54 * 10**9,
                                                                                          52 * 10**9, 43 * 2**30]
    # ms-swift 1.x headers: '# 21GB', '# 2 * 72GB', '# 12GB'
    assert [by_id[f"SWIFT_SCRIPTS_2404-{i}"]["measured"]["bytes"] for i in (6, 7, 8)] == [21 * 10**9, 72 * 10**9, 12 * 10**9]
    # torchao's table 'Peak Memory (GB)' 47.65: the max of torchtitan's logged 'memory: N GiB'
    assert by_id["TORCHAO_FP8_2503-1"]["measured"]["bytes"] == round(47.65 * 2**30)
    # the same table on B200 (mx_formats README, 33.71) and the float8 tutorial's logged 'memory: 30.89GiB', both with
    # the loss compiled (torchtitan-0.2.1)
    assert by_id["TORCHAO_MX_2508-1"]["measured"]["bytes"] == round(33.71 * 2**30)
    assert by_id["TORCHAO_TUT_2506-1"]["measured"]["bytes"] == round(30.89 * 2**30)
    assert {by_id[i]["scenario"]["framework_version"] for i in ("TORCHAO_MX_2508-1", "TORCHAO_TUT_2506-1")} == {
        "torchtitan-0.2.1"}
    # ms-swift 1.x's benchmark page: max_memory_reserved per device / 1024**3, printed as 'GPU Memory (GiB)'
    assert [by_id[f"SWIFT_BENCH_2401-{i}"]["measured"] for i in (1, 2, 3, 4)] == [
        {"metric": "reserved", "bytes": round(x * 2**30)} for x in (66.72, 69.10, 71.34, 78.72)]
    # ms-swift 1.x/2.x script headers: '# 20GB', '# 2 * 22GB' (per GPU), '# 70GB', '# 19GB', '# 2 * 21GB GPU memory'
    assert [by_id[f"SWIFT_SCRIPTS_2404-{i}"]["measured"]["bytes"] for i in (1, 2, 3, 4, 5)] == [
        x * 10**9 for x in (20, 22, 70, 19, 21)]
    # the scripts that ran swift's own LoRA backend (lora_dtype 'fp32') do not model peft < 0.12's base-dtype adapters;
    # their pins (transformers < 4.39, < 4.40, < 4.37) keep the per-layer RoPE caches (estimate/rope_v4.py)
    assert [by_id[f"SWIFT_SCRIPTS_2404-{i}"]["scenario"]["framework_version"] for i in (3, 4, 5)] == [
        "transformers-4.40", "transformers-4.40", "transformers-4.40+deepspeed-0.16"]
    # lit-gpt's October-2023 tutorial table: max_memory_allocated() / 1e9 printed as 'GB'
    assert [by_id[f"LIT_LORA_TUT_2310-{i}"]["measured"] for i in (1, 2, 3)] == [
        {"metric": "allocated", "bytes": round(x * 10**9)} for x in (34.57, 15.28, 15.12)]
    # axolotl's READMEs: '~44GiB' (device_mem_reserved, GiB), 'about 21GB VRAM', 'about 19.1 GiB VRAM'
    assert by_id["AXOLOTL_EX_2508-1"]["measured"] == {"metric": "reserved", "bytes": 44 * 2**30}
    assert by_id["AXOLOTL_EX_2508-5"]["measured"]["bytes"] == 21 * 10**9
    assert by_id["AXOLOTL_EX_2508-7"]["measured"]["bytes"] == round(19.1 * 2**30)
    # Unsloth's notebooks print max_memory_reserved / 1024**3 as 'GB'
    assert by_id["UNSLOTH_NB_2509-1"]["measured"] == {"metric": "reserved", "bytes": round(42.789 * 2**30)}
    assert by_id["UNSLOTH_NB_2407-7"]["measured"] == {"metric": "reserved", "bytes": round(14.271 * 2**30)}
    # litgpt's config-hub table: the script prints max_memory_allocated() / 1e9 as 'GB' (the row's 'Peak memory' cell)
    for r in ROWS:
        if r["source_id"] == "LIT_HUB_2409":
            gb = re.search(r"'Peak memory' '([0-9.]+) GB'$", r["source"]).group(1)
            assert r["measured"] == {"metric": "allocated", "bytes": round(float(gb) * 10**9)}, r["id"]
    assert by_id["LIT_HUB_2409-17"]["measured"]["bytes"] == 16_240_000_000  # tiny-llama/qlora.yaml '16.24 GB'
    # torchtune PR #961: '20.2 peak memory allocated' (get_memory_stats divided by 1e9 until d0b89e206), 4 x 2048 forced
    assert by_id["TT_PR961_2405-1"]["measured"] == {"metric": "allocated", "bytes": 20_200_000_000}
    assert by_id["TT_PR961_2405-1"]["seq_exact"] and by_id["TT_PR961_2405-1"]["scenario"]["seq_len"] == 2048
    # llama-recipes PR #41's 'GB' read as GiB (the repo's byte2gb divides by 2**30): active 20.20 / 15.22, reserved 27.36 / 19.36
    assert [by_id[f"LLAMA_REC_PR41_2307-{i}"]["measured"]["bytes"] for i in (1, 2, 3, 4)] == [
        round(x * 2**30) for x in (20.20, 27.36, 15.22, 19.36)]
    # the two runs differ by dropping `outputs`: fp32 logits + transformers 4.31's use_cache KV cache = 4.977 GiB
    kept = 4 * 2048 * 32000 * 4 + 32 * 2 * 4 * 32 * 2048 * 128 * 2
    assert round(kept / 2**30, 2) == round(20.20 - 15.22, 2)
    # fms-acceleration's refs/a100_80gb.csv @24bdadb: mem_peak_torch_mem_alloc_in_bytes (the HF Trainer's memory tracker,
    # max_memory_allocated over train() on rank 0), exact bytes; every run packed to 4096 tokens
    fms = [r for r in ROWS if r["source_id"] == "FMS_ACCEL_2502"]
    assert len(fms) == 19
    # the same 19 scenarios in the file's November-2024 version (@9239802: transformers 4.45.2, TRL 0.11.4), whose
    # model upcasts the logits itself (transformers-4.44 instead of -4.47)
    older = [r for r in ROWS if r["source_id"] == "FMS_ACCEL_2411"]
    assert len(older) == 19 and "@9239802" in older[0]["source"]
    for new, old in zip(fms, older, strict=True):
        assert {**new["scenario"], "framework_version": ""} == {**old["scenario"], "framework_version": ""}
        assert old["scenario"]["framework_version"] == new["scenario"]["framework_version"].replace("4.47", "4.44")
    # and the full fine-tuning and LoRA scenarios (rows 1-10) in its July-2024 version (@b6c1455: torch_dtype float16, no
    # --fp16 flag: pure fp16; transformers 4.43.3, TRL 0.9.6)
    fp16 = [r for r in ROWS if r["source_id"] == "FMS_ACCEL_2407"]
    assert len(fp16) == 10 and "@b6c1455" in fp16[0]["source"]
    for new, old in zip(fms, fp16, strict=False):  # the 2407 CSV has the first 10 (full and LoRA)
        assert {**new["scenario"], "framework_version": "", "precision": ""} == {
            **old["scenario"], "framework_version": "", "precision": ""}
        assert old["scenario"]["precision"] == "fp16-true"
        assert old["scenario"]["framework_version"] == "transformers-4.44+torch-2.2"
    for r in fms + older + fp16:
        assert r["source"].endswith(f"mem_peak_torch_mem_alloc_in_bytes {r['measured']['bytes']}"), r["id"]
        assert r["measured"]["metric"] == "allocated" and r["seq_exact"] and r["scenario"]["seq_len"] == 4096
        sc = r["scenario"]
        # one GPU runs plain python (peft's prepare_model_for_kbit_training runs for QLoRA); two run FSDP1 full shard,
        # where TRL 0.13 (and 0.11.4) sees sharded QLoRA (no prepare, bf16 adapters: peft-0.11)
        assert sc["parallelism"] == ("fsdp" if sc["num_gpus"] == 2 else "none")
        if sc["method"] == "qlora":
            assert sc["kbit_prepare"] == ("no" if sc["num_gpus"] == 2 else "yes")
            assert ("peft-0.11" in sc["framework_version"]) == (sc["num_gpus"] == 2)
    # the full fine-tunes peak in foreach AdamW's step: weights, gradients, two states and the sqrt copy, 10 bytes a
    # parameter of Mistral-7B in bf16 (batch 4 and 8 read the same), half of it per GPU under full shard
    assert by_id["FMS_ACCEL_2502-1"]["measured"]["bytes"] == 72_434_837_504
    assert by_id["FMS_ACCEL_2502-2"]["measured"]["bytes"] == 36_225_939_968


def test_missing_scenario_keys_are_said_and_marked_low():
    for r in ROWS:
        if r["source_id"] == "AAI_FSDPQLORA_2403":
            # transformers < 4.45 and peft < 0.12 together (the combined release); train.py holds `output` from
            # l. 841 to after the step; reentrant checkpointing has no key (confidence low); the FSDP1 streams
            # are modelled (estimate/fsdp_reserved.py), and the notes say so
            # QLoRA adds bitsandbytes <= 0.43.1 (README: bitsandbytes>=0.43.0; ctx.tensors removed in 0.43.2)
            # and transformers <= 4.40's per-layer RoPE caches, fp32 on train.py's QLoRA path (fsdp-qlora)
            bnb = "+bitsandbytes-0.43" if r["scenario"]["method"] == "qlora" else ""
            assert r["confidence"] == "low"
            assert r["scenario"]["framework_version"] == "transformers-4.40+peft-0.11" + bnb + "+fsdp-qlora"
            assert "l. 576-577" in r["notes"]
            assert not bnb or "#1270" in r["notes"]
            assert r["scenario"]["keeps_outputs"] is True and "l. 841" in r["notes"] and "has no key" in r["notes"]
            assert "Modelled in estimate/fsdp_reserved.py" in r["notes"] and "not modelled" not in r["notes"]
            # train.py never calls prepare_model_for_kbit_training (no fp32 upcast of norms, embeddings, head)
            assert r["scenario"]["method"] == "lora" or r["scenario"]["kbit_prepare"] == "no"
        if r["source_id"] == "PEFT_MMQA_2607":
            # peft@51c2ff666 method_comparison/MetaMathQA: torch.optim.AdamW defaults (foreach), `outputs` held
            # to the next step's forward (run.py l. 276)
            assert not r["seq_exact"] and r["scenario"]["framework_version"] == "peft-method-comparison"
            assert r["scenario"]["keeps_outputs"] is True and "l. 276" in r["notes"]
            # the DoRA run (rank32-dora.json: use_dora true) is the one row with dora set
            assert r["scenario"].get("dora", False) is ("dora.json" in r["source"])
        if r["source_id"] == "LLAMA_REC_PR41_2307":
            # llama_finetuning.py @e5970e2e: pure bf16, FSDP1 with LoRA leaf units, packed samsum (2048), eager attention
            # of transformers 4.31; the measuring code is not published (confidence low)
            sc = r["scenario"]
            # llama-recipes-2023: from_pretrained without use_cache=False (came in 353dfcdc), so the KV cache is returned
            assert r["confidence"] == "low" and r["seq_exact"]
            # transformers 4.31 with its per-layer RoPE caches (transformers-4.40, estimate/rope_v4.py)
            assert sc["framework_version"] == "transformers-4.40+llama-recipes-2023" and "353dfcdc" in r["notes"]
            assert "_set_cos_sin_cache" in r["notes"]
            assert sc["parallelism"] == "fsdp" and sc["fsdp_version"] == "1" and sc["attention"] == "eager"
            assert sc["keeps_outputs"] == (r["id"] in ("LLAMA_REC_PR41_2307-1", "LLAMA_REC_PR41_2307-2"))
        if r["source_id"] == "LIT_HUB_2409":
            # one A10G, the config file as it is (the 4xA10G rows repeat the 1xA10G figures: devices 1 kept); padded
            # Alpaca2k batches, so 512 is only the bound; litgpt 2024 (untied lm_head, full.py's whole logits)
            sc = r["scenario"]
            assert sc["gpu"] == "a10g" and sc["num_gpus"] == 1 and sc["framework"] == "litgpt"
            assert sc["framework_version"] == "litgpt-2024" and sc["seq_len"] == 512 and not r["seq_exact"]
            assert sc["gradient_checkpointing"] == "none" and "4xA10G" in r["notes"]
            # bnb.nf4 QLoRA runs bitsandbytes' PagedAdamW (litgpt lora.py / utils.py instantiate_bnb_optimizer)
            assert (sc["method"] == "qlora") == (sc["optimizer"] == "paged-adamw") == (sc["quantize"] == "nf4")
            # Gemma 2's soft-capped attention runs outside SDPA in litgpt (model.py l. 299-304)
            assert (sc["attention"] == "eager") == sc["model"].startswith("google/gemma-2-")


def test_every_measured_row_states_the_framework_its_source_ran():
    """The framework a source ran is stored in each row's scenario (so `vramfit runs import` + `calibrate` estimate
    what the accuracy benchmark estimates) and agrees with the benchmark's per-source table. Before 2026-12-02, 61
    rows left it out, and calibrate estimated torchtune and litgpt runs as HF ones (docs/measure.md's a100 QLoRA
    mean error read +47.4 %; +9.0 % with the frameworks)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("accuracy_bench", root / "benchmarks" / "accuracy.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.load([bench.MEASURED / name for name in bench.MEASURED_SETS])
    assert len(rows) == 361
    for row in rows:
        assert row["scenario"]["framework"] == bench.SOURCE_FRAMEWORK.get(row["source_id"], "hf"), row["id"]


def test_the_mistral_small_22b_notebook_row_is_the_catalog_model_it_printed():
    """Unsloth's Mistral_Small_(22B)-Alpaca notebook (UNSLOTH_NB_2407-7) printed 95,420,416 trainable parameters and
    '12.486 GB of memory reserved.' after loading (max_memory_reserved / 1024**3): the catalog's 56-layer layout gives the
    same LoRA count, and the estimate's resident load (16-bit embedding and head, the 4-bit base, the per-layer RoPE caches
    of the unsloth-2024.8 layout, the fp32 adapters) is that figure to within 0.02 GiB."""
    from vramfit import estimate

    row = next(r for r in ROWS if r["id"] == "UNSLOTH_NB_2407-7")
    assert "trainable 95,420,416 printed" in row["notes"] and "'12.486 GB of memory reserved.'" in row["source"]
    result = estimate(dict(row["scenario"]))
    assert result.model.num_trainable_params == 95_420_416
    parts = dict(result.peak.breakdown)
    load = parts["weights"] + parts["quantized_base"] + parts["rope_cache"] + parts["adapters"]
    assert abs(load - 12.486 * 2**30) < 0.02 * 2**30  # 12.477 GiB: 0.009 below
