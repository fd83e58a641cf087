"""One block's MLP backward and its checkpointed re-run, tensor by tensor (block_extras.block_backward_transient),
as the simulator traces them (tests/sim/test_sim_sweep_cases.py gemma2-qlora-grpo-mlp-backward)."""

from __future__ import annotations

from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

LLAMA = resolve_model("meta-llama/Llama-3.2-1B").spec  # h = 2048, W = 8192
T, H, W, R = 1024, 2048, 8192, 16  # tokens, hidden, MLP width, LoRA rank


def _step(**keys):
    base = {"model": "meta-llama/Llama-3.2-1B", "seq_len": T, "lora_dropout": 0}
    return compute(LLAMA, parse_scenario({**base, **keys}))


def test_hf_qlora_mlp_gradients_are_fp32_and_the_down_projections_copy_of_h_is_gone():
    # bitsandbytes' Linear4bit returns its fp32 input's dtype: grad_h, grad_act, grad_up fp32; the down projection's
    # lora_A kept autocast's bf16 copy of h and lora_B its bf16 output, both freed by the time act * up's node runs
    step = _step(method="qlora")
    assert step.saved.mlp_elem == 4
    assert step.saved.down_keys == ("down_proj.lora0.autocast_in", "down_proj.lora0.a_out")
    assert step.block_transient == 3 * 4 * T * W - (2 * T * W + 2 * T * R)


def test_a_checkpointed_lora_blocks_rerun_peaks_at_up_projs_lora_branch():
    # bf16-true with PEFT's fp32 adapters: the re-run holds the base output (bf16), lora_B's output and the scaled
    # product (fp32), the MLP's input and the residual (bf16, not saved: the norms keep fp32 copies); up_proj's output
    # and the down projection's fp32 input cast and lora_A output are not made yet
    step = _step(method="lora", precision="bf16-true", gradient_checkpointing="full")
    assert step.saved.down_keys == ("down_proj.lora0.cast_in", "down_proj.lora0.a_out")
    rerun = 2 * 2 * T * H + (2 + 2 * 4) * T * W - 2 * T * W - (4 * T * W + 4 * T * R)
    assert step.block_transient == rerun
    # without checkpointing there is no re-run: the MLP backward's 16-bit gradients net of the same freed copies
    # (3 x 2 T W - (4 T W + 4 T R), 16.7 MB) fall below the flash attention backward's grads and fp32 dq
    flash = 2 * T * 64 * (2 * 32 + 2 * 8) + 4 * T * 32 * 64
    assert 3 * 2 * T * W - (4 * T * W + 4 * T * R) < flash == _step(method="lora", precision="bf16-true").block_transient
