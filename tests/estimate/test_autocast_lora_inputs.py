"""bf16-mixed LoRA under PEFT: what each LoRA branch keeps, checked against the simulator's trace.

The simulator (Qwen2.5-0.5B, LoRA on every linear, bf16-mixed, 2048 tokens) keeps per decoder layer a bf16
copy of the input of every lora_A (seven (2048, 896|4864) `_to_copy` tensors, the 16-bit inputs of o_proj and
down_proj included) and a (2048, 16) bf16 lora_A output per branch; the estimator had missed one input copy
and counted the lora_A outputs in fp32: 77 MB under over 24 layers (-2.1 % at the peak).
"""

from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

SC = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "gradient_checkpointing": "none", "precision": "bf16-mixed",
      "seq_len": 2048}
T = 2048
SIM_LAYER_SAVED = 125_363_200  # layer 0's saved tensors in the trace (its frozen-input norm keeps no rstd)


def _saved(sc: dict) -> dict[str, int]:
    return dict(compute(resolve_model(sc["model"]).spec, parse_scenario(sc)).saved.items)


def test_every_lora_a_keeps_its_own_bf16_input_copy_under_autocast():
    items = _saved(SC)
    copies = {k: v for k, v in items.items() if k.endswith(".autocast_in")}
    assert copies == {
        **{f"{n}_proj.lora0.autocast_in": 2 * T * 896 for n in ("q", "k", "v", "o", "gate", "up")},
        "down_proj.lora0.autocast_in": 2 * T * 4864,
    }
    assert "mlp_mid" not in items  # act * up itself is not kept: down_proj is frozen, lora_A keeps its copy


def test_lora_a_output_is_bf16_under_autocast():
    outs = {k: v for k, v in _saved(SC).items() if k.endswith(".a_out")}
    assert len(outs) == 7 and set(outs.values()) == {2 * T * 16}


def test_layer_total_matches_the_trace():
    step = compute(resolve_model(SC["model"]).spec, parse_scenario(SC))
    assert step.per_layer == 125_370_368
    assert step.per_layer - SIM_LAYER_SAVED == 8192 - 1024  # layer 0's norm1 rstd, less the trace's rounding


def test_no_input_copies_without_autocast():
    items = _saved({**SC, "precision": "bf16-true"})
    assert not [k for k in items if k.endswith(".autocast_in")]
    # no autocast: PEFT's fp32 adapters run on the input cast to fp32, lora_A's output is fp32
    assert {v for k, v in items.items() if k.endswith(".a_out")} == {4 * T * 16}
