"""lit-gpt@8641822 LoRA as it runs (lit_gpt/lora.py, finetune/lora.py under Lightning Fabric): the tensors its
LoRAQKVLinear keeps, the output projection found among square attention linears, the chunked head under
autocast and the 4-bit weights Lightning quantized from fp16."""

from vramfit.estimate.activations import block_saved
from vramfit.estimate.block_extras import model_extra_saved
from vramfit.estimate.core import model_state
from vramfit.estimate.framework import profile_for
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import Framework, Method, parse_scenario

LLAMA = resolve_model("meta-llama/Llama-2-7b-hf").spec  # h = 4096, 32 heads, q_proj and o_proj both 4096 x 4096
NEOX = resolve_model("stabilityai/stablelm-base-alpha-3b").spec  # fused query_key_value 4096 -> 12288, V = 50688
H = 4096
MODEL_ID = "meta-llama/Llama-2-7b-hf"


def _sc(model, **keys):
    base = {"model": model, "method": "lora", "framework": "litgpt", "precision": "bf16-true",
            "lora_targets": ["q_proj", "v_proj"], "lora_rank": 8, "seq_len": 1034}
    return parse_scenario({**base, **keys})


def _saved(spec, sc):
    profile = profile_for(sc.framework)
    _, adapters = model_state(spec, sc, profile)
    return block_saved(spec, sc, profile, adapters, sc.method is Method.QLORA).items


def test_q_and_v_share_one_dropout_and_one_lora_a_on_a_square_q_proj():
    T = 1304
    items = _saved(LLAMA, _sc(MODEL_ID, seq_len=T))
    # one dropout on the block's normed input (bool mask + bf16 output), lora_A's (T, 2r) output, and the
    # conv1d output that zero_pad's index_copy keeps: q and v, 2 x 4096 wide, bf16
    assert items["attn_in.lora.dropout_mask"] == T * H
    assert items["attn_in.lora.dropout_out"] == 2 * T * H
    assert items["attn_in.lora.a_out"] == 2 * T * 16
    assert items["attn_in.lora.zero_pad_source"] == 2 * T * 8192
    # q_proj is not taken for the output projection (it has the same 4096 x 4096 shape)
    assert not [k for k in items if k.startswith("q_proj")]


def test_the_output_projection_reads_the_attention_output():
    # torchtune's o_proj input is a copy of the attention output (flex attention's transpose): kept when o_proj is
    # adapted, never for q_proj's adapter
    tt = {"framework": "torchtune", "lora_dropout": 0.0}
    assert "attn_out" in _saved(LLAMA, _sc(MODEL_ID, lora_targets=["o_proj"], **tt))
    assert "attn_out" not in _saved(LLAMA, _sc(MODEL_ID, lora_targets=["q_proj"], **tt))



def test_fused_qkv_slices_under_autocast_keep_16_bit_copies():
    T = 1034
    mixed = _saved(NEOX, _sc("stabilityai/stablelm-base-alpha-3b", precision="bf16-mixed"))
    # the fp32 dropout output dies; lora_A keeps autocast's bf16 copy; conv1d runs in bf16 under autocast
    assert mixed["attn_in.lora.dropout_out"] == 2 * T * H
    assert mixed["attn_in.lora.zero_pad_source"] == 2 * T * 8192
    # q, k and v all adapted: zero_pad returns its input, nothing is scattered
    qkv = _saved(NEOX, _sc("stabilityai/stablelm-base-alpha-3b", lora_targets=["q_proj", "k_proj", "v_proj"]))
    assert "attn_in.lora.zero_pad_source" not in qkv and qkv["attn_in.lora.a_out"] == 2 * T * 24
    # naming the fused layer is the same three slices in lit-gpt: lora_A is (3r, in)
    fused = _sc("stabilityai/stablelm-base-alpha-3b", lora_targets=["query_key_value"])
    assert _saved(NEOX, fused) == qkv
    _, adapters = model_state(NEOX, fused, profile_for(Framework.LITGPT))
    assert [(a.target, a.slices, a.out_features) for a in adapters] == [("query_key_value", 3, 12288)]


def test_a_frozen_fp32_head_is_cast_once_per_128_token_chunk():
    sc = _sc("stabilityai/stablelm-base-alpha-3b", precision="bf16-mixed")
    lit, hf = compute(NEOX, sc), compute(NEOX, parse_scenario({**sc.to_dict(), "framework": "hf"}))
    head = 50688 * H
    # ceil(1034 / 128) = 9 bf16 copies of the lm_head weight, each saved by its chunk's matmul, against one; PEFT's
    # fp32 adapters add their own cached bf16 copies (half their 8,388,608 B), lit-gpt's transposed views none
    assert hf.parts.adapters == lit.parts.adapters == 8_388_608
    assert lit.parts.autocast_copies - (hf.parts.autocast_copies - 8_388_608 // 2) == 2 * 8 * head


def test_lightning_4bit_weights_dequantize_through_fp16_and_the_head_keeps_its_input():
    sc = _sc("stabilityai/stablelm-base-alpha-3b", method="qlora", quantize="nf4")
    step = compute(NEOX, sc)
    head = 50688 * H  # the biggest quantized weight (lit-gpt quantizes lm_head too)
    assert step.dequant == 2 * 2 * head + 4 * (head // 64)  # fp16 de-quantized, then its bf16 copy; fp32 absmax
    profile = profile_for(Framework.LITGPT)
    lora = _sc("stabilityai/stablelm-base-alpha-3b")
    # MatMul4Bit saves the head's input: the final norm's (T, h) bf16 output
    assert model_extra_saved(NEOX, sc, profile, False) - model_extra_saved(NEOX, lora, profile, False) == 2 * 1034 * H
