"""Each fixture imports to the scenario a careful human would write (full dict pinned); bad files get one
clear line; the key report names every key."""

from pathlib import Path

import pytest

from vramfit import from_config
from vramfit.errors import ScenarioError

FIX = Path(__file__).parent / "fixtures"

#: fixtures/ds_z2.json and ds_z3_offload.json as the scenario holds them (typed zero_optimization keys)
DS_Z2 = {'zero_optimization': {'stage': 2, 'reduce_bucket_size': 'auto', 'allgather_bucket_size': 500000000, 'overlap_comm': True, 'contiguous_gradients': True}}
DS_Z3 = {'zero_optimization': {'stage': 3, 'offload_optimizer': {'device': 'cpu'}, 'offload_param': {'device': 'cpu'}, 'reduce_bucket_size': 'auto', 'overlap_comm': False, 'contiguous_gradients': True, 'stage3_prefetch_bucket_size': 'auto', 'stage3_param_persistence_threshold': 'auto'}}
BASE = {"params": None, "deepspeed_config": None, "framework_version": None, "kbit_prepare": "auto", "use_reentrant": "auto", "optimizer_impl": "auto", "fsdp_version": "auto", "optimizer_in_backward": False, "quantize_experts": "auto", "gpu": None, "compile": False, "num_gpus": 1,
        "parallelism": "none", "offload": "none", "attention": "sdpa", "loss": "standard",
        "stage": "sft", "reference": "auto", "num_generations": None, "completion_len": None, "generation": "hf",
        "vllm_gpu_memory_utilization": None, "vllm_sleep": False, "cpo_alpha": None, "rpo_alpha": None,
        "num_nodes": 1, "shard_scope": "all", "interconnect": "auto",
        "keeps_outputs": False, "dora": False, "modules_to_save": [], "eval_batch_size": 0, "logits_to_keep": "all", "label_share": 1.0, "tensor_parallel": 1, "pipeline_parallel": 1, "pipeline_schedule": "1f1b",
        "pipeline_virtual_stages": 1, "context_parallel": 1, "expert_parallel": 1,
        "images_per_sample": 0, "image_height": 448, "image_width": 448, "freeze_vision": "auto", "quantize_vision": "auto",
        "frames_per_sample": 0, "moe_kernel": "none"}

