"""``compile`` where the framework has the switch, refused where it has none, and offered by the planner where it
saves memory (estimate/profile_fields.py ``runs_compile``, estimate/framework.py ``check_runs``, plan/changes.py);
``loss: chunked`` likewise (``runs_chunked_loss``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.plan import changes_to_fit

GiB = 2**30


@pytest.mark.parametrize("framework", ["unsloth", "litgpt"])
def test_compile_is_refused_where_the_framework_has_no_switch(framework):
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": framework, "compile": True}
    with pytest.raises(ScenarioError) as err:
        estimate(sc)
    assert err.value.key == "compile" and "false" in str(err.value)
    res = CliRunner().invoke(app, ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora",
                                   "--framework", framework, "--compile", "true"])
    assert res.exit_code == 2 and "compile" in res.output and "Traceback" not in res.output


def test_unsloth_keeps_its_own_loss_uncompiled():
    """Unsloth's fused cross-entropy is its own kernel: before the refusal, compile: true swapped it for a compiled
    cross-entropy and raised the figure (30.0 -> 31.9 GiB here)."""
    r = estimate({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "unsloth", "seq_len": 2048,
                  "micro_batch_size": 2, "gradient_checkpointing": "none"})
    assert any(a.startswith("Loss: Unsloth fused CE") for a in r.assumptions)


def test_the_planner_offers_compile_where_it_saves_memory():
    """torchtitan's Llama 3.1 8B benchmark setup (2 x 8,192 tokens, op-level SAC, FSDP2 on 8 GPUs) on an H100, as
    v0.2.2 ran it: compiling drops the 32 down projections' outputs (4 GiB) and, from torchtitan's April 2025 releases
    on, the loss's two fp32 copies of the 16,384 x 128,256 logits (15.66 GiB), and makes it fit; torchtitan-2024
    (9dec370) kept the loss eager. v0.3.0's chunked loss never makes those logits: it fits uncompiled, and nothing is
    offered."""
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan", "precision": "bf16-mixed",
          "gradient_checkpointing": "selective-op", "num_gpus": 8, "parallelism": "fsdp", "micro_batch_size": 2,
          "seq_len": 8192}
    assert changes_to_fit(sc, "h100-sxm") == []
    sc["framework_version"] = "torchtitan-0.2.2"
    changes = {c.name: c for c in changes_to_fit(sc, "h100-sxm")}
    assert "chunked-loss" not in changes  # torchtune's chunked loss is not torchtitan's to switch to
    ch = changes["compile"]
    assert ch.changes == {"compile": True} and ch.fits and ch.kind == "free"
    loss = 2 * 16384 * 128256 * 4
    assert 4 * GiB + loss <= ch.saving_bytes < 4.2 * GiB + loss  # and their share of the cached segments
    old = {c.name: c for c in changes_to_fit({**sc, "framework_version": "torchtitan-2024"}, "h100-sxm")}["compile"]
    assert 4 * GiB <= old.saving_bytes < 4.2 * GiB  # the 4 GiB of outputs only
    assert "compile" not in {c.name for c in changes_to_fit({**sc, "compile": True, "micro_batch_size": 3}, "h100-sxm")}


@pytest.mark.parametrize("framework, valid", [("torchtitan", ["standard"]), ("litgpt", ["standard"]),
                                              ("unsloth", ["standard", "fused"])])
def test_a_chunked_loss_is_refused_where_the_framework_has_none(framework, valid):
    """torchtitan v0.3.0's standard loss is its own chunked one, litgpt's standard loss is already its chunked
    one, Unsloth's is its fused kernel: a torchtune CEWithChunkedOutputLoss under them was a figure of no real run."""
    method = "full" if framework == "torchtitan" else "lora"
    with pytest.raises(ScenarioError) as err:
        estimate({"model": "meta-llama/Llama-3.1-8B", "method": method, "framework": framework, "loss": "chunked"})
    assert err.value.key == "loss" and list(err.value.valid) == valid
    assert estimate({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "torchtune",
                     "loss": "chunked"}).peak.allocated_bytes > 0
