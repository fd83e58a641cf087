"""The load-time de-quantization of an MXFP4 checkpoint's experts (estimate/mxfp4_load.py)."""

from vramfit.estimate import estimate
from vramfit.estimate.framework import PROFILES, profile_for
from vramfit.estimate.mxfp4_load import dequant_transient
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.models.catalog import load_catalog
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.scenario import Framework, Parallelism, parse_scenario

GPT_OSS = resolve_model("openai/gpt-oss-20b").spec
# gpt-oss-20b gate_up_proj bank: 32 experts x 2880 x 5760 values, two a byte; scales one byte per 32 values
BLOCKS = 32 * 2880 * 5760 // 2
SCALES = BLOCKS // 16


def _lora(**keys):
    """AXOLOTL_EX_2508-1 (benchmarks/data/measured/found.jsonl): gpt-oss-20b LoRA on one GPU."""
    return parse_scenario({"model": "openai/gpt-oss-20b", "method": "lora", "precision": "bf16-true", "lora_rank": 8,
                           "lora_targets": "all-linear", "micro_batch_size": 1, "seq_len": 4096,
                           "gradient_checkpointing": "offload", "attention": "flash", "loss": "fused",
                           "optimizer": "adamw-8bit", "framework": "hf", **keys})


def test_the_config_quantization_marks_the_experts_mxfp4():
    assert GPT_OSS.experts_mxfp4
    config = dict(next(e for e in load_catalog() if e["id"] == "openai/gpt-oss-20b")["config"])
    del config["quantization_config"]
    assert not spec_from_hf_config(config).experts_mxfp4
    assert not resolve_model("mistralai/Mixtral-8x7B-v0.1").spec.experts_mxfp4


def test_the_transient_follows_the_index_type_of_each_release():
    step = compute(GPT_OSS, _lora())
    # v5.24.0: blocks, uint8 + int32 scales, one int32 index tensor and its bf16 lut values at a time
    assert dequant_transient(step) == BLOCKS * (1 + 4 + 2) + SCALES * 5 == 1_940_889_600
    old = compute(GPT_OSS, _lora(framework_version="transformers-4.55"))
    assert old.profile == profile_for(Framework.HF, "transformers-4.55")
    # v4.55.0: both int64 index tensors alive together
    assert dequant_transient(old) == BLOCKS * (1 + 16 + 2) + SCALES * 5 == 5_125_939_200


def test_the_load_is_the_peak_of_the_one_gpu_lora_run():
    res = estimate(_lora(framework_version="transformers-4.55"))
    load = next(p for p in res.phases if p.phase == "load")
    assert dict(load.breakdown) == {"weights": compute(GPT_OSS, _lora()).parts.weights, "temporaries": 5_125_939_200}
    assert res.peak.phase == "load" and res.peak.allocated_bytes == load.allocated_bytes


def test_no_load_phase_where_the_host_converts_or_the_framework_loads_no_mxfp4():
    # v5.24.0 converts host-loaded banks on the host (FSDP loads through the host)
    fsdp = estimate(_lora(num_gpus=8, parallelism="fsdp"))
    assert "load" not in [p.phase for p in fsdp.phases]
    assert PROFILES[Framework.TORCHTUNE].mxfp4_index_bytes == 0


# v4.55.0 converting a host-loaded bank on the GPU: blocks, int32 scales (the uint8 GPU copy dropped), both int64
# index tensors, one bf16 lut gather and the bank's bf16 out
HOST_BANK = BLOCKS * (1 + 16 + 2 + 4) + SCALES * 4


def test_a_host_loaded_bank_is_still_converted_on_the_gpu_by_transformers_4_55():
    fsdp = estimate(_lora(num_gpus=8, parallelism="fsdp", framework_version="transformers-4.55"))
    load = next(p for p in fsdp.phases if p.phase == "load")
    assert dict(load.breakdown) == {"temporaries": HOST_BANK} and HOST_BANK == 6_171_033_600
    assert fsdp.peak.phase != "load"


def test_axolotl_loads_to_the_host_except_under_multi_gpu_ddp():
    axolotl = profile_for(Framework.HF, "transformers-4.55+axolotl-0.12")
    assert Parallelism.NONE in axolotl.weights_load_host and Parallelism.ZERO2 in axolotl.weights_load_host
    assert Parallelism.DDP not in axolotl.weights_load_host
    assert Parallelism.NONE not in PROFILES[Framework.HF].weights_load_host
    one = estimate(_lora(framework_version="transformers-4.55+axolotl-0.12"))  # AXOLOTL_EX_2508-1
    load = next(p for p in one.phases if p.phase == "load")
    assert dict(load.breakdown) == {"temporaries": HOST_BANK}
    assert one.peak.phase == "backward-block"  # the step, no longer the load (was: weights + 5_125_939_200)
    ddp = estimate(_lora(num_gpus=2, parallelism="ddp", framework_version="transformers-4.55+axolotl-0.12"))
    load = next(p for p in ddp.phases if p.phase == "load")
    assert dict(load.breakdown) == {"weights": compute(GPT_OSS, _lora()).parts.weights, "temporaries": 5_125_939_200}


def test_the_indices_of_a_bank_larger_than_one_chunk_cover_one_chunk():
    big = resolve_model("openai/gpt-oss-120b").spec
    blocks = 128 * 2880 * 5760 // 2  # gate_up_proj bank: 128 experts, 66_355_200 rows of 16 bytes
    chunk = 32768 * 1024 * 16  # rows_per_chunk rows: the loop's indices and lut values cover one chunk
    assert blocks > chunk
    step = compute(big, parse_scenario({"model": "openai/gpt-oss-120b", "method": "lora", "framework": "hf"}))
    assert dequant_transient(step) == blocks + (blocks // 16) * 5 + chunk * (4 + 2) == 4_614_684_672


def test_the_conversion_and_zero2s_flatten_are_two_moments_the_higher_counts():
    weights = compute(GPT_OSS, _lora()).parts.weights
    lora = estimate(_lora(num_gpus=2, parallelism="zero2", framework_version="transformers-4.55"))
    load = next(p for p in lora.phases if p.phase == "load")
    assert dict(load.breakdown) == {"weights": weights, "temporaries": 5_125_939_200}  # weights once, not twice
    full = estimate(_lora(method="full", num_gpus=2, parallelism="zero2", framework_version="transformers-4.55"))
    load = dict(next(p for p in full.phases if p.phase == "load").breakdown)
    assert load["weights"] == load["temporaries"] == compute(GPT_OSS, _lora(method="full")).parts.weights  # the flatten