EXPECTED = {
    "axolotl_qlora.yml": {**BASE, "framework_version": "axolotl-0.12", "model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "precision": "bf16-true",
                          "quantize": "nf4-dq", "lora_rank": 32, "lora_alpha": 16.0, "lora_targets": ["all-linear"],
                          "optimizer": "paged-adamw", "micro_batch_size": 2, "seq_len": 4096, "grad_accum": 4,
                          "gradient_checkpointing": "full", "attention": "flash", "framework": "hf", "lora_dropout": 0.05,
                          "eval_batch_size": 2, "kbit_prepare": "no",  # norms/embeddings cast back to 16 bits
                          "use_reentrant": "yes"},  # axolotl's kwargs where the file sets none (normalize_config)
    "axolotl_full_fsdp.yml": {**BASE, "use_reentrant": "no", "optimizer_impl": "fused", "framework_version": "axolotl-0.12", "model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed",
                              "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"],
                              "optimizer": "adamw", "micro_batch_size": 1, "seq_len": 8192, "grad_accum": 8,
                              "gradient_checkpointing": "full", "attention": "flash", "loss": "fused",
                              "parallelism": "fsdp", "offload": "optimizer+params", "framework": "hf", "lora_dropout": None},
    "axolotl_lora_zero2.yml": {**BASE, "framework_version": "axolotl-0.12", "model": "mistralai/Mistral-7B-v0.1", "method": "lora", "precision": "bf16-true",
                               "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0,
                               "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj"], "optimizer": "adamw-8bit",
                               "micro_batch_size": 4, "seq_len": 512, "grad_accum": 1, "gradient_checkpointing": "offload",
                               "parallelism": "zero2", "framework": "hf", "lora_dropout": 0.0, "stage": "dpo",
                               "deepspeed_config": DS_Z2},
    "llamafactory_lora_ds3.yaml": {**BASE, "use_reentrant": "yes", "model": "meta-llama/Meta-Llama-3-8B", "method": "lora", "precision": "bf16-true",
                                   "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"],
                                   "optimizer": "adamw", "micro_batch_size": 4, "seq_len": 2048, "grad_accum": 2,
                                   "gradient_checkpointing": "full", "attention": "flash", "loss": "fused",
                                   "parallelism": "zero3", "offload": "optimizer+params", "framework": "hf",
                                   "lora_dropout": 0.0, "deepspeed_config": DS_Z3},
    "llamafactory_qlora.yaml": {**BASE, "use_reentrant": "yes", "model": "Qwen/Qwen2.5-7B", "method": "qlora", "precision": "bf16-true",
                                "quantize": "nf4-dq", "lora_rank": 8, "lora_alpha": 16.0, "lora_targets": ["all-linear"],
                                "optimizer": "adamw", "micro_batch_size": 1, "seq_len": 2048, "grad_accum": 8,
                                "gradient_checkpointing": "full", "framework": "hf", "lora_dropout": 0.0,
                                "kbit_prepare": "no"},  # LLaMA-Factory never calls prepare_model_for_kbit_training
    "llamafactory_full_ds2.yaml": {**BASE, "use_reentrant": "yes", "model": "Qwen/Qwen2.5-1.5B", "method": "full", "precision": "bf16-mixed",
                                   "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"],
                                   "optimizer": "adamw-8bit", "micro_batch_size": 2, "seq_len": 4096, "grad_accum": 4,
                                   "gradient_checkpointing": "full", "attention": "flash", "parallelism": "zero2",
                                   "framework": "hf", "lora_dropout": None, "deepspeed_config": DS_Z2},
    "trl_lora_fsdp.yaml": {**BASE, "use_reentrant": "no", "model": "meta-llama/Llama-3.1-8B", "method": "lora", "precision": "bf16-true",
                           "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0,
                           "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                           "optimizer": "adamw", "micro_batch_size": 1, "seq_len": 2048, "grad_accum": 16,
                           "gradient_checkpointing": "full", "attention": "flash", "parallelism": "fsdp",
                           "offload": "optimizer+params", "framework": "hf", "lora_dropout": 0.05},
    "litgpt_full.yaml": {**BASE, "model": "meta-llama/Llama-3.2-1B", "method": "full", "precision": "bf16-true",
                         "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"],
                         "optimizer": "adamw", "micro_batch_size": 4, "seq_len": 4096, "grad_accum": 4,
                         "gradient_checkpointing": "full", "num_gpus": 4, "parallelism": "fsdp", "framework": "litgpt",
                         "lora_dropout": None, "eval_batch_size": 4},
    "trl_sft_qlora.yaml": {**BASE, "model": "Qwen/Qwen2.5-1.5B", "method": "qlora", "precision": "bf16-true",
                           "quantize": "nf4-dq", "lora_rank": 32, "lora_alpha": 16.0, "lora_targets": ["all-linear"],
                           "optimizer": "paged-adamw-8bit", "micro_batch_size": 2, "seq_len": 1024, "grad_accum": 8,
                           "gradient_checkpointing": "full", "loss": "fused", "framework": "hf", "lora_dropout": 0.05,
                           # TRL's trainers: no prepare_model_for_kbit_training, bf16 adapters (trl 1.16.0)
                           "framework_version": "trl-1.16"},
    "trl_full.json": {**BASE, "model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-mixed", "quantize": "none",
                      "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"], "optimizer": "adamw",
                      "micro_batch_size": 8, "seq_len": 1024, "grad_accum": 1, "gradient_checkpointing": "full",
                      "framework": "hf", "lora_dropout": None},
    "torchtune_qlora.yaml": {**BASE, "model": "meta-llama/Llama-3.1-8B", "method": "qlora", "precision": "bf16-true",
                             "quantize": "nf4-dq", "lora_rank": 8, "lora_alpha": 16.0,
                             "lora_targets": ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                             "optimizer": "adamw", "micro_batch_size": 2, "seq_len": 4096, "grad_accum": 8,
                             "gradient_checkpointing": "full", "loss": "chunked", "framework": "torchtune", "lora_dropout": 0.0,
                             "optimizer_impl": "fused"},
    "torchtune_full_fsdp.yaml": {**BASE, "model": "meta-llama/Llama-3.2-3B", "method": "full", "precision": "bf16-true",
                                 "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"],
                                 "optimizer": "adamw", "optimizer_in_backward": False, "micro_batch_size": 4,
                                 "seq_len": 2048, "grad_accum": 1, "gradient_checkpointing": "offload", "loss": "chunked",
                                 "parallelism": "fsdp", "offload": "optimizer+params", "framework": "torchtune",
                                 "lora_dropout": None, "compile": True, "optimizer_impl": "fused"},
    "litgpt_lora.yaml": {**BASE, "model": "mistralai/Mistral-7B-v0.1", "method": "lora", "precision": "bf16-true",
                         "quantize": "none", "lora_rank": 16, "lora_alpha": 32.0,
                         "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                         "optimizer": "adamw", "micro_batch_size": 2, "seq_len": 1024, "grad_accum": 4,
                         "gradient_checkpointing": "full", "num_gpus": 2, "parallelism": "fsdp", "framework": "litgpt",
                         "lora_dropout": 0.05, "eval_batch_size": 2},
    "litgpt_qlora.yaml": {**BASE, "model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "precision": "bf16-true",
                          "quantize": "nf4-dq", "lora_rank": 8, "lora_alpha": 16.0, "lora_targets": ["q_proj", "v_proj"],
                          "optimizer": "adamw", "micro_batch_size": 1, "seq_len": 2048, "grad_accum": 16,
                          "gradient_checkpointing": "none", "framework": "litgpt", "lora_dropout": 0.05,
                          "eval_batch_size": 1},
}

