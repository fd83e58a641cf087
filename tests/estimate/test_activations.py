"""Activation accounting: the paper anchor and the behaviours the estimator must follow."""

import pytest

from vramfit import estimate
from vramfit.estimate.activations import block_saved
from vramfit.estimate.framework import profile_for
from vramfit.models.spec import Linear, ModelSpec, NormType, PositionEncoding
from vramfit.scenario import Framework, parse_scenario

MODEL = "meta-llama/Llama-2-7b-hf"


def gpt_block(h: int, a: int) -> ModelSpec:
    """A GPT-style block as in Korthikanti et al. 2022 (Megatron): LayerNorms, fused QKV with
    bias, 4h GELU MLP, attention and residual dropout, softmax in the 16-bit dtype."""
    return ModelSpec(
        model_type="gpt2", hidden_size=h, num_hidden_layers=1, num_attention_heads=a,
        num_key_value_heads=a, head_dim=h // a, intermediate_size=4 * h, vocab_size=50257,
        tie_word_embeddings=True, hidden_act="gelu", gated_mlp=False,
        block_linears=(
            Linear("c_attn", h, 3 * h, True, "attn"), Linear("c_proj", h, h, True, "attn"),
            Linear("c_fc", h, 4 * h, True, "mlp"), Linear("c_proj", 4 * h, h, True, "mlp"),
        ),
        block_norm_params=4 * h, final_norm_params=2 * h, embedding_params=50257 * h,
        lm_head_params=0, norm_type=NormType.LAYERNORM, position_encoding=PositionEncoding.LEARNED,
        eager_softmax_fp32=False, fused_qkv="c_attn", attention_dropout=0.1, hidden_dropout=0.1,
    )


@pytest.mark.parametrize(
    ("s", "b", "h", "a"),
    [(2048, 1, 12288, 96), (2048, 4, 4096, 32), (1024, 8, 1024, 16)],
    ids=["gpt3-175b", "7b-shape", "small"],
)
def test_korthikanti_per_layer_activations(s, b, h, a):
    """Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    sec. 4.1 eq. (1): a GPT block without sequence/tensor parallelism or recompute saves
    s*b*h*(34 + 5*a*s/h) bytes in 16-bit training. Our per-tensor accounting must give exactly
    that; the only extra are the LayerNorms' per-token fp32 mean and rstd, which the paper omits."""
    spec = gpt_block(h, a)
    sc = parse_scenario({"params": 1e9, "method": "full", "precision": "fp16-true", "attention": "eager",
                         "micro_batch_size": b, "seq_len": s})
    saved = block_saved(spec, sc, profile_for(Framework.HF), [], quantized=False)
    stats = sum(v for k, v in saved.items.items() if k.endswith(".stats"))
    assert stats == 2 * 2 * 4 * s * b  # two LayerNorms x (mean, rstd) x fp32 per token
    assert saved.total - stats == s * b * h * 34 + 5 * a * s * s * b


def in_phase(r, name: str, phase: str = "forward") -> int:
    """A component's size in one phase of the step (the per-phase view; components are at the peak)."""
    return dict(next(p for p in r.phases if p.phase == phase).breakdown).get(name, 0)


def _act(**keys):
    return in_phase(estimate({"model": MODEL, **keys}), "activations")


def test_sdpa_activations_grow_linearly_and_eager_quadratically():
    lin = [_act(method="full", seq_len=s, attention="sdpa") for s in (1024, 2048, 4096)]
    assert lin[1] / lin[0] == pytest.approx(2, rel=0.01) and lin[2] / lin[1] == pytest.approx(2, rel=0.01)
    eager = [_act(method="full", seq_len=s, attention="eager") for s in (1024, 2048, 4096)]
    assert eager[2] / eager[1] > 2.5  # the seq_len^2 scores dominate


def test_checkpointing_keeps_block_inputs_only():
    none = _act(method="lora", gradient_checkpointing="none", seq_len=2048, micro_batch_size=2)
    full = _act(method="lora", gradient_checkpointing="full", seq_len=2048, micro_batch_size=2)
    # 32 block inputs of 2 x 2048 x 4096 bf16 plus the final norm's saved fp32 input and rstd (its weight is
    # frozen under LoRA: no normalised tensor)
    assert full == 32 * 2 * 2048 * 4096 * 2 + 2 * 2048 * 4096 * 4 + 2 * 2048 * 4
    assert none > 10 * full


def test_offload_moves_checkpoints_to_host():
    r = estimate({"model": MODEL, "method": "lora", "gradient_checkpointing": "offload", "seq_len": 2048})
    assert r.host_bytes == 32 * 2048 * 4096 * 2


def test_lora_input_casts_and_dropout_follow_the_framework():
    hf = _act(method="lora", lora_targets="q_proj,v_proj")
    tt = _act(method="lora", lora_targets="q_proj,v_proj", framework="torchtune")
    # PEFT casts each adapted layer's bf16 input to fp32 (2 layers x T x h x 4 B) -> more than torchtune
    assert hf - tt >= 32 * 2 * 2048 * 4096 * 4 - 32 * 2 * 2048 * 4096 * 2
    dropped = _act(method="lora", lora_targets="q_proj,v_proj", framework="torchtune", lora_dropout=0.1)
    assert dropped > tt  # dropout mask and output per adapted layer


def test_full_finetune_saves_linear_inputs():
    full = _act(method="full")
    lora = _act(method="lora", lora_targets="q_proj")
    assert full > lora


def test_loss_modes():
    def loss(mode):
        r = estimate({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "loss": mode, "seq_len": 4096})
        return in_phase(r, "logits_loss")
    standard, chunked, fused = loss("standard"), loss("chunked"), loss("fused")
    T, V = 4096, 128256
    assert standard == 2 * T * V + 4 * T * V + 4 * T * V  # bf16 logits, fp32 upcast, log_softmax
    assert fused < chunked < standard
