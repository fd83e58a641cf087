"""Megatron-LM per-rank activation memory: Korthikanti et al. 2022 (arXiv:2205.05198), Table 2 and sec. 4-5."""

import pytest

from vramfit.estimate.model_parallel import (
    Layout,
    Recompute,
    first_stage_activation_bytes,
    layer_activation_bytes,
    stage_params,
)

# GPT-3 175B as in the paper's Table 3: 96 heads, hidden 12288, 96 layers, seq 2048, t = 8, p = 8
S, H, A, L = 2048, 12288, 96, 96


def test_one_layer_without_parallelism_is_34_plus_5as_over_h():
    # 5as/h = 5 x 96 x 2048 / 12288 = 80 -> sbh x 114 bytes
    assert layer_activation_bytes(S, 1, H, A, Layout()) == S * H * (34 + 80)


def test_table_2_rows_for_tensor_parallel_8():
    tp = layer_activation_bytes(S, 1, H, A, Layout(t=8))
    assert tp == pytest.approx(S * H * (10 + 24 / 8 + 80 / 8))  # 23 sbh
    sp = layer_activation_bytes(S, 1, H, A, Layout(t=8, sequence_parallel=True))
    assert sp == pytest.approx(S * H * (34 + 80) / 8)  # 14.25 sbh
    sel = layer_activation_bytes(S, 1, H, A, Layout(t=8, sequence_parallel=True), Recompute.SELECTIVE)
    assert sel == pytest.approx(S * H * 34 / 8)  # 4.25 sbh
    full = layer_activation_bytes(S, 1, H, A, Layout(t=8, sequence_parallel=True), Recompute.FULL)
    assert full == pytest.approx(2 * S * H / 8)
    # the abstract's "reduces activation memory by 5x": tensor-parallel baseline / (sequence parallel + selective)
    assert tp / sel == pytest.approx(23 / 4.25)  # 5.4x for 175B
    # 530B (128 heads, hidden 20480): 5as/h = 64 -> (10 + 3 + 8) / 4.25 = 4.9x
    assert layer_activation_bytes(S, 1, 20480, 128, Layout(t=8)) / layer_activation_bytes(
        S, 1, 20480, 128, Layout(t=8, sequence_parallel=True), Recompute.SELECTIVE) == pytest.approx(21 / 4.25)


def test_first_pipeline_stage_holds_all_layers_worth_and_more_when_interleaved():
    lay = Layout(t=8, p=8, sequence_parallel=True)
    per = S * H * (34 + 80) / 8
    assert first_stage_activation_bytes(S, 1, H, A, L, lay) == pytest.approx(per * L)  # eq. 5: independent of p
    inter = Layout(t=8, p=8, sequence_parallel=True, interleave=2)
    assert first_stage_activation_bytes(S, 1, H, A, L, inter) == pytest.approx(per * L * (1 + 7 / 16))
    # 175B, b = 1: 96 x 14.25 x 2048 x 12288 bytes = 32.06 GiB on the first stage without recomputation
    assert first_stage_activation_bytes(S, 1, H, A, L, lay) / 2**30 == pytest.approx(32.06, abs=0.01)


def test_context_parallel_divides_the_sequence_and_the_first_stage_holds_the_embedding():
    cp = layer_activation_bytes(8192, 1, 8192, 64, Layout(t=8, c=4, sequence_parallel=True))
    assert cp == layer_activation_bytes(2048, 1, 8192, 64, Layout(t=8, sequence_parallel=True))
    first, middle = stage_params(80, 855_654_400, 128_256 * 8192, Layout(t=8, p=4))  # Llama-3.1-70B block, vocab
    assert middle == 20 * 855_654_400 // 8 and first - middle == 128_256 * 8192 // 8
