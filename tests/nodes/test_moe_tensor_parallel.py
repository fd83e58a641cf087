"""MoE under torchtitan v0.3.0 tensor parallel (expert parallel off), checked on the catalog's Qwen3-30B-A3B
(config.json: hidden 2048, 32 heads of 128, 4 key/value heads, 128 experts of width 768, top-8, 48 layers,
vocabulary 151936, untied): ``models/common/moe_sharding.py`` splits the routed experts over their inner
width (``w1_EFD``/``w3_EFD`` ``Shard(1)``, ``w2_EDF`` ``Shard(2)``: ``models/qwen3/sharding.py``), replicates
the router gate and the experts' input (``Replicate``), and ``qk_norm`` runs on ``Shard(2)`` (heads)."""

import pytest

from vramfit import estimate
from vramfit.estimate.ranks import tp_split

QWEN = {"model": "Qwen/Qwen3-30B-A3B", "method": "full", "framework": "torchtitan", "parallelism": "fsdp",
        "num_gpus": 8, "seq_len": 4096, "gradient_checkpointing": "none"}
H, E, W, L, VOCAB = 2048, 128, 768, 48, 151936


@pytest.mark.parametrize("t", [2, 4])
def test_each_rank_holds_1_over_t_of_the_experts_and_the_whole_router(t):
    r = estimate({**QWEN, "tensor_parallel": t})
    attn = H * 4096 + 2 * H * 512 + 4096 * H  # q, k, v, o
    experts = E * 3 * H * W  # gate/up/down of 128 experts
    router, norms = H * E, 2 * H + 2 * 128  # input/post-attention norms and q/k norms: whole on every rank
    per_layer = (attn + experts) // t + router + norms
    want = L * per_layer + 2 * VOCAB * H // t + H  # vocab-parallel embedding and output, final norm
    assert r.ranks[0].params == want


def test_routed_tokens_are_kept_whole_and_the_inner_width_split():
    # whole on every TP rank: the experts' all-gathered input and weighted output, the router's scores
    assert not any(tp_split(k) for k in ("experts.gathered_in", "experts.weighted_out", "router.softmax_fp32",
                                         "mlp_in", "attn_in"))
    # split: heads (q/k norms on Shard(2)), the experts' and the shared expert's inner width
    assert all(tp_split(k) for k in ("q_norm.fp32_in", "k_norm.normed", "mlp.gate_out", "mlp_mid",
                                     "shared.gate_out", "shared.mid"))


def test_per_rank_activations_follow_the_moe_layout():
    one, four = (estimate({**QWEN, "tensor_parallel": t}) for t in (2, 4))
    T, k = 4096, 8
    whole = 2 * (2 * T * H) + 4 * T * E + 2 * (2 * T * k * H)  # attn_in, mlp_in, router fp32, experts in/out
    # split, per layer (bytes): norms (fp32 input, rstd, 16-bit normed) x 2, attention output, q/k norms
    # (fp32 input + normed), q, and k, v grouped (SDPA's enable_gqa: 4 heads of 128), lse, the experts' inner width
    # (mid, gate, act, up)
    split = 2 * (4 * T * H + 4 * T + 2 * T * H) + 2 * T * 4096 + (6 * T * 4096 + 6 * T * 512) \
        + 2 * T * 4096 + 2 * 2 * T * 512 + 4 * 32 * T + 4 * 2 * T * k * W
    per_layer = {t: whole + split / t for t in (2, 4)}
    got = {t: r.ranks[0].activations_bytes for t, r in ((2, one), (4, four))}
    # the difference between t = 2 and t = 4 is the layers' split part only (the output layer's input is whole)
    assert got[2] - got[4] == pytest.approx(L * (per_layer[2] - per_layer[4]), rel=0.01)
