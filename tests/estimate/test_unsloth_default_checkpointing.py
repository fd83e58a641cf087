"""Unsloth's get_peft_model checkpoints by default (profile ``default_checkpointing``): "unsloth", the offloaded
checkpointer, since unsloth@1b28ec31f7 (2025-07-17); ``True`` before it, transformers' own checkpointing, which the
2024 releases modelled here run. A scenario that leaves gradient_checkpointing unset gets that default and says so;
one that sets it keeps it; HF keeps none."""

from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario
from vramfit.web.translate import untranslated

BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "framework": "unsloth", "seq_len": 4096}


def test_unset_checkpointing_is_the_release_default():
    assert parse_scenario(BASE).gradient_checkpointing.value == "offload"
    for old in ("unsloth-2024.12", "unsloth-2024.11", "unsloth-2024.8", "unsloth-2024.5"):
        assert parse_scenario({**BASE, "framework_version": old}).gradient_checkpointing.value == "full"
    assert parse_scenario({**BASE, "gradient_checkpointing": "none"}).gradient_checkpointing.value == "none"
    hf = parse_scenario({**BASE, "framework": "hf"})
    assert hf.gradient_checkpointing.value == "none"
    assert hf.replace(framework="unsloth").gradient_checkpointing.value == "offload"
    assert parse_scenario(BASE).replace(framework="hf").gradient_checkpointing.value == "none"
    assert parse_scenario(BASE).replace(framework_version="unsloth-2024.12").gradient_checkpointing.value == "full"


def test_the_estimate_is_the_checkpointed_one_and_says_why():
    r = estimate(BASE)
    assert r.peak.required_bytes == estimate({**BASE, "gradient_checkpointing": "offload"}).peak.required_bytes
    # without checkpointing every block's saved tensors stay: several GiB more at 4,096 tokens
    assert r.peak.required_bytes < estimate({**BASE, "gradient_checkpointing": "none"}).peak.required_bytes - 2 * 2**30
    lines = [a for a in r.assumptions if a.startswith("gradient_checkpointing")]
    assert lines == ["gradient_checkpointing offload: not set, so unsloth's own, its default."]
    assert untranslated(lines) == []
    assert not [a for a in estimate({**BASE, "gradient_checkpointing": "offload"}).assumptions
                if a.startswith("gradient_checkpointing")]
