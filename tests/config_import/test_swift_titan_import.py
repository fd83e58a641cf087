"""ms-swift and torchtitan configs: the shell script, config file and args.json forms, the defaults' sources, the
measured rows the example files ran as, and one-line refusals.

Fixtures: swift_*.sh and swift_sft.yaml are copied from modelscope/ms-swift v4.5.2 (ff5128777) examples/ (the path in
each file's first line); swift_args.json is the args.json swift 3.8.1 wrote for the quick-start LoRA run (the
examples/train/lora_sft.sh command, Qwen2.5-7B-Instruct), as printed in a public run log, trimmed to 76 of its keys;
torchtitan_llama3_8b.toml is pytorch/torchtitan@9dec370 train_configs/llama3_8b.toml and torchtitan_llama3_70b.toml is
v0.2.2 torchtitan/models/llama3/train_configs/llama3_70b.toml.
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit import estimate, from_config
from vramfit.cli.main import app
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError
from vramfit.scenario import parse_scenario

FIX = Path(__file__).parent / "fixtures"
ROWS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured"


def _row(name: str, row_id: str) -> dict:
    for line in (ROWS / name).read_text().splitlines():
        row = json.loads(line)
        if row["id"] == row_id:
            return row
    raise AssertionError(row_id)


def test_shell_script_variables_arithmetic_and_env():
    from vramfit.config_import.swift_shell import parse_script

    data = parse_script((FIX / "swift_zero2.sh").read_text(), FIX / "swift_zero2.sh")
    # nproc_per_node=2 ... NPROC_PER_NODE=$nproc_per_node ... $(expr 16 / $nproc_per_node)
    assert data["ENV"] == {"CUDA_VISIBLE_DEVICES": "0,1", "NPROC_PER_NODE": 2}
    assert (data["swift"], data["gradient_accumulation_steps"], data["deepspeed"]) == ("sft", 8, "zero2")
    assert data["dataset"] == "swift/self-cognition#1000" and data["system"] == "You are a helpful assistant."
    lists = parse_script((FIX / "swift_lora_sft.sh").read_text(), FIX / "swift_lora_sft.sh")
    assert lists["dataset"] == ["AI-ModelScope/alpaca-gpt4-data-zh#500", "AI-ModelScope/alpaca-gpt4-data-en#500",
                                "swift/self-cognition#500"]


def test_defaults_name_ms_swift_v4_5_2_and_the_launch():
    imp = from_config(FIX / "swift_lora_sft.sh")
    d = {e.key: e for e in imp.entries if e.kind == "default"}
    assert d["lora_dropout"].value == 0.05 and "ms-swift v4.5.2 swift/arguments/tuner_args.py" in d["lora_dropout"].note
    assert d["gradient_checkpointing"].value is True and "swift/trainers/arguments.py l. 134" in d["gradient_checkpointing"].note
    assert d["ENV.NPROC_PER_NODE"].value == 1 and "swift/cli/main.py" in d["ENV.NPROC_PER_NODE"].note
    # unset gradient_accumulation_steps: max(1, ceil(16 / batch / world)) (swift/trainers/arguments.py l. 284-285)
    text = (FIX / "swift_zero2.sh").read_text().replace("    --gradient_accumulation_steps $(expr 16 / $nproc_per_node) \\\n", "")
    assert from_text(text).scenario.grad_accum == 8
    assert from_text(text.replace("--per_device_train_batch_size 1", "--per_device_train_batch_size 4")).scenario.grad_accum == 2
    grpo = (FIX / "swift_grpo_lora.sh").read_text().replace("    --gradient_accumulation_steps 1 \\\n", "")
    assert "gradient_accumulation_steps" not in grpo and from_text(grpo).scenario.grad_accum == 1  # rlhf_args.py l. 527-530


def test_unset_torch_dtype_and_max_length_come_from_the_models_config():
    text = "swift sft --model meta-llama/Llama-2-7b-hf --dataset x\n"  # config.json: float16, 4096 positions
    sc = from_text(text).scenario
    assert (sc.precision.value, sc.seq_len) == ("fp16-true", 4096)
    sc = from_text("swift sft --model Qwen/Qwen2.5-7B --torch_dtype float32 --tuner_type full --dataset x "
                   "--max_length 1024\n").scenario
    assert (sc.precision.value, sc.method.value) == ("fp16-mixed", "full")  # float32 turns fp16 autocast on


def test_fsdp2_preset_and_ddp():
    sc = from_text("NPROC_PER_NODE=4 swift sft --model Qwen/Qwen2.5-7B --tuner_type full --fsdp fsdp2 "
                   "--max_length 512 --dataset x\n").scenario
    assert (sc.num_gpus, sc.parallelism.value, sc.fsdp_version.value, sc.gradient_checkpointing.value) == \
        (4, "fsdp", "2", "full")
    sc = from_text("NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-7B --max_length 512 --dataset x\n").scenario
    assert (sc.parallelism.value, sc.grad_accum) == ("ddp", 8)


def test_swift_examples_import_as_the_measured_rows_they_ran_as():
    """found.jsonl holds the examples' header figures; what differs is explained: the catalog model, the release
    pinned in the row, swift's freeze_vit the rows leave at 'auto' (lora_dropout 0.05 is in the rows since 3c52a51),
    and the label-position logits v4.5.2 computes: the headers were written before ms-swift's logits_to_keep mask
    (46ad5ca56, 2025-05-29, v3.5.0), so the rows' runs computed every position's logits."""
    for fixture, row_id in (("swift_lora_sft.sh", "SWIFT_EX_2601-8"), ("swift_qlora_bnb.sh", "SWIFT_EX_2601-7")):
        row = _row("found.jsonl", row_id)["scenario"]
        got = {**from_config(FIX / fixture).overrides, "model": "Qwen/Qwen2.5-7B",
               "freeze_vision": "auto", "framework_version": row["framework_version"]}
        assert got.pop("logits_to_keep") == "labels"
        assert parse_scenario(got).to_dict() == parse_scenario(row).to_dict()
    # as imported (swift's lora_dropout 0.05 kept), lora_sft.sh's estimate is the '# 22GB' header within 5 %
    row = _row("found.jsonl", "SWIFT_EX_2601-8")
    sc = parse_scenario({**from_config(FIX / "swift_lora_sft.sh").overrides, "model": "Qwen/Qwen2.5-7B",
                         "framework_version": row["scenario"]["framework_version"]})
    assert abs(estimate(sc).peak.reserved_bytes / row["measured"]["bytes"] - 1) < 0.05


def test_torchtitan_toml_is_the_measured_benchmark_run():
    """TITAN_BENCH_2412-1 ran train_configs/llama3_8b.toml @9dec370 on 8 H100s at local batch size 2 (its table's
    caption): the import with --micro-batch-size 2 --gpu h100-nvl (the row's stand-in for the 96 GB card) is that
    row's scenario, and so its estimate."""
    row = _row("public.jsonl", "TITAN_BENCH_2412-1")
    got = parse_scenario({**from_config(FIX / "torchtitan_llama3_8b.toml").overrides, "micro_batch_size": 2,
                          "gpu": "h100-nvl"})
    assert got.to_dict() == parse_scenario(row["scenario"]).to_dict()
    r = estimate(got)
    assert r.peak.reserved_bytes == estimate(parse_scenario(row["scenario"])).peak.reserved_bytes
    assert abs(r.peak.reserved_bytes / row["measured"]["bytes"] - 1) < 0.10  # the row's measured 82.4 GiB


def test_torchtitan_layouts_and_degrees():
    sc = from_text("[training]\nbatch_size = 4\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
                   "[activation_checkpoint]\nmode = 'selective'\nselective_ac_option = '2'\n"
                   "[model]\nname = 'llama3'\nflavor = '70B'\n").scenario
    assert (sc.num_gpus, sc.parallelism.value, sc.tensor_parallel, sc.gradient_checkpointing.value) == (8, "fsdp", 2, "none")
    imp = from_text("[training]\nlocal_batch_size = 2\nglobal_batch_size = 64\n[parallelism]\n"
                    "data_parallel_shard_degree = 8\nfsdp_reshard_after_forward = 'never'\n[model]\nflavor = '8B'\n")
    assert (imp.scenario.grad_accum, imp.scenario.parallelism.value) == (4, "fsdp-grad-op")
    nm = {e.key for e in from_text("[float8]\nenable_float8_linear = true\n[model]\nname = 'llama3'\nflavor = '8B'\n"
                                   "[training]\nbatch_size = 1\n").not_modelled()}
    assert "float8.enable_float8_linear" in nm


@pytest.mark.parametrize(("text", "message"), [
    ("swift sft --model Qwen/Qwen2.5-7B --tuner_type adalora --max_length 8\n",
     "tuner_type 'adalora' is not modelled yet (valid values: lora, full)"),
    ("swift sft --model Qwen/Qwen2.5-7B --quant_method hqq --quant_bits 4 --max_length 8\n",
     "quant_method 'hqq' with quant_bits 4 is not modelled yet"),
    ("swift sft --model Qwen/Qwen2.5-7B --attn_impl flex --max_length 8\n", "attn_impl 'flex' is not modelled yet"),
    ("swift sft --model Qwen/Qwen2.5-7B --gradient_accumulation_steps $(nproc)\n", "runs a command inside the line"),
    ("swift sft --model Qwen/Qwen2.5-7B --gradient_accumulation_steps $GA\n", "uses $GA, which the script does not set"),
    ("swift infer --model Qwen/Qwen2.5-7B\n", "runs 'swift infer', which does not train (valid values: sft, rlhf, pt)"),
    ("swift sft --model a\nswift rlhf --model b\n", "holds 2 swift commands"),
    ("[activation_checkpoint]\nmode = 'memory_budget'\n", "activation_checkpoint.mode 'memory_budget' is not "
                                                          "modelled yet (valid values: none, full, selective)"),
    ("[training]\nbatch_size = 1\nseq_len = [\n", "is not valid TOML"),
])
def test_bad_values_get_one_line(text, message):
    with pytest.raises(ScenarioError) as ei:
        from_text(text)
    assert message in str(ei.value) and "\n" not in str(ei.value)


def test_cli_reads_a_script_and_refuses_with_exit_2(tmp_path):
    ok = CliRunner().invoke(app, ["estimate", "--from", str(FIX / "swift_qlora_bnb.sh"), "--json"])
    assert ok.exit_code == 0, ok.output
    assert "imported swift config" in ok.stderr and "read     quant_bits: 4 → method=qlora" in ok.stderr
    bad = tmp_path / "train.sh"
    bad.write_text("swift sft --model Qwen/Qwen2.5-7B --tuner_type vera\n")
    r = CliRunner().invoke(app, ["estimate", "--from", str(bad)])
    assert r.exit_code == 2 and "tuner_type 'vera' is not modelled yet (valid values: lora, full)" in r.stderr
    r = CliRunner().invoke(app, ["fit", "--from", str(FIX / "torchtitan_llama3_8b.toml"), "--gpu", "h100-sxm",
                                 "--micro-batch-size", "8", "--write-to", str(tmp_path / "out.toml")])
    assert r.exit_code == 2 and "change: sequences of" in r.stderr
    assert "vramfit writes YAML and JSON configs back, not shell scripts or TOML" in r.stderr
    assert not (tmp_path / "out.toml").exists()


def test_args_json_with_the_resolved_deepspeed_config(tmp_path):
    """args.json holds --deepspeed as ms-swift resolved it (sft_args.py l. 269 json_parse_to_dict) and the world size."""
    data = json.loads((FIX / "swift_args.json").read_text())
    data.update(global_world_size=4, deepspeed={"zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True}, "stage3_max_live_parameters": 1e9}})
    (tmp_path / "args.json").write_text(json.dumps(data))
    imp = from_config(tmp_path / "args.json")
    sc = imp.scenario
    assert (sc.num_gpus, sc.parallelism.value, sc.offload.value) == (4, "zero3", "optimizer+params")
    assert sc.deepspeed_config.to_dict()["zero_optimization"]["stage3_max_live_parameters"] == 1_000_000_000
    assert "  read     deepspeed → zero_optimization.stage: 3 → parallelism=zero3" in imp.lines()


def test_pasted_text_imports_as_the_file():
    for name in ("swift_zero2.sh", "swift_sft.yaml", "torchtitan_llama3_8b.toml", "torchtitan_llama3_70b.toml"):
        assert from_text((FIX / name).read_text()).scenario == from_config(FIX / name).scenario, name
    sc = from_text("[model]\nname = 'qwen3'\nflavor = '30B-A3B'\n[parallelism]\ndata_parallel_shard_degree = 4\n"
                   "expert_parallel_degree = 4\n").scenario
    assert (sc.model, sc.num_gpus, sc.expert_parallel, sc.micro_batch_size) == ("Qwen/Qwen3-30B-A3B", 4, 4, 8)


def test_script_running_a_config_file(tmp_path, monkeypatch):
    """examples/yaml/deepspeed/sft.sh runs 'NPROC_PER_NODE=2 swift sft examples/yaml/deepspeed/sft.yaml' from the
    repository root; arguments after the file override it (parse_yaml_args puts the file's first)."""
    folder = tmp_path / "examples/yaml/deepspeed"
    folder.mkdir(parents=True)
    (folder / "sft.yaml").write_text((FIX / "swift_sft.yaml").read_text() + "ENV:\n  NPROC_PER_NODE: 8\n")
    (folder / "sft.sh").write_text("NPROC_PER_NODE=2 \\\nCUDA_VISIBLE_DEVICES=0,1 \\\n"
                                   "swift sft examples/yaml/deepspeed/sft.yaml --max_length 1024\n")
    monkeypatch.chdir(tmp_path)
    sc = from_config(folder / "sft.sh").scenario
    assert (sc.num_gpus, sc.seq_len, sc.grad_accum, sc.parallelism.value) == (2, 1024, 8, "zero2")
    with pytest.raises(ScenarioError, match="a pasted command cannot"):
        from_text("swift sft examples/yaml/deepspeed/sft.yaml\n")


@pytest.mark.parametrize("checkpointing", ["full", "selective-op"])
def test_a_planned_torchtitan_export_imports_back_as_the_plan(checkpointing):
    """vramfit plan's torchtitan export (plan/export_titan.py) read back: the same layout, batch and checkpointing
    (selective-op needs selective_ac_option 'op' in the TOML: torchtitan's default '2' checkpoints every second block)."""
    from vramfit.plan import plan
    from vramfit.plan.export import export_plan
    from vramfit.plan.export_titan import TOML_FILE

    # 16k tokens: with torchtitan's fp32 AdamW (it builds no 8-bit optimizer) shorter runs plan without checkpointing;
    # the release that reads the TOML (v0.3.0 reads none)
    r = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 16384, "framework": "torchtitan",
              "framework_version": "torchtitan-0.2.2", "gradient_checkpointing": checkpointing}, effective_batch=32,
             max_gpus=8, gpu_ids="h100-sxm", with_changes=False)
    p = next(p for p in r.plans if p.gradient_checkpointing == checkpointing and p.num_gpus > 1)
    sc = from_text(export_plan(p, "torchtitan").files[TOML_FILE]).scenario
    got = (sc.model, sc.num_gpus, sc.tensor_parallel, sc.pipeline_parallel, sc.micro_batch_size, sc.grad_accum,
           sc.seq_len, sc.gradient_checkpointing.value, sc.offload.value)
    assert got == ("meta-llama/Llama-3.1-8B", p.num_gpus, p.scenario.get("tensor_parallel", 1),
                   p.scenario.get("pipeline_parallel", 1), p.micro_batch_size, p.grad_accum, 16384, checkpointing,
                   p.offload)


def test_a_one_gpu_torchtitan_offload_plan_says_its_toml_release_offloads_nothing():
    """Llama-3.1-8B full on one RTX 4090 plans with FSDP2 CPU offload, as torchtitan 0.3 runs it (FSDP at every
    degree). The TOML it writes is read by torchtitan before 0.3, which applies no FSDP at one shard
    (v0.2.2 models/llama3/infra/parallelize.py ``if parallel_dims.fsdp_enabled``): the export says so, and the TOML
    imports as that release runs it, without offload, where it was refused before."""
    from vramfit.plan import plan
    from vramfit.plan.export import export_plan
    from vramfit.plan.export_titan import TOML_FILE

    r = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan"}, effective_batch=1,
             max_gpus=1, gpu_ids="rtx4090", with_changes=False)
    p = next(p for p in r.plans if p.offload != "none")
    assert (p.num_gpus, p.offload) == (1, "optimizer+params")
    out = export_plan(p, "torchtitan")
    assert any("applies no FSDP, so enable_cpu_offload offloads nothing" in n for n in out.notes)
    imp = from_text(out.files[TOML_FILE])
    e = next(e for e in imp.entries if e.key == "training.enable_cpu_offload")
    assert (e.kind, imp.scenario.offload.value, imp.scenario.parallelism.value) == ("ignored", "none", "none")
    # the file's run holds the whole fp32 state: more than a 4090, where the plan fitted
    assert estimate(imp.scenario).peak.device_bytes > 24 * 2**30 > p.device_bytes


