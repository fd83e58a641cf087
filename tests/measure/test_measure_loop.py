"""The measured step loop on the CPU with a fake probe: everything but the CUDA counters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vramfit.measure.build import build_run, model_config  # noqa: E402
from vramfit.measure.loop import LoopResult, run_steps, tokens_per_step  # noqa: E402
from vramfit.measure.probe import FakeProbe, NullProbe, is_oom  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402


def _run(sc: dict, steps: int = 3, probe=None):
    scenario = parse_scenario(sc)
    built = build_run(scenario, model_config(scenario), "cpu")
    probe = probe or FakeProbe()
    res = run_steps(built.model, scenario, vocab_size=built.vocab_size, steps=steps, device="cpu", probe=probe,
                    autocast_dtype=built.autocast_dtype)
    return res, probe


@pytest.mark.parametrize("keys", [
    {"method": "full"},
    {"method": "lora", "gradient_checkpointing": "full"},
    {"method": "qlora"},
    {"method": "full", "precision": "bf16-mixed", "grad_accum": 2},
    {"method": "lora", "precision": "fp16-mixed"},
    {"method": "full", "optimizer": "adamw-8bit"},
    {"method": "lora", "optimizer": "paged-adamw-8bit"},
    {"method": "full", "optimizer": "sgd-momentum", "optimizer_in_backward": True},
    {"method": "lora", "attention": "eager", "gradient_checkpointing": "selective"},
], ids=["full", "lora-ckpt", "qlora", "mixed-accum2", "fp16-mixed", "adamw8bit", "paged8bit", "opt-in-bwd",
        "eager-selective"])
def test_steps_run_and_report(tiny, keys):
    res, probe = _run(tiny(**keys))
    assert res.status == "ok", res.error
    assert res.steps_done == 3 and len(res.step_times_s) == 3
    assert res.peaks == probe.figures
    accum = keys.get("grad_accum", 1)
    assert probe.labels.count("step1.mb1.forward") == 1
    assert f"step1.mb{accum}.backward" in probe.labels and "step3.optimizer" in probe.labels


def test_training_changes_the_weights(tiny):
    scenario = parse_scenario(tiny(method="full", precision="fp32"))
    built = build_run(scenario, model_config(scenario), "cpu")
    before = built.causal_lm.model.layers[0].mlp.up_proj.weight.detach().clone()
    res = run_steps(built.model, scenario, vocab_size=built.vocab_size, steps=2, device="cpu", probe=FakeProbe())
    assert res.status == "ok"
    assert not torch.equal(before, built.causal_lm.model.layers[0].mlp.up_proj.weight)


@pytest.mark.parametrize("oom_at,steps_done", [
    ("step1.mb1.forward", 0),
    ("step2.mb1.backward", 1),
    ("step3.optimizer", 2),
    ("step2", 1),
], ids=["first-forward", "second-backward", "third-optimizer", "prefix"])
def test_out_of_memory_is_a_result(tiny, oom_at, steps_done):
    res, probe = _run(tiny(method="lora"), steps=3, probe=FakeProbe(oom_at=oom_at))
    assert res.status == "oom"
    assert res.steps_done == steps_done  # the last good step
    assert res.failed_at.startswith(oom_at)
    assert "out of memory" in res.error.lower() and res.error.startswith("OutOfMemoryError")
    assert res.peaks["allocated_bytes"] == probe.figures["allocated_bytes"]


def test_other_failures_are_recorded_as_errors(tiny):
    class Boom(FakeProbe):
        def checkpoint(self, label):
            if label == "step2.optimizer":
                raise RuntimeError("CUDA error: an illegal memory access was encountered")

    res, _ = _run(tiny(method="lora"), probe=Boom())
    assert res.status == "error" and res.steps_done == 1 and res.failed_at == "step2.optimizer"
    assert "illegal memory access" in res.error


def test_keyboard_interrupt_is_not_swallowed(tiny):
    class Stop(FakeProbe):
        def checkpoint(self, label):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(tiny(method="lora"), probe=Stop())


def test_null_probe_gives_no_figures(tiny):
    res, _ = _run(tiny(method="lora"), steps=1, probe=NullProbe())
    assert res.status == "ok" and res.peaks == {"allocated_bytes": None, "reserved_bytes": None, "device_bytes": None}


@pytest.mark.parametrize("exc,expected", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"), True),
    (RuntimeError("CUDA error: out of memory"), True),
    (RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)"), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
    (ValueError("out of memory"), False),
], ids=["torch-oom", "runtime-oom", "cublas-alloc", "shape-error", "not-runtime"])
def test_is_oom(exc, expected):
    assert is_oom(exc) is expected


@pytest.mark.parametrize("times,median", [([], None), ([5.0], 5.0), ([9.0, 1.0, 3.0], 2.0), ([9.0, 1.0, 3.0, 2.0], 2.0)])
def test_step_time_leaves_out_the_warm_up(times, median):
    assert LoopResult("ok", len(times), times, {}).step_time_s == median


def test_tokens_per_step_counts_every_data_parallel_gpu(tiny):
    sc = parse_scenario({"model": "meta-llama/Llama-3.2-1B", "micro_batch_size": 2, "seq_len": 512, "grad_accum": 4,
                         "num_gpus": 2, "parallelism": "ddp"})
    assert tokens_per_step(sc) == 2 * 512 * 4 * 2


def test_evaluation_pass_runs_after_each_step(tiny):
    res, probe = _run(tiny(method="full", eval_batch_size=2), steps=2)
    assert res.status == "ok", res.error
    assert probe.labels.index("step1.evaluate") > probe.labels.index("step1.optimizer")
    assert "step2.evaluate" in probe.labels
    res, probe = _run(tiny(method="full"), steps=1)
    assert not any(label.endswith("evaluate") for label in probe.labels)


class _GrowingProbe(FakeProbe):
    """Reserved grows by 1 GiB a step, as cached segments of one step that the next does not reuse would."""

    def peaks(self):
        done = sum(1 for label in self.labels if label.endswith(".end"))
        return {**self.figures, "reserved_bytes": self.figures["reserved_bytes"] + done * 2**30}


def test_each_step_s_peaks_are_kept(tiny):
    res, _ = _run(tiny(method="lora"), steps=3, probe=_GrowingProbe())
    assert [p["reserved_bytes"] // 2**30 for p in res.step_peaks] == [5, 6, 7]
    assert [p["allocated_bytes"] for p in res.step_peaks] == [3 * 2**30] * 3
    oom, _ = _run(tiny(method="lora"), steps=3, probe=FakeProbe(oom_at="step2.mb1.backward"))
    assert len(oom.step_peaks) == 1  # the completed step only


def test_the_record_keeps_each_step_s_peaks(tiny):
    from vramfit.measure.records import dumps_records, parse_lines
    from vramfit.measure.runner import measure

    rec = measure(tiny(method="lora"), steps=2, device="cpu", in_process=True, probe=FakeProbe(), simulate=False)
    assert [p["reserved_bytes"] for p in rec.details["step_peaks"]] == [4 * 2**30] * 2
    (back,) = parse_lines(dumps_records([rec]))
    assert back.details["step_peaks"] == rec.details["step_peaks"]
