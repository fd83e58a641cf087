"""Evaluation passes during training (scenario key eval_batch_size, estimate/evaluation.py).

The pass runs between optimizer steps under no_grad: the model state without the gradients (set to None by
zero_grad, except ZeRO-3's flat partition), no saved activations, and the whole logits with the loss's fp32
tensors, because Liger's fused loss runs only in training. Figures below are the mechanism's own arithmetic
on the catalog's Qwen2.5-3B (vocabulary 151,936) at 8,192 tokens.
"""

from __future__ import annotations

import importlib

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.allocator import segment_size
from vramfit.scenario import parse_scenario

T, V = 8192, 151936
EX = {"model": "Qwen/Qwen2.5-3B", "method": "full", "precision": "bf16-true", "seq_len": T, "grad_accum": 8,
      "gradient_checkpointing": "full", "attention": "flash", "loss": "fused", "optimizer": "adamw",
      "framework_version": "transformers-4.53"}


def _phase(result, name: str) -> dict[str, int]:
    return {p.phase: dict(p.breakdown) for p in result.phases}.get(name, {})


def test_default_is_no_evaluation():
    assert parse_scenario({"model": "Qwen/Qwen2.5-3B"}).eval_batch_size == 0
    assert "evaluate" not in {p.phase for p in estimate(EX).phases}


def test_fused_training_loss_evaluates_whole_logits_and_fp32_loss():
    r = estimate({**EX, "eval_batch_size": 1})
    ev = _phase(r, "evaluate")
    # bf16 logits (lm_head output), ForCausalLMLoss's logits.float() and log_softmax's fp32 output, all alive at once
    assert ev["eval_forward"] == (2 + 4 + 4) * T * V
    assert "gradients" not in ev and "activations" not in ev  # zero_grad(set_to_none) and no_grad
    state = _phase(r, "optimizer-step")
    assert ev["weights"] == state["weights"] and ev["optimizer_state"] == state["optimizer_state"]
    assert r.peak.phase == "evaluate"


def test_fused_training_loss_opens_new_segments_for_eval():
    base = estimate(EX).peak.reserved_bytes
    with_eval = estimate({**EX, "eval_batch_size": 1}).peak.reserved_bytes
    # the training loss's chunks leave no cached block as large as one tokens x vocab tensor: three new segments
    assert with_eval - base == segment_size(2 * T * V) + 2 * segment_size(4 * T * V)


def test_standard_training_loss_segments_serve_the_eval_pass():
    sc = {**EX, "loss": "standard"}
    base = estimate(sc)
    with_eval = estimate({**sc, "eval_batch_size": 1})
    assert with_eval.peak.reserved_bytes == base.peak.reserved_bytes
    assert with_eval.peak.allocated_bytes == base.peak.allocated_bytes  # the training loss backward is higher


