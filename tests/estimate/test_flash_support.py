"""``attention: flash`` on models without an SDPA path: gpt-oss has a flash path (its sinks go to the kernel as
FA3's ``s_aux``), BLOOM has none (transformers v5.24.0 ``_supports_flash_attn``). Exact bytes (T tokens, bf16)."""

from __future__ import annotations

from tests.estimate.test_new_blocks import GPT_OSS, HF, C, T, saved

from vramfit.estimate.attention import runs_eager_attention
from vramfit.models import spec_from_hf_config
from vramfit.models.catalog import resolve_model
from vramfit.scenario import parse_scenario

H, KV, D = 4, 2, 64  # GPT_OSS: 4 query heads, 2 k/v heads of 64


def _sc(attention: str):
    return parse_scenario({"model": "generic:1B", "method": "full", "seq_len": T, "precision": "bf16-true",
                           "attention": attention})


def test_the_facts_follow_the_class_attributes():
    gpt_oss, bloom = (resolve_model(m).spec for m in ("openai/gpt-oss-20b", "bigscience/bloomz-7b1"))
    assert gpt_oss.flash_supported and not gpt_oss.sdpa_supported
    assert not bloom.flash_supported and not bloom.sdpa_supported
    assert runs_eager_attention(bloom, _sc("flash"), HF)  # BLOOM: eager whatever is asked
    assert runs_eager_attention(gpt_oss, _sc("sdpa"), HF)  # gpt-oss: no SDPA path, eager
    assert not runs_eager_attention(gpt_oss, _sc("flash"), HF)


def test_gpt_oss_flash_keeps_no_scores():
    spec = spec_from_hf_config(GPT_OSS)
    flash, eager = saved(spec, attention="flash"), saved(spec, attention="eager")
    # flash: q, un-expanded k and v, the output and the fp32 log-sum-exp; the sinks add no tensor
    assert (flash["q"], flash["k"], flash["v"]) == (C * T * H * D, C * T * KV * D, C * T * KV * D)
    assert flash["attn.out"] == C * T * H * D and flash["attn.lse"] == 4 * H * T
    assert "attn.softmax_out" not in flash and "attn_out" not in flash
    # eager: repeat_kv expands k and v, the bf16 softmax keeps one sink column, o_proj's input is a copy
    assert (eager["k"], eager["v"], eager["attn_out"]) == (C * T * H * D,) * 3
    assert eager["attn.softmax_out"] == C * H * T * (T + 1) == 2_101_248
    assert sum(eager.values()) - sum(flash.values()) == 2_355_200
    assert saved(spec) == eager  # the default (sdpa) runs eager on gpt-oss