def test_grpo_qlora_script_with_a_quoted_multiline_variable():
    """examples/train/grpo/internal/qlora.sh: SYSTEM_PROMPT spans four lines; GRPO's max_length is the prompt
    (2048) and max_completion_length (8192) is added; vLLM colocated at 0.4 of the card, sleep_level 1."""
    imp = from_config(FIX / "swift_grpo_qlora.sh")
    sc = imp.scenario.to_dict()
    assert {k: sc[k] for k in ("model", "method", "quantize", "kbit_prepare", "num_gpus", "parallelism", "stage",
                               "micro_batch_size", "grad_accum", "seq_len", "completion_len", "num_generations",
                               "generation", "vllm_gpu_memory_utilization", "vllm_sleep")} == {
        "model": "Qwen/Qwen2.5-3B-Instruct", "method": "qlora", "quantize": "nf4-dq", "kbit_prepare": "no",
        "num_gpus": 4, "parallelism": "zero2", "stage": "grpo", "micro_batch_size": 4, "grad_accum": 4,
        "seq_len": 2048 + 8192, "completion_len": 8192, "num_generations": 8, "generation": "vllm-colocate",
        "vllm_gpu_memory_utilization": 0.4, "vllm_sleep": True}
    assert {e.key for e in imp.not_modelled()} >= {"vllm_max_model_len", "use_logits_to_keep"}
    r = estimate(parse_scenario({**imp.overrides, "gpu": "h100-sxm"}))
    assert r.peak.reserved_bytes > 0.4 * 80e9  # the colocated vLLM's share of the card alone