#: ms-swift (v4.5.2 defaults) and torchtitan fixtures (tests/config_import/test_swift_titan_import.py has the rest)
SWIFT_LORA = {**BASE, "model": "Qwen/Qwen2.5-7B-Instruct", "method": "lora", "precision": "bf16-true", "quantize": "none",
              "lora_rank": 8, "lora_alpha": 32.0, "lora_targets": ["all-linear"], "optimizer": "adamw",
              "micro_batch_size": 1, "seq_len": 2048, "grad_accum": 16, "gradient_checkpointing": "full",
              # freeze_vit's default left off a text model the catalog knows (hf_common.freeze_tower)
              "framework": "hf", "lora_dropout": 0.05, "freeze_vision": "auto",
              # one row per forward (batch 1): ms-swift's use_logits_to_keep mask of the label positions
              "logits_to_keep": "labels"}
SWIFT_Z2 = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 200000000, "allgather_bucket_size": 200000000,
                                  "overlap_comm": False, "contiguous_gradients": True}}
TITAN_8B = {**BASE, "model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed", "quantize": "none",
            "lora_rank": 16, "lora_alpha": 32.0, "lora_targets": ["all-linear"], "optimizer": "adamw",
            "micro_batch_size": 1, "seq_len": 8192, "grad_accum": 1, "gradient_checkpointing": "selective-op",
            "attention": "flash", "num_gpus": 8, "parallelism": "fsdp", "framework": "torchtitan", "lora_dropout": None,
            "framework_version": "torchtitan-2024"}  # the 9dec370 layout: its release's loss, AdamW and attention
EXPECTED.update({
    "swift_lora_sft.sh": SWIFT_LORA,
    # optim adamw_torch: foreach; the saved args write freeze_vit true, read as written
    "swift_args.json": {**SWIFT_LORA, "optimizer_impl": "foreach", "freeze_vision": "yes"},
    "swift_qlora_bnb.sh": {**SWIFT_LORA, "method": "qlora", "quantize": "nf4-dq", "kbit_prepare": "no"},
    "swift_zero2.sh": {**SWIFT_LORA, "num_gpus": 2, "grad_accum": 8, "parallelism": "zero2", "deepspeed_config": SWIFT_Z2},
    "swift_sft.yaml": {**SWIFT_LORA, "grad_accum": 8, "parallelism": "zero2", "deepspeed_config": SWIFT_Z2},
    "swift_dpo_lora.sh": {**SWIFT_LORA, "stage": "dpo", "framework_version": "trl-0.29", "rpo_alpha": 0.1, "logits_to_keep": "all",
                          "eval_batch_size": 1},
    "swift_grpo_lora.sh": {**SWIFT_LORA, "model": "Qwen/Qwen2.5-7B", "stage": "grpo", "framework_version": "trl-0.29",
                           "micro_batch_size": 4, "grad_accum": 1, "seq_len": 2048 + 1024, "completion_len": 1024,
                           "num_generations": 4, "logits_to_keep": "all"},
    "torchtitan_llama3_8b.toml": TITAN_8B,
    # the 70B preset (tensor_parallel_degree 8) on the launcher's default 8 GPUs: no FSDP, so no mixed precision
    "torchtitan_llama3_70b.toml": {**TITAN_8B, "model": "meta-llama/Llama-3.1-70B", "precision": "fp32",
                                   "attention": "sdpa", "micro_batch_size": 8, "gradient_checkpointing": "full",
                                   "parallelism": "ddp", "tensor_parallel": 8,
                                   "framework_version": "torchtitan-0.2.2"},
})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_imports_to_the_scenario(name):
    assert from_config(FIX / name).scenario.to_dict() == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_key_of_the_file_is_reported(name):
    from vramfit.config_import.loader import load_mapping
    from vramfit.config_import.report import flatten

    imp = from_config(FIX / name)
    reported = {e.key for e in imp.entries}
    assert set(flatten(load_mapping(FIX / name))) <= reported


