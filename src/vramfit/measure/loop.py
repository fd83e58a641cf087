"""The measured training steps: HF Trainer's loop on random tokens of exactly ``seq_len``.

Per optimizer step, ``grad_accum`` micro-batches of ``micro_batch_size`` x ``seq_len`` random token ids
(labels = inputs; the model computes transformers' causal-LM loss), forward under the precision's
autocast, ``loss / grad_accum``, backward (scaled by ``GradScaler`` for ``fp16-mixed``); then gradient
clipping (``max_grad_norm=1.0``), ``optimizer.step()`` and ``zero_grad(set_to_none=True)``. The optimizer
is the simulator's (:func:`vramfit.sim.optim.make_optimizer`: HF Trainer's choice for each scenario value).

Out of memory is a result: the loop stops, keeps the counters' peaks (the highest point reached before
the failed allocation) and reports the phase that failed and the last completed step.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vramfit.measure.probe import MemoryProbe, is_oom
from vramfit.scenario import Precision, Scenario

MAX_GRAD_NORM = 1.0  # HF TrainingArguments.max_grad_norm default


@dataclass
class LoopResult:
    status: str  # "ok" | "oom" | "error"
    steps_done: int  # completed optimizer steps (for oom/error: the last good step)
    step_times_s: list[float]
    peaks: dict[str, int | None]
    failed_at: str | None = None  # phase label where the run stopped
    error: str | None = None  # first line of the exception text
    load: dict[str, int] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    # the counters' peaks so far after each completed step: where reserved keeps growing after the first step
    # (segments cached by one step and not reused by the next), the estimate of one step falls short of the run's
    step_peaks: list[dict[str, int | None]] = field(default_factory=list)

    @property
    def step_time_s(self) -> float | None:
        """Median step time, the first (warm-up) step left out when there are others."""
        times = self.step_times_s[1:] if len(self.step_times_s) > 1 else self.step_times_s
        if not times:
            return None
        ordered = sorted(times)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def tokens_per_step(scenario: Scenario) -> int:
    """Tokens one optimizer step processes over all data-parallel GPUs."""
    return scenario.micro_batch_size * scenario.seq_len * scenario.grad_accum * scenario.num_gpus


def run_steps(model: Any, scenario: Scenario, *, vocab_size: int, steps: int, device: str, probe: MemoryProbe,
              autocast_dtype: Any = None, no_sync: Any = None, seed: int = 0) -> LoopResult:
    """Run ``steps`` optimizer steps of ``model`` and return the figures; never raises for out of memory."""
    import torch

    torch.manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    if scenario.optimizer_in_backward:
        optimizers, text = _in_backward(scenario, params)
    else:
        opt, text = make_optimizer(scenario, params)
        optimizers = [opt]
    assumptions = [text, "Gradient clipping max_norm=1.0 and zero_grad(set_to_none=True), as HF Trainer."]
    scaler = None
    if scenario.precision is Precision.FP16_MIXED:
        scaler = torch.amp.GradScaler(torch.device(device).type)
        assumptions.append("fp16-mixed: torch.amp.GradScaler scales the loss and unscales the gradients.")
    load = probe.start()
    times: list[float] = []
    step_peaks: list[dict[str, int | None]] = []
    where = ["step1"]  # the phase label reached, updated by _step
    status, failed_at, error = "ok", None, None
    try:
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            _step(model, scenario, step, params, optimizers, scaler, where, probe=probe, device=device,
                  vocab_size=vocab_size, autocast_dtype=autocast_dtype, no_sync=no_sync)
            probe.synchronize()
            times.append(time.perf_counter() - t0)
            probe.checkpoint(f"step{step}.end")
            step_peaks.append(probe.peaks())
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # out of memory is a result; anything else is recorded as an error
        status = "oom" if is_oom(exc) else "error"
        failed_at, error = where[0], first_line(exc)
    peaks = probe.peaks()
    probe.stop()
    if status != "ok":
        _release(model, optimizers)
    return LoopResult(status, len(times), times, peaks, failed_at, error, load, assumptions, step_peaks)


def make_optimizer(scenario: Scenario, params: list[Any]) -> tuple[Any, str]:
    """HF Trainer's optimizer for the scenario (the simulator's table), with torchao's real ``AdamW4bit``."""
    from vramfit.scenario import Optimizer

    if scenario.optimizer is Optimizer.ADAMW_4BIT:
        from torchao.optim import AdamW4bit

        return AdamW4bit(params, lr=1e-4), "Optimizer: torchao.optim.AdamW4bit (HF Trainer adamw_torch_4bit)."
    if scenario.optimizer is Optimizer.ADAMW_8BIT_TORCHAO:
        from torchao.optim import AdamW8bit

        return AdamW8bit(params, lr=1e-4), "Optimizer: torchao.optim.AdamW8bit (HF Trainer adamw_torch_8bit)."
    from vramfit.sim.optim import make_optimizer as sim_optimizer

    return sim_optimizer(scenario, params)