def test_multinode_script():
    """examples/train/multi-node/swift/train_node2.sh: NNODES=2 x NPROC_PER_NODE=4, $(expr 32 / 4 / 2) accumulation,
    full fine-tuning with ZeRO-2, a 1 % held-out split evaluated at batch 1."""
    sc = from_config(FIX / "swift_multinode.sh").scenario
    assert (sc.num_gpus, sc.num_nodes, sc.grad_accum, sc.parallelism.value, sc.method.value, sc.seq_len,
            sc.eval_batch_size, sc.precision.value) == (8, 2, 4, "zero2", "full", 8192, 1, "bf16-true")
    with pytest.raises(ScenarioError, match="cannot evaluate '16 / \\$X'"):
        from_text("swift sft --model Qwen/Qwen2.5-7B --gradient_accumulation_steps $(expr 16 / $X)\n")


def test_deepspeed_and_fsdp_given_as_json_text():
    ds = '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}'
    sc = from_text(f"NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-7B --max_length 512 --deepspeed '{ds}'\n").scenario
    assert (sc.parallelism.value, sc.offload.value) == ("zero3", "optimizer")
    fsdp = '{"fsdp": "shard_grad_op auto_wrap", "fsdp_config": {"fsdp_version": 2}}'
    sc = from_text(f"NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-7B --max_length 512 --fsdp '{fsdp}'\n").scenario
    assert (sc.parallelism.value, sc.fsdp_version.value, sc.gradient_checkpointing.value) == ("fsdp-grad-op", "2", "full")
    with pytest.raises(ScenarioError, match="deepspeed is not a preset name, a file or valid JSON"):
        from_text("swift sft --model Qwen/Qwen2.5-7B --max_length 512 --deepspeed '{stage: 3}'\n")


