"""Axolotl's use_kernels and activation_offloading map to the scenario keys moe_kernel and gradient_checkpointing."""

from pathlib import Path

from vramfit import from_config

FIX = Path(__file__).parent / "fixtures"

#: the shape of axolotl-ai-cloud/axolotl@ba3dba3e4 examples/gpt-oss/gpt-oss-20b-fft-fsdp2.yaml (written for
#: vramfit's tests; flash_attention dropped: the importer asks for one attention setting)
GPT_OSS_FFT = """base_model: openai/gpt-oss-20b
use_kernels: true
plugins:
  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin
sequence_len: 4096
sample_packing: true
gradient_accumulation_steps: 2
micro_batch_size: 1
optimizer: adamw_torch_8bit
bf16: true
attn_implementation: kernels-community/vllm-flash-attn3
gradient_checkpointing: true
activation_offloading: true
fsdp_version: 2
fsdp_config:
  offload_params: false
  auto_wrap_policy: TRANSFORMER_BASED_WRAP
  transformer_layer_cls_to_wrap: GptOssDecoderLayer
  reshard_after_forward: true
"""


def test_use_kernels_under_fsdp_keeps_the_models_own_experts_forward(tmp_path):
    p = tmp_path / "gpt-oss-fft.yaml"
    p.write_text(GPT_OSS_FFT)
    imp = from_config(p)
    sc = imp.scenario
    assert (sc.moe_kernel.value, sc.gradient_checkpointing.value, sc.parallelism.value) == ("none", "offload", "fsdp")
    # listing the plugin turns Cut Cross-Entropy on (its args default cut_cross_entropy to True)
    assert sc.loss.value == "fused"
    line = next(x.strip() for x in imp.lines() if "use_kernels:" in x)
    assert line.startswith("read     use_kernels: True → moe_kernel=none  [Axolotl loads the model on the CPU")
    assert "pass --moe-kernel megablocks" in line


def test_cut_cross_entropy_false_keeps_the_standard_loss(tmp_path):
    p = tmp_path / "no-cce.yaml"
    p.write_text(GPT_OSS_FFT + "cut_cross_entropy: false\n")
    assert from_config(p).scenario.loss.value == "standard"


def test_no_use_kernels_leaves_the_default(tmp_path):
    p = tmp_path / "plain.yml"
    p.write_text((FIX / "axolotl_full_fsdp.yml").read_text())
    sc = from_config(p).scenario
    assert sc.moe_kernel.value == "none" and sc.gradient_checkpointing.value == "full"
    p.write_text((FIX / "axolotl_full_fsdp.yml").read_text() + "activation_offloading: true\n")
    assert from_config(p).scenario.gradient_checkpointing.value == "offload"


def test_an_axolotl_config_runs_the_modelled_axolotl_release(tmp_path):
    """The importer names Axolotl's release (config_import/axolotl.py AXOLOTL_RELEASE): under fsdp_version 2 the
    profile wraps as axolotl's own fsdp2_prepare_model (the root unit whole, no embedding or tail unit, no fp32
    upcast) and the weights load to the host; without it, accelerate's FSDP2 with its tail unit would be modelled."""
    from vramfit.estimate.framework import scenario_profile

    p = tmp_path / "gpt-oss-fft.yaml"
    p.write_text(GPT_OSS_FFT)
    sc = from_config(p).scenario
    assert sc.framework_version == "axolotl-0.12"
    profile = scenario_profile(sc)
    assert profile.fsdp2 and not profile.fsdp2_tail_unit
    assert profile.fsdp2_variant.name == "axolotl@ba3dba3e4's fsdp2_prepare_model"
    assert sc.parallelism in profile.weights_load_host
