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


def test_a_card_alias_and_changed_keys_keep_what_the_user_set():
    """A GPU alias ("4090") is swapped for the catalog id without losing the record of the keys the user set (the line
    stayed away and a given none flipped to Unsloth's default on a change of GPU count); ``estimate(Scenario, **keys)``
    derives what follows the changed keys as Scenario.replace does."""
    r = estimate({**BASE, "gpu": "4090"})
    assert [a for a in r.assumptions if a.startswith("gradient_checkpointing")] == [
        "gradient_checkpointing offload: not set, so unsloth's own, its default."]
    kept = estimate({**BASE, "gradient_checkpointing": "none", "gpu": "4090"}).scenario
    assert kept.replace(num_gpus=2).gradient_checkpointing.value == "none"
    hf = parse_scenario({**BASE, "framework": "hf"})
    assert estimate(hf, framework="unsloth").peak.required_bytes == estimate(BASE).peak.required_bytes
    assert estimate(parse_scenario(BASE), framework_version="unsloth-2024.12").scenario.gradient_checkpointing.value == "full"