def _titan_new(tmp_path, extra: str):
    """The v0.2.2 layout (torchtitan_llama3_70b.toml) with compile on and ``extra`` in its [compile] section."""
    text = (FIX / "torchtitan_llama3_70b.toml").read_text()
    section = '[compile]\nenable=false\ncomponents = ["model", "loss"]\n'
    assert section in text
    path = tmp_path / "t.toml"
    path.write_text(text.replace(section, f"[compile]\nenable = true\n{extra}\n"))
    return from_config(path)


def test_torchtitan_layouts_are_read_as_their_releases(tmp_path):
    """The 9dec370 layout is torchtitan-2024 (foreach AdamW, the loss eager, repeat_kv); the v0.1-v0.2.2 layout
    torchtitan-0.2.2 (v0.3.0 reads no TOML), whose compile.components default ["model", "loss"] compiles the loss; a
    components list without "loss" is said, one without "model" compiles nothing."""
    assert from_config(FIX / "torchtitan_llama3_8b.toml").scenario.framework_version == "torchtitan-2024"
    both = _titan_new(tmp_path, "")
    assert both.scenario.compile is True and both.scenario.framework_version == "torchtitan-0.2.2"
    assert not [e for e in both.entries if e.key == "compile.components" and e.kind == "not modelled yet"]
    model_only = _titan_new(tmp_path, 'components = ["model"]')
    note = next(e.note for e in model_only.entries if e.key == "compile.components")
    assert model_only.scenario.compile is True and "the loss left eager" in note and "torchtitan-2024" in note
    loss_only = _titan_new(tmp_path, 'components = ["loss"]')
    assert loss_only.scenario.compile is False
    assert "counted uncompiled" in next(e.note for e in loss_only.entries if e.key == "compile.components")


