"""litgpt's scripts fix checkpointing by device count (profile ``checkpointing_by_devices``: lit-gpt@8641822
finetune/lora.py, FSDPStrategy's {Block} policy on several devices, none on one): a scenario that leaves it unset gets
the scripts' own, a change of GPU count follows it, an estimate that sets another says so, and plans try only it."""

from vramfit.estimate import estimate
from vramfit.plan import plan
from vramfit.scenario import parse_scenario
from vramfit.web.translate import untranslated

BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "litgpt", "seq_len": 2048}


def test_unset_checkpointing_follows_the_device_count():
    one, two = parse_scenario(BASE), parse_scenario({**BASE, "num_gpus": 2})
    assert (one.gradient_checkpointing.value, two.gradient_checkpointing.value) == ("none", "full")
    assert one.replace(num_gpus=2).gradient_checkpointing.value == "full"
    assert two.replace(num_gpus=1).gradient_checkpointing.value == "none"
    # HF leaves it to the user: its default stays none on any count
    assert parse_scenario({**BASE, "framework": "hf", "num_gpus": 2}).gradient_checkpointing.value == "none"
    assert parse_scenario(BASE).replace(framework="hf", num_gpus=2).gradient_checkpointing.value == "none"
    # the 2-GPU estimate is the checkpointed one, well under the one without
    got = estimate({**BASE, "num_gpus": 2, "micro_batch_size": 1}).peak.required_bytes
    assert got == estimate({**BASE, "num_gpus": 2, "micro_batch_size": 1,
                            "gradient_checkpointing": "full"}).peak.required_bytes
    # every block's saved activations (13.9 GiB at 2,048 tokens) come off
    assert got < estimate({**BASE, "num_gpus": 2, "micro_batch_size": 1,
                           "gradient_checkpointing": "none"}).peak.required_bytes - 12 * 2**30


def test_a_set_value_the_scripts_do_not_run_is_counted_and_said():
    given = parse_scenario({**BASE, "gradient_checkpointing": "full"})
    assert given.replace(num_gpus=2).gradient_checkpointing.value == "full"  # what the user set stays set
    lines = [a for a in estimate(given).assumptions if a.startswith("gradient_checkpointing")]
    assert lines == ["gradient_checkpointing full: litgpt's scripts run none on one GPU (checkpointing is their FSDP "
                     "strategy's per-block policy); counted as set, which takes an edited script."]
    assert untranslated(lines) == []
    unset = [a for a in estimate(BASE).assumptions if a.startswith("gradient_checkpointing")]
    assert unset == ["gradient_checkpointing none: not set, so litgpt's own, what its scripts run on one GPU."]
    assert untranslated(unset) == []


def test_plans_use_the_scripts_checkpointing():
    r = plan(BASE, effective_batch=16, max_gpus=4, gpu_ids="a100-80gb-sxm", with_changes=False)
    got = {(p.num_gpus, p.scenario["gradient_checkpointing"]) for p in r.plans}
    assert got and all(ckpt == ("none" if n == 1 else "full") for n, ckpt in got), got


def test_framework_changes_and_given_values():
    """A framework change re-derives a checkpointing litgpt derived (HF's default is none again) and reads the new
    framework's name as parse_scenario does; a value given, none included, stays given, as ``estimate`` keeps it; an
    imported litgpt file leaves it to the GPU count."""
    from vramfit import from_config

    two = parse_scenario({**BASE, "num_gpus": 2})
    assert two.replace(framework="hf").gradient_checkpointing.value == "none"
    assert parse_scenario({**BASE, "framework": "hf"}).replace(framework="LitGPT").framework.value == "litgpt"
    none = parse_scenario({**BASE, "gradient_checkpointing": "none"})
    assert none.replace(num_gpus=2).gradient_checkpointing.value == "none"
    imp = from_config("tests/config_import/fixtures/litgpt_lora.yaml")
    assert imp.scenario.num_gpus == 2 and imp.scenario.gradient_checkpointing.value == "full"
    assert imp.scenario.replace(num_gpus=1).gradient_checkpointing.value == "none"


def test_no_checkpointing_change_is_offered_and_one_gpu_qlora_says_so():
    from vramfit.plan.changes import _candidates

    assert not [c for c in _candidates(parse_scenario({**BASE, "seq_len": 4096})) if "gradient_checkpointing" in c.changes]
    sel = plan({**BASE, "gradient_checkpointing": "selective"}, effective_batch=8, gpu_ids="a100-80gb-sxm",
               with_changes=False)
    assert sel.plans and {p.scenario["gradient_checkpointing"] for p in sel.plans} <= {"none", "full"}
    q = plan({**BASE, "model": "Qwen/Qwen2.5-72B", "method": "qlora"}, effective_batch=8, gpu_ids="rtx4090",
             with_changes=False)
    reason = q.excluded[0].reason
    assert reason == ("does not fit 1 x rtx4090 at micro-batch 1 (litgpt trains a quantized base on one GPU only, "
                      "checkpointing none)") and untranslated([reason]) == []


def test_a_one_gpu_card_with_no_plan_names_what_litgpt_runs_there():
    """On one GPU litgpt's search has neither FSDP nor checkpointing nor offload to try: the reason says so (it said
    "even with FSDP and checkpointing")."""
    r = plan(BASE, effective_batch=8, max_gpus=1, gpu_ids="h100-sxm", with_changes=False)
    reason = r.excluded[0].reason
    assert reason == ("does not fit 1 x h100-sxm at micro-batch 1 (litgpt's scripts run no checkpointing or offload on "
                      "one GPU)") and untranslated([reason]) == []