def test_dialect_is_detected_and_framework_follows():
    got = {n: (from_config(FIX / n).dialect, from_config(FIX / n).scenario.framework.value) for n in EXPECTED}
    assert got["axolotl_qlora.yml"] == ("axolotl", "hf")
    assert got["llamafactory_qlora.yaml"] == ("llamafactory", "hf")
    assert got["trl_full.json"] == ("trl", "hf")
    assert got["torchtune_qlora.yaml"] == ("torchtune", "torchtune")
    assert got["litgpt_lora.yaml"] == ("litgpt", "litgpt")


def test_defaults_are_reported_with_their_pinned_source():
    imp = from_config(FIX / "llamafactory_qlora.yaml")
    d = {e.key: e for e in imp.entries if e.kind == "default"}
    assert d["cutoff_len"].value == 2048 and "LLaMA-Factory@ff6d4d1 src/llamafactory/hparams/data_args.py" in d["cutoff_len"].note
    assert d["lora_rank"].value == 8 and "finetuning_args.py" in d["lora_rank"].note
    assert any("default  cutoff_len: 2048 → seq_len=2048" in line for line in imp.lines())


def test_not_modelled_keys_are_reported_not_dropped():
    imp = from_config(FIX / "axolotl_lora_zero2.yml")
    nm = {e.key: e.note for e in imp.not_modelled()}
    assert "rl" not in nm and imp.scenario.stage.value == "dpo"  # rl: dpo is the scenario's stage
    assert "unsloth_lora_mlp" in nm and "Unsloth" in nm["unsloth_lora_mlp"]
    assert "deepspeed → zero_optimization.reduce_bucket_size" not in nm  # read: it sizes the ZeRO buckets
    assert "  read     deepspeed → zero_optimization.reduce_bucket_size: auto → deepspeed_config (reduce_bucket_size)" \
        in imp.lines()
    assert any("rl: dpo → stage=dpo" in line for line in imp.lines())