def test_the_march_to_august_2025_layout_reads_its_compile_and_batch(tmp_path):
    """[parallelism] came on 2025-03-18 and [compile] only on 2025-08-20: between them (v0.1.0, 775a486ed, 6fc499f6f)
    a file says training.compile and training.batch_size; both had been reported as unknown keys, the run read
    uncompiled at the v0.2.2 default micro-batch 8 (a review). That layout is torchtitan-0.2.1: its k and v
    repeated, the loss compiled with the blocks (from 2025-04-02), fused AdamW."""
    text = (FIX / "torchtitan_llama3_8b_2506.toml").read_text()
    assert "[parallelism]" in text and "[compile]" not in text and "\nbatch_size = 1" in text
    path = tmp_path / "t.toml"
    path.write_text(text.replace("compile = false", "compile = true"))
    imp = from_config(path)
    sc = imp.scenario
    assert (sc.compile, sc.framework_version, sc.micro_batch_size, sc.seq_len) == (True, "torchtitan-0.2.1", 1, 8192)
    assert not [e for e in imp.entries if e.kind == "ignored" and e.key in ("training.compile", "training.batch_size")]
    measured = json.loads(next(x for x in (FIX.parents[2] / "benchmarks" / "data" / "measured" / "found.jsonl")
                               .read_text().splitlines() if '"TORCHAO_TUT_2506-1"' in x))["scenario"]
    assert estimate({**sc.to_dict(), "gpu": "h100-nvl"}).peak.reserved_bytes == estimate(measured).peak.reserved_bytes


