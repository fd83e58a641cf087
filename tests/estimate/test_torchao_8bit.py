"""``adamw-8bit-torchao`` (torchao AdamW8bit) beside ``adamw-8bit`` (bitsandbytes AdamW8bit): state format,
step temporaries, the step inside backward, and the importers' mapping (sources in estimate/state.py, core.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

from vramfit import from_config
from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.params import ParamTensor
from vramfit.estimate.state import optimizer_state_bytes
from vramfit.scenario import Optimizer, parse_scenario

FIX = Path(__file__).parent.parent / "config_import" / "fixtures"
MODEL = "meta-llama/Llama-3.2-1B"  # tied embedding 128,256 x 2048; largest block linear 2048 x 8192
EMB = 128_256 * 2048


def test_state_bytes_of_each_library():
    big, norm = ParamTensor("w", (4096, 4096), 1, "linear"), ParamTensor("n", (3072,), 1, "norm")
    n = 4096 * 4096
    # torchao: uint8 codes + fp32 scale per 256 + a 256-entry fp32 qmap, per state
    ao = optimizer_state_bytes(big, Optimizer.ADAMW_8BIT_TORCHAO, 2)
    assert ao.device_bytes == 2 * (n + 4 * n // 256 + 1024) == 34_080_768
    # bitsandbytes: uint8 state + fp32 absmax per 256, per state (no qmap per tensor)
    assert optimizer_state_bytes(big, Optimizer.ADAMW_8BIT, 2).device_bytes == 2 * n + 8 * n // 256 == 34_078_720
    # under 4096 elements: torchao zeros_like(p) (bf16 here), bitsandbytes fp32 (allocator-rounded to 512 B)
    assert optimizer_state_bytes(norm, Optimizer.ADAMW_8BIT_TORCHAO, 2).device_bytes == 2 * 6144
    assert optimizer_state_bytes(norm, Optimizer.ADAMW_8BIT, 2).device_bytes == 2 * 12288


def _phase(result, name):
    return next(p for p in result.to_dict()["phases"] if p["phase"] == name)["breakdown"]


def test_step_temporaries_torchao_only():
    """torchao's compiled step keeps both updated states of one parameter in fp32 (8 B an element): the largest
    is the tied embedding; bitsandbytes updates its uint8 states in place."""
    base = {"model": MODEL, "method": "full", "precision": "bf16-true"}
    ao, bnb = estimate({**base, "optimizer": "adamw-8bit-torchao"}), estimate({**base, "optimizer": "adamw-8bit"})
    assert _phase(ao, "optimizer-step")["temporaries"] == 8 * EMB == 2_101_346_304
    assert _phase(bnb, "optimizer-step").get("temporaries", 0) == 0


def test_step_temporaries_are_the_largest_tensor_it_steps():
    """torchao steps each trainable parameter in turn: under LoRA the largest adapter tensor (Llama-3.2-1B's
    up_proj lora_B, 8192 x 16, in fp32 states' fp32 copies), not a frozen weight; under FSDP2 a DTensor's local
    shard (the embedding's 128,256 rows over 8 GPUs)."""
    keys = {"model": MODEL, "precision": "bf16-true", "optimizer": "adamw-8bit-torchao"}
    lora = estimate({**keys, "method": "lora", "lora_rank": 16, "lora_targets": "all-linear"})
    assert _phase(lora, "optimizer-step")["temporaries"] == 8 * 8192 * 16 == 1_048_576
    fsdp2 = estimate({**keys, "method": "full", "framework": "torchtitan", "num_gpus": 8, "parallelism": "fsdp"})
    assert _phase(fsdp2, "optimizer-step")["temporaries"] == 8 * EMB // 8 == 262_668_288


def test_step_in_backward_is_the_embeddings_last():
    keys = {"model": MODEL, "method": "full", "precision": "bf16-true", "optimizer_in_backward": True,
            "framework": "torchtune"}
    ao = estimate({**keys, "optimizer": "adamw-8bit-torchao"})
    end = _phase(ao, "backward-end-step")
    assert end["temporaries"] == 8 * EMB and end["gradients"] == 2 * EMB == 525_336_576
    bnb = estimate({**keys, "optimizer": "adamw-8bit"})
    assert "backward-end-step" not in {p["phase"] for p in bnb.to_dict()["phases"]}
    # inside a block's backward: the largest linear's step, 8 B an element, on top of bitsandbytes' block phase
    block = _phase(ao, "backward-block")["temporaries"] - _phase(bnb, "backward-block")["temporaries"]
    assert block == 8 * 2048 * 8192


def test_importers_tell_the_libraries_apart(tmp_path):
    # torch.optim's own fused: True goes with the component (neither 8-bit AdamW takes it: the import refuses it)
    text = (FIX / "torchtune_full_fsdp.yaml").read_text().replace("  fused: True\n", "")
    for component, value in (("torchao.optim.AdamW8bit", "adamw-8bit-torchao"),
                             ("torchao.prototype.low_bit_optim.AdamW8bit", "adamw-8bit-torchao"),
                             ("bitsandbytes.optim.AdamW8bit", "adamw-8bit")):
        cfg = tmp_path / "tt.yaml"
        cfg.write_text(text.replace("_component_: torch.optim.AdamW", f"_component_: {component}"))
        assert from_config(cfg).scenario.optimizer.value == value, component
    from vramfit.config_import.hf_common import HF_OPTIMIZER_NAMES, HF_OPTIMIZERS

    assert HF_OPTIMIZERS["adamw_torch_8bit"] == HF_OPTIMIZERS["ao_adamw_8bit"] == "adamw-8bit-torchao"
    assert HF_OPTIMIZERS["adamw_bnb_8bit"] == "adamw-8bit"
    assert HF_OPTIMIZER_NAMES["adamw-8bit-torchao"] == "adamw_torch_8bit"


def test_bad_value_lists_both():
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"model": MODEL, "optimizer": "adamw-8bit-ao"})
    assert "optimizer" in str(err.value) and "adamw-8bit-torchao" in str(err.value)
    out = subprocess.run([sys.executable, "-m", "vramfit.cli.main", "estimate", "--model", MODEL, "--optimizer",
                          "adamw-8bit-ao"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "adamw-8bit-torchao" in out.stderr