def test_larger_eval_batch_scales_the_head():
    one = _phase(estimate({**EX, "eval_batch_size": 1}), "evaluate")["eval_forward"]
    four = _phase(estimate({**EX, "seq_len": T // 4, "eval_batch_size": 4}), "evaluate")["eval_forward"]
    assert one == four  # the same tokens x vocab


def test_zero3_keeps_its_flat_gradient_partition():
    sc = {**EX, "num_gpus": 4, "parallelism": "zero3", "model": "Qwen/Qwen3-8B", "grad_accum": 4,
          "framework_version": "transformers-4.53+deepspeed-0.16"}
    r = estimate({**sc, "eval_batch_size": 1})
    ev, fwd = _phase(r, "evaluate"), _phase(r, "forward")
    assert ev["gradients"] == fwd["gradients"] > 0
    # the gathered parameters as at the forward's end; with Liger's loss less the head it put inside the live cap
    # (test_zero3_evaluation_after_a_fused_loss_gathers_the_head_inside_the_live_cap)
    std = estimate({**sc, "loss": "standard", "eval_batch_size": 1})
    assert _phase(std, "evaluate")["comm_buffers"] == _phase(std, "forward")["comm_buffers"] == fwd["comm_buffers"]
    assert 0 < ev["comm_buffers"] < fwd["comm_buffers"]


def test_liger_gate_is_profile_data():
    fw = importlib.import_module("vramfit.estimate.framework")
    assert fw.PROFILES[fw.Framework.HF].fused_loss_trains_only is True
    assert fw.PROFILES[fw.Framework.TORCHTUNE].fused_loss_trains_only is False
    assert fw.PROFILES[fw.Framework.HF].fused_loss_head_external is True
    assert fw.PROFILES[fw.Framework.TORCHTUNE].fused_loss_head_external is False


def test_zero3_evaluation_after_a_fused_loss_gathers_the_head_inside_the_live_cap():
    """Liger's lce_forward made the head an external parameter of the CausalLM (estimate/core.py
    zero3_eval_head_relief; the simulator's check: tests/sim/test_sim_deepspeed_fused_head.py)."""
    sc = {"model": "Qwen/Qwen2.5-7B", "method": "full", "seq_len": 1024, "num_gpus": 4, "parallelism": "zero3",
          "gradient_checkpointing": "full", "eval_batch_size": 1}
    fused, standard = estimate({**sc, "loss": "fused"}), estimate({**sc, "loss": "standard"})
    drop = 2 * (152064 - 18944) * 3584  # the head on top of the cap, then one down_proj
    assert _phase(standard, "evaluate")["comm_buffers"] - _phase(fused, "evaluate")["comm_buffers"] == drop
    assert _phase(standard, "forward")["comm_buffers"] == _phase(fused, "forward")["comm_buffers"]  # training: on top
    zero2 = {**sc, "parallelism": "zero2"}
    assert _phase(estimate({**zero2, "loss": "fused"}), "evaluate").get("comm_buffers") == \
        _phase(estimate({**zero2, "loss": "standard"}), "evaluate").get("comm_buffers")


@pytest.mark.parametrize("bad", [-1, "x", 1.5])
def test_bad_eval_batch_size_names_the_field(bad):
    with pytest.raises(ScenarioError) as e:
        parse_scenario({"model": "Qwen/Qwen2.5-3B", "eval_batch_size": bad})
    assert "eval_batch_size" in str(e.value)


def test_cli_flag_and_bad_value():
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    runner = CliRunner()
    args = ["estimate", "--model", "Qwen/Qwen2.5-3B", "--method", "full", "--seq-len", str(T), "--loss", "fused",
            "--json"]
    ok = runner.invoke(app, [*args, "--eval-batch-size", "1"])
    assert ok.exit_code == 0, ok.output
    assert '"phase": "evaluate"' in ok.output
    bad = runner.invoke(app, [*args, "--eval-batch-size", "-1"])
    assert bad.exit_code == 2 and "eval_batch_size" in bad.output and "Traceback" not in bad.output


def test_api_rejects_a_bad_value_with_422():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as c:
        r = c.post("/api/estimate", json={"model": "Qwen/Qwen2.5-3B", "eval_batch_size": -1})
        assert r.status_code == 422 and r.json()["key"] == "eval_batch_size"
        r = c.post("/api/estimate", json={**EX, "eval_batch_size": 1})
        assert r.status_code == 200 and r.json()["peak"]["phase"] == "evaluate"


def test_assumptions_say_what_the_pass_holds():
    notes = [a for a in estimate({**EX, "eval_batch_size": 1}).assumptions if a.startswith("Evaluation")]
    assert len(notes) == 1 and f"1 x {T} tokens" in notes[0] and "fused loss runs in training only" in notes[0]
    assert f"{10 * T * V / 2**30:,.2f} GiB" in notes[0]
    dpo = estimate({"model": "Qwen/Qwen2.5-0.5B", "stage": "dpo", "eval_batch_size": 2})
    assert "evaluate" not in {p.phase for p in dpo.phases}
    assert any("sft stage only" in a for a in dpo.assumptions)


def test_web_form_accepts_zero():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as c:
        page = c.get("/").text
    field = page[page.index('name="eval_batch_size"'):][:120]
    assert 'type="number"' in field and 'min="0"' in field


def test_assumptions_have_portuguese():
    from vramfit.web.translate import to_pt, untranslated

    for sc in ({**EX, "eval_batch_size": 1}, {**EX, "method": "lora", "loss": "standard", "eval_batch_size": 2,
                                              "framework_version": "transformers-4.44"},
               {"model": "Qwen/Qwen2.5-0.5B", "stage": "dpo", "eval_batch_size": 2}):
        notes = [a for a in estimate(sc).assumptions if a.startswith(("Evaluation", "eval_batch_size"))]
        assert len(notes) == 1 and untranslated(notes) == []
    assert to_pt(notes[0]).startswith("eval_batch_size 2: as passagens de avaliação")