def test_a_v0_2_2_file_without_a_compile_section_stays_the_profiles_release(tmp_path):
    """Only a file that says training.compile or training.batch_size beside [parallelism] is the March-August 2025
    layout; a v0.2.2 file that leaves [compile] out (compile off) is torchtitan-0.2.2, not torchtitan-0.2.1."""
    text = (FIX / "torchtitan_llama3_70b.toml").read_text().replace('[compile]\nenable=false\ncomponents = ["model", "loss"]\n', "")
    assert "[compile]" not in text and "training.compile" not in text
    path = tmp_path / "t.toml"
    path.write_text(text)
    sc = from_config(path).scenario
    assert sc.framework_version == "torchtitan-0.2.2" and sc.compile is False


def test_a_hostile_llamafactory_image_cap_is_one_line_or_left_alone(tmp_path):
    """image_max_pixels of .inf, -1, NaN or text: never a traceback; only a positive finite cap is said."""
    base = ("model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\nstage: sft\nfinetuning_type: lora\nlora_target: all\n"
            "cutoff_len: 2048\nper_device_train_batch_size: 1\nbf16: true\n")
    for value in (".inf", "-1", ".nan", "big", "1e400"):
        path = tmp_path / "lf.yaml"
        path.write_text(base + f"image_max_pixels: {value}\n")
        try:
            imp = from_config(path)
        except ScenarioError as err:
            assert "image_max_pixels" in str(err)
            continue
        assert not [e for e in imp.entries if e.key == "image_max_pixels" and e.kind == "not modelled yet"]