def test_companion_peft_and_bnb_files():
    imp = from_config(FIX / "trl_full.json", FIX / "adapter_config.json", FIX / "bnb_config.json")
    sc = imp.scenario.to_dict()
    assert (sc["method"], sc["quantize"], sc["lora_rank"], sc["lora_alpha"]) == ("qlora", "nf4-dq", 64, 128.0)
    assert sc["lora_targets"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert [p.name for p in imp.companions] == ["adapter_config.json", "bnb_config.json"]


def test_companion_accelerate_sets_gpus_and_layout():
    sc = from_config(FIX / "trl_sft_qlora.yaml", FIX / "accelerate_fsdp.yaml").scenario
    assert (sc.num_gpus, sc.parallelism.value, sc.offload.value) == (4, "fsdp", "none")


def _err(path, *more, dialect=None) -> str:
    with pytest.raises(ScenarioError) as ei:
        from_config(path, *more, dialect=dialect)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_bad_files_get_one_line(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("base_model: [unclosed\n")
    assert "is not valid YAML (line 2)" in _err(p)
    p.write_text("a: &x [1, 2]\nb: *x\n")
    assert "anchors and aliases" in _err(p)
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\n"
    p.write_text(bomb)
    assert "anchors and aliases" in _err(p)
    p.write_text("base_model: !!python/object/apply:os.system ['true']\n")
    assert "YAML tags" in _err(p)
    p.write_text("base_model: a\nbase_model: b\n")
    assert "given twice" in _err(p)
    p.write_text("- just\n- a list\n")
    assert "must hold a mapping" in _err(p)
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    assert "104,857,600 bytes" in _err(big)
    assert "file not found" in _err(tmp_path / "nope.yaml")


def test_wrong_dialect_unknown_and_contradictory_keys(tmp_path):
    assert "does not look like a torchtune config" in _err(FIX / "axolotl_qlora.yml", dialect="torchtune")
    assert "--dialect 'megatron' is unknown" in _err(FIX / "axolotl_qlora.yml", dialect="megatron")
    p = tmp_path / "a.yml"
    p.write_text("base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: 1\nmicro_bach_size: 8\n")
    assert "unknown axolotl key 'micro_bach_size'" in _err(p)
    p.write_text("base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: 1\nbf16: true\nfp16: true\n")
    imp = from_config(p)  # Axolotl's resolve_dtype turns fp16 off when bf16 is on (utils/config/__init__.py l. 188-189)
    assert imp.scenario.precision.value == "bf16-true"
    assert "turns fp16 off" in {e.key: e.note for e in imp.entries}["fp16"]
    p.write_text("base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: 1\ndeepspeed: zero9.json\n")
    assert "deepspeed: file 'zero9.json' not found" in _err(p)
    assert "is a DeepSpeed config, not a training config" in _err(FIX / "ds_z3_offload.json")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_estimates(name):
    from vramfit import estimate

    r = estimate(from_config(FIX / name).scenario)
    assert r.peak.device_bytes > r.peak.reserved_bytes >= r.peak.allocated_bytes > 0


def test_pasted_text_imports_the_same_and_never_opens_files():
    from vramfit.config_import import from_text

    text = (FIX / "axolotl_qlora.yml").read_text()
    assert from_text(text).scenario.to_dict() == EXPECTED["axolotl_qlora.yml"]
    assert from_text((FIX / "trl_full.json").read_text(), dialect="trl").scenario.micro_batch_size == 8  # JSON is YAML
    with pytest.raises(ScenarioError, match="<pasted config>: deepspeed names a file"):
        from_text((FIX / "llamafactory_lora_ds3.yaml").read_text())
    with pytest.raises(ScenarioError, match="anchors and aliases"):
        from_text("a: &a [x, x]\nb: [*a, *a]\n")
    with pytest.raises(ScenarioError, match="over 1,048,576 bytes"):
        from_text("a: " + "x" * 1_100_000)


def test_axolotl_moe_expert_quantization(tmp_path):
    p = tmp_path / "moe.yml"
    p.write_text((FIX / "axolotl_qlora.yml").read_text() + "quantize_moe_experts: true\n")
    assert from_config(p).scenario.quantize_experts.value == "yes"
    p.write_text((FIX / "axolotl_full_fsdp.yml").read_text() + "quantize_moe_experts: false\n")
    assert from_config(p).scenario.quantize_experts.value == "auto"


def test_accelerate_deepspeed_without_a_json_keeps_deepspeeds_default_buckets(tmp_path):
    # PEFT's examples/sft/configs/deepspeed_config.yaml shape: accelerate builds the DeepSpeed config from
    # these keys alone (DeepSpeedPlugin.__post_init__), so reduce_bucket_size etc. are DeepSpeed's defaults
    acc = tmp_path / "accelerate_ds.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_machines: 1\n"
                   "num_processes: 8\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
                   "  offload_param_device: cpu\n  zero3_init_flag: true\n")
    sc = from_config(FIX / "trl_sft_qlora.yaml", acc).scenario
    assert (sc.num_gpus, sc.parallelism.value, sc.offload.value) == (8, "zero3", "optimizer+params")
    assert sc.deepspeed_config.to_dict() == {"zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}
    assert sc.deepspeed_config.reduce_bucket_size is None  # DeepSpeed's 5e8 applies, not HF's "auto"


def test_litgpt_without_a_precision_trains_bf16_mixed_as_litgpt_does(tmp_path):
    # litgpt@2685705 finetune/full.py l. 97 and lora.py l. 131: `precision or get_default_supported_precision(training=True)`,
    # "bf16-mixed" on bf16 cards (utils.py l. 363-380); the same run given as flags (framework litgpt) gets the same
    p = tmp_path / "full.yaml"
    p.write_text("checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\ndevices: 1\n"
                 "train:\n  micro_batch_size: 2\n  global_batch_size: 16\n  max_seq_length: 1024\n")
    imp = from_config(p)
    assert imp.scenario.precision.value == "bf16-mixed"
    assert any("default  precision: bf16-mixed" in line for line in imp.lines())
    # a quantized LoRA file without a precision is refused by litgpt itself (lora.py l. 142-143)
    p.write_text("checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf\nquantize: bnb.nf4\nlora_r: 8\n")
    msg = _err(p)
    assert "litgpt's default bf16-mixed" in msg and "set precision: bf16-true" in msg
    p.write_text("checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf\nquantize: bnb.nf4\nlora_r: 8\nprecision: bf16-true\n")
    assert from_config(p).scenario.method.value == "qlora"


def test_a_peft_adapter_config_first_is_named_as_a_companion():
    # its lora_alpha / target_modules are also ms-swift keys; it was read as an ms-swift args.json missing `model`
    msg = _err(FIX / "adapter_config.json")
    assert "is a PEFT adapter config, not a training config; pass the training config first" in msg
    # the training config given twice: its second copy was read as a BitsAndBytesConfig that contradicted the first
    twice = _err(FIX / "axolotl_qlora.yml", FIX / "axolotl_qlora.yml")
    assert "is the training config given again; give it once" in twice