def _in_backward(scenario: Scenario, params: list[Any]) -> tuple[list[Any], str]:
    """One optimizer per parameter, stepped by a post-accumulate-grad hook (torchtune's optimizer_in_bwd)."""
    opts: dict[Any, Any] = {}
    text = ""
    for p in params:
        opts[p], text = make_optimizer(scenario, [p])

    def hook(p: Any) -> None:
        opts[p].step()
        opts[p].zero_grad(set_to_none=True)

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    return list(opts.values()), text + " Stepped inside backward, one parameter at a time."


def _step(model: Any, scenario: Scenario, step: int, params: list[Any], optimizers: list[Any], scaler: Any,
          where: list[str], *, probe: MemoryProbe, device: str, vocab_size: int, autocast_dtype: Any,
          no_sync: Any) -> None:
    """One optimizer step; its tensors die with this frame when an exception leaves it."""
    import torch

    B, S, A = scenario.micro_batch_size, scenario.seq_len, scenario.grad_accum
    for mb in range(1, A + 1):
        where[0] = f"step{step}.mb{mb}.forward"
        probe.checkpoint(where[0])
        ids = torch.randint(0, vocab_size, (B, S), device=device)
        sync = no_sync() if (no_sync is not None and mb < A) else contextlib.nullcontext()
        with sync:
            with _autocast(device, autocast_dtype):
                out = model(input_ids=ids, labels=ids)
            loss = out.loss / A
            del out, ids
            where[0] = f"step{step}.mb{mb}.backward"
            probe.checkpoint(where[0])
            (scaler.scale(loss) if scaler is not None else loss).backward()
            del loss
    where[0] = f"step{step}.optimizer"
    probe.checkpoint(where[0])
    if not scenario.optimizer_in_backward:
        if scaler is not None:
            scaler.unscale_(optimizers[0])
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        if scaler is not None:
            scaler.step(optimizers[0])
            scaler.update()
        else:
            optimizers[0].step()
    model.zero_grad(set_to_none=True)
    if scenario.eval_batch_size:
        where[0] = f"step{step}.evaluate"
        probe.checkpoint(where[0])
        _evaluate(model, scenario, device, vocab_size, autocast_dtype)


def _evaluate(model: Any, scenario: Scenario, device: str, vocab_size: int, autocast_dtype: Any) -> None:
    """An evaluation pass after the step (scenario eval_batch_size; estimate/evaluation.py): the HF Trainer's
    evaluation_loop sets eval mode and prediction_step runs the model with its labels under torch.no_grad()
    (transformers v4.51.3 trainer.py)."""
    import torch

    ids = torch.randint(0, vocab_size, (scenario.eval_batch_size, scenario.seq_len), device=device)
    model.eval()
    try:
        with torch.no_grad(), _autocast(device, autocast_dtype):
            del model(input_ids=ids, labels=ids).loss
    finally:
        model.train()


@contextlib.contextmanager
def _autocast(device: str, dtype: Any) -> Iterator[None]:
    if dtype is None:
        yield
        return
    import torch

    with torch.autocast(torch.device(device).type, dtype=dtype):
        yield


def _release(model: Any, optimizers: list[Any]) -> None:
    """Drop gradients and optimizer state after a failure so the process can report and exit cleanly."""
    with contextlib.suppress(Exception):
        model.zero_grad(set_to_none=True)
    for opt in optimizers:
        with contextlib.suppress(Exception):
            opt.state.clear()
    gc.collect()
