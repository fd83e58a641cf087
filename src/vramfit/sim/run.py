"""Run the training steps of a scenario under the tracker: two optimizer steps of ``grad_accum`` micro-batches.

The loop is HF Trainer's (transformers ``Trainer._inner_training_loop`` / ``training_step``): per
micro-batch, forward under the precision's autocast with ``labels`` (the model computes the loss),
``loss / grad_accum``, the batch dropped (``del inputs``), ``backward``; then gradient clipping
(``max_grad_norm=1.0``), ``optimizer.step()`` and ``model.zero_grad()`` (``set_to_none=True``).
Two optimizer steps, because the optimizer state only exists after the first one.

Runs on fake CPU tensors (``fake=True``, the simulator) or for real on any device (``fake=False``:
the tracker's accuracy check against ``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from vramfit.errors import ModelError
from vramfit.estimate.attention import lacks_flash_attention
from vramfit.estimate.phases import StepPhase
from vramfit.scenario import Loss, Precision, Scenario
from vramfit.sim import images
from vramfit.sim.build import BuiltModel, materialize
from vramfit.sim.trace import BUFFER, PARAM, LiveTracker, Trace

MAX_GRAD_NORM = 1.0  # HF TrainingArguments.max_grad_norm default
FP16_LOSS_SCALE = 2.0**16  # torch.amp.GradScaler init_scale default
ITERATIONS = 2


@dataclass
class StepResult:
    trace: Trace
    num_params: int  # parameters as built (quantized weights counted by their unquantized shape)
    num_trainable: int
    assumptions: list[str] = field(default_factory=list)


def run_training(built: BuiltModel, scenario: Scenario, *, device: str = "cpu", fake: bool = True,
                 progress: Callable[[str], None] | None = None,
                 prepare: Callable[[BuiltModel], Any] | None = None,
                 workspaces: list[int] | None = None, reference: BuiltModel | None = None) -> StepResult:
    """Materialise ``built`` on ``device`` and trace ``ITERATIONS`` optimizer steps.

    ``workspaces``: bytes of the cuBLAS/cuBLASLt workspaces a CUDA run allocates on the first matmul of
    each thread that runs matmuls (the forward's thread and the autograd engine's device thread; PyTorch
    keeps one per handle and stream, pytorch/pytorch PR #180283 "Thread-local cuBLAS(Lt) workspace maps").
    Fake runs book them as never-freed synthetic allocations; real runs allocate them for real.
    ``prepare(built)``: called on the ``meta`` model before it is materialised (FSDP2 sharding).
    ``reference``: a frozen reference copy (DPO/GRPO full fine-tuning), materialised beside the policy.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with fake_mode:
        if prepare is not None:
            prepare(built)
        if not built.materialized:
            materialize(built, device)
        tracker = LiveTracker()
        if built.offload_hooks is not None:
            built.offload_hooks.tracker = tracker
        _register_model(built, tracker)
        if reference is not None:
            _register_model(materialize(reference, device), tracker)
        from vramfit.sim.stages import runner_for

        runner = runner_for(scenario, built, reference, lambda: _autocast(built, device))
        try:
            return _loop(built, scenario, tracker, device, fake, progress, workspaces if fake else None, runner)
        finally:
            tracker.close()


def _register_model(built: BuiltModel, tracker: LiveTracker) -> None:
    tracker.mark(StepPhase.LOAD.trace_mark)
    tr = tracker.trace
    for _name, p in built.model.named_parameters():
        sids = tracker.track(p, PARAM, "parameter")
        if p.requires_grad:
            tr.trainable_sids.update(sids)
        if p.dtype == torch.uint8:
            tr.quantized_sids.update(sids)
    for name, b in built.model.named_buffers():
        sids = tracker.track(b, BUFFER, "buffer")
        if name.rsplit(".", 1)[-1] in ("absmax", "nested_absmax", "nested_code", "offset", "code"):
            tr.quantized_sids.update(sids)


def _workspace(tracker: LiveTracker, sizes: list[int] | None, thread: str) -> None:
    for n in sizes or ():
        tracker.trace.workspace_sids.add(tracker.synthetic(n, f"cuBLAS workspace ({thread})", (n,), "uint8"))


def _loop(built: BuiltModel, scenario: Scenario, tracker: LiveTracker, device: str, fake: bool,
          progress: Callable[[str], None] | None, workspaces: list[int] | None, runner: Any = None) -> StepResult:
    from vramfit.sim.optim import optimizer_state_tensors

    model = built.model
    params = built.trainable_parameters()
    optimizers, text = _optimizers(scenario, params, tracker)
    assumptions: list[str] = [text]
    tracker.watch_modules(model, built.lm_head)
    tracker.watch_layers(decoder_layers(model))
    fp16_scaled = scenario.precision is Precision.FP16_MIXED
    if fp16_scaled:
        assumptions.append("fp16-mixed: loss scaled and gradients unscaled in place (GradScaler); the inf check "
                           "is a scalar and is not simulated.")
    B, S = runner.rows if runner else scenario.micro_batch_size, scenario.seq_len
    carry = _carried_outputs(scenario)
    with tracker, _cuda_semantics(fake, built.autocast_dtype is not None, assumptions,
                                  not lacks_flash_attention(scenario)), \
            _transformers_as_on_cuda(fake), runner.context() if runner else contextlib.nullcontext():
        for it in range(1, ITERATIONS + 1):
            if runner and runner.has_score_phase:
                tracker.mark(f"it{it}.{StepPhase.SCORE.trace_mark}")
                runner.score(device)
            for mb in range(1, scenario.grad_accum + 1):
                _gradient_sync(built, scenario, last=mb == scenario.grad_accum)
                tag = mark_forward(tracker, workspaces, it, mb, progress)
                ids, labels, pixels = images.batch(built.images, built.vocab_size, B, S, images.FED_DTYPE, device)
                with _autocast(built, device), images.values_kept(built.images):
                    loss = runner.loss(ids, mb) if runner else _forward_loss(built, scenario, ids, labels, pixels, carry)
                loss = loss / scenario.grad_accum
                del ids, labels, pixels
                mark_backward(tracker, workspaces, tag, progress)
                with images.values_kept(built.images):  # a checkpointed block's re-run reads them too
                    _backward(loss * FP16_LOSS_SCALE if fp16_scaled else loss)
                del loss
                tracker.in_backward = False
            _record_grads(tracker, params)
            if progress:
                progress(f"it{it} optimizer step")
            tracker.mark(f"it{it}.{StepPhase.OPTIMIZER_STEP.trace_mark}")
            if not scenario.optimizer_in_backward:
                grads = [p.grad for p in params if p.grad is not None]
                if fp16_scaled and grads:
                    torch._foreach_mul_(grads, 1.0 / FP16_LOSS_SCALE)
                if grads:
                    torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
                for opt in optimizers:
                    opt.step()
                del grads
            for opt in optimizers:
                for t in optimizer_state_tensors(opt):
                    sid = tracker.sid_of(t)
                    if sid is not None:
                        tracker.trace.state_sids.add(sid)
            tracker.mark(f"it{it}.{StepPhase.ZERO_GRAD.trace_mark}")
            model.zero_grad(set_to_none=True)
        if scenario.eval_batch_size:
            _evaluate(built, scenario, tracker, device)
        tracker.mark("end")
    if not scenario.optimizer_in_backward and scenario.grad_accum >= 1:
        assumptions.append("Gradient clipping: torch.nn.utils.clip_grad_norm_(max_norm=1.0), HF Trainer default.")
    num_params, num_trainable = _count_params(built)
    return StepResult(tracker.trace, num_params, num_trainable, assumptions)


def _optimizers(scenario: Scenario, params: list[torch.nn.Parameter], tracker: LiveTracker) -> tuple[list, str]:
    """The step's optimizers (one per parameter when the step runs in backward) and what they are, in words."""
    from vramfit.sim.optim import in_backward_optimizers, make_optimizer

    if scenario.optimizer_in_backward:
        opts, text = in_backward_optimizers(scenario, params, tracker)
        return list(opts.values()), text
    opt, text = make_optimizer(scenario, params, tracker)
    return [opt], text


def _gradient_sync(built: BuiltModel, scenario: Scenario, last: bool) -> None:
    """The HF Trainer runs every micro-batch but the last under ``accelerator.no_sync(model)`` (transformers v5.24.0
    trainer.py l. 1904-1915), which for an FSDP2 model is ``model.set_requires_gradient_sync(False)`` (accelerate
    v1.15.0 accelerator.py l. 1166-1171): each unit then keeps its whole gradients instead of reduce-scattering them.
    Applied where the scenario's profile says its loop does so (``fsdp_unsharded_accum_grads``)."""
    if scenario.grad_accum < 2:
        return
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    from vramfit.estimate.framework import scenario_profile

    if isinstance(built.model, FullyShardedDataParallel):  # FSDP1: accelerate's no_sync is the module's own no_sync,
        for m in built.model.modules():  # which turns ``_sync_gradients`` off on every unit (torch v2.13.0
            if isinstance(m, FullyShardedDataParallel):  # fsdp/fully_sharded_data_parallel.py ``no_sync``)
                m._sync_gradients = last
        return
    if not scenario_profile(scenario).fsdp_unsharded_accum_grads:
        return
    roots = [m for m in built.model.modules() if isinstance(m, FSDPModule)][:1]  # modules() yields the outermost first
    for root in roots:
        root.set_requires_gradient_sync(last)


def _backward(loss: torch.Tensor) -> None:
    """``loss.backward()`` without passing through a ``TorchFunctionMode`` handler.

    A mode's handler runs with the mode popped, so a backward entered through ``CudaSemantics`` would
    recompute checkpointed layers without it; this is what ``torch.autograd.backward`` does after its
    torch-function dispatch (torch/autograd/__init__.py).
    """
    from torch.autograd.graph import _engine_run_backward

    grads = (torch.ones_like(loss, memory_format=torch.preserve_format),)
    _engine_run_backward((loss,), grads, False, False, (), allow_unreachable=True, accumulate_grad=True)


def _record_grads(tracker: LiveTracker, params: list[torch.nn.Parameter]) -> None:
    for p in params:
        if p.grad is not None:
            sid = tracker.sid_of(p.grad)
            if sid is not None:
                tracker.trace.grad_sids.add(sid)


def mark_forward(tracker: LiveTracker, workspaces: list[int] | None, it: int, mb: int,
                 progress: Callable[[str], None] | None) -> str:
    """Marks micro-batch ``mb`` of iteration ``it`` entering its forward (with the forward thread's workspace on
    the first); returns the micro-batch's tag."""
    tag = f"it{it}.mb{mb}"
    if progress:
        progress(f"{tag} forward")
    tracker.mark(f"{tag}.{StepPhase.FORWARD.trace_mark}")
    tracker.in_logits = False
    if it == 1 and mb == 1:
        _workspace(tracker, workspaces, "forward thread")
    return tag


def mark_backward(tracker: LiveTracker, workspaces: list[int] | None, tag: str,
                  progress: Callable[[str], None] | None) -> None:
    """Marks the micro-batch ``tag`` entering its backward (with the autograd thread's workspace on the first)."""
    if progress:
        progress(f"{tag} backward")
    tracker.mark(f"{tag}.{StepPhase.BACKWARD.trace_mark}")
    tracker.in_logits = False
    tracker.in_backward = True
    if tag == "it1.mb1":
        _workspace(tracker, workspaces, "autograd thread")

def _carried_outputs(scenario: Scenario) -> list | None:
    """The loop's ``outputs`` where it carries them into the next forward (``keeps_outputs`` under a profile whose
    ``loop_carry`` is OUTPUTS: meta-llama/llama-recipes@1e0f8a1f utils/train_utils.py l. 88-89 ``outputs =
    model(**batch)``, rebound only once the next forward has returned); None where the step drops them."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.profile_enums import LoopCarry

    keeps = scenario.keeps_outputs and scenario_profile(scenario).loop_carry is LoopCarry.OUTPUTS
    return [] if keeps else None


def _forward_loss(built: BuiltModel, scenario: Scenario, ids: torch.Tensor, labels: torch.Tensor,
                  pixels: dict | None = None, carry: list | None = None) -> torch.Tensor:
    from vramfit.sim.label_mask import keep_labels
    from vramfit.sim.titan_loss import runs_titan_chunked_loss, titan_step_loss

    if runs_titan_chunked_loss(scenario) and not pixels:  # torchtitan 0.3's ChunkedLossWrapper (sim/titan_loss.py)
        return titan_step_loss(built, ids, labels)
    labels, keep = keep_labels(scenario, labels)  # logits at the label positions only (sim/label_mask.py)
    if scenario.loss is Loss.STANDARD or pixels:
        out = _library_forward(built.model, input_ids=ids, labels=labels, **keep, **(pixels or {}))
        loss = out.loss
        if carry is not None:  # the previous outputs die now, these live into the next forward (_carried_outputs)
            carry[:] = [out]
        del out  # Trainer.compute_loss keeps only the loss: the logits are freed before backward
        return loss
    from vramfit.sim.losses import chunked_or_fused_loss

    return chunked_or_fused_loss(built, scenario, ids, labels, keep.get("logits_to_keep"))


def _evaluate(built: BuiltModel, scenario: Scenario, tracker: LiveTracker, device: str) -> None:
    """An evaluation pass after the optimizer steps (scenario ``eval_batch_size``, estimate/evaluation.py): the HF
    Trainer's ``evaluation_loop`` puts the model in eval mode and ``prediction_step`` runs ``compute_loss`` under
    ``torch.no_grad()`` (transformers v4.51.3 trainer.py); the model's own loss, as Liger's patched forward runs
    outside training (Liger-Kernel v0.5.8 transformers/model/qwen2.py ``lce_forward``: ``if self.training``)."""
    tracker.mark(StepPhase.EVALUATE.trace_mark)
    tracker.in_logits = False
    from vramfit.sim.label_mask import keep_labels

    ids, labels, _ = images.batch(None, built.vocab_size, scenario.eval_batch_size, scenario.seq_len,
                                  images.FED_DTYPE, device)
    labels, keep = keep_labels(scenario, labels)  # ms-swift builds its mask for evaluation too
    built.model.eval()
    with torch.no_grad(), _autocast(built, device):
        out = _library_forward(built.model, input_ids=ids, labels=labels, **keep)
        del out
    built.model.train()


def _library_forward(model, **inputs):
    """The model's own forward; an AttributeError raised inside transformers or peft on a valid config is the
    library's (the same happens on a GPU), told in one line instead of a traceback. Known cases: transformers
    v5.24.0 models/llama4/modeling_llama4.py Llama4ForConditionalGeneration.forward reads
    ``outputs.image_outputs``, which its language model's output never has; peft 0.21.2 tuners/lora/layer.py
    (l. 1089) reads ``result.dtype`` on Llama4Router, an nn.Linear whose forward returns a tuple."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    try:
        return model(**inputs)
    except DataDependentOutputException as exc:  # e.g. transformers' Phi-3.5-MoE longrope: `if ... and seq_len:`
        raise ModelError(f"fake tensors cannot run {type(model).__name__}'s forward on this config: it branches on "
                         f"a tensor's value ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}), which a "
                         "simulation without data cannot know; estimate it, or measure it on a GPU") from exc
    except AttributeError as exc:
        import peft
        import transformers

        raise ModelError(f"transformers {transformers.__version__} / peft {peft.__version__} cannot run "
                         f"{type(model).__name__}'s forward on this config ({exc}); the library fails the same "
                         "way on a GPU, so there is nothing to simulate") from exc


@contextlib.contextmanager
def _autocast(built: BuiltModel, device: str) -> Iterator[None]:
    if built.autocast_dtype is None:
        yield
        return
    dev = torch.device(device).type
    with torch.autocast(dev, dtype=built.autocast_dtype):
        yield


@contextlib.contextmanager
def _cuda_semantics(fake: bool, autocast: bool, assumptions: list[str], flash: bool = True) -> Iterator[None]:
    if not fake:
        yield
        return
    from vramfit.sim.cuda_emulation import (
        CudaSemantics,
        cuda_autocast_query,
        cuda_dropout,
        cuda_sdpa_patch,
        patched,
    )

    backends: dict[str, int] = {}
    drops: dict[str, int] = {}
    with cuda_sdpa_patch(backends, flash), patched(cuda_dropout(drops) + (cuda_autocast_query() if autocast else [])), \
            (CudaSemantics() if autocast else contextlib.nullcontext()):
        yield
    if backends:
        ran = ", ".join(f"{k} ({v} calls)" for k, v in sorted(backends.items()))
        card = "sm80+" if flash else "a card without flash, below sm80"
        assumptions.append(f"SDPA backends as CUDA ({card}) would pick them: {ran}.")
    if drops:
        assumptions.append(f"Training dropout as CUDA runs it: ATen's fused native_dropout, a bool mask kept for "
                           f"backward ({drops['native_dropout']} calls).")


@contextlib.contextmanager
def _transformers_as_on_cuda(fake: bool) -> Iterator[None]:
    """Two transformers decisions that read tensor values or the device, made as for real CUDA data.

    - ``masking_utils.find_packed_sequence_indices``: for fake tensors transformers cannot read the
      position ids, assumes packed sequences and builds a 4-D mask; the simulated batch is one unpadded,
      unpacked sequence per row (positions 0..seq_len-1), for which it returns ``None`` and SDPA runs
      with ``is_causal`` and no mask.
    - ``masking_utils._ignore_bidirectional_mask_sdpa``: a vision tower's padding mask made a fake-tensor
      constant (Idefics3 / SmolVLM's pixel mask, sim/images.py) is read by its value, as transformers reads
      a CUDA tensor's; otherwise ``is_tracing`` (true for any fake tensor) keeps an all-true mask, which
      SDPA turns into a float bias the efficient kernel saves, where CUDA runs no mask.
    - MoE experts: on CUDA (sm80+) transformers calls ``F.grouped_mm`` for every expert dtype
      (integrations/moe.py ``_can_use_grouped_mm``); the op's fake kernel takes bf16 only, so fp32 expert
      weights (``-mixed``, QLoRA's fp32 cast) run :func:`~vramfit.sim.cuda_emulation.grouped_mm_as_on_cuda`,
      which keeps the op's autograd (no input saved, no weight gradient made for frozen experts).
    """
    import sys

    from vramfit.sim.cuda_emulation import grouped_mm_as_on_cuda, patched

    patches = []
    if fake:
        masking = sys.modules.get("transformers.masking_utils")
        if masking is not None and hasattr(masking, "find_packed_sequence_indices"):
            patches.append((masking, "find_packed_sequence_indices", lambda position_ids: None))
        if masking is not None and hasattr(masking, "_ignore_bidirectional_mask_sdpa"):
            patches.append((masking, "_ignore_bidirectional_mask_sdpa",
                            _mask_read_by_value(masking._ignore_bidirectional_mask_sdpa)))
        # a vision-language model checks that its placeholder count matches the image features by
        # reading values (torch_compilable_check); the simulated batch places exactly that many
        for name, mod in list(sys.modules.items()):
            if name.startswith("transformers.models.") and hasattr(mod, "torch_compilable_check"):
                patches.append((mod, "torch_compilable_check", lambda *args, **kwargs: None))
        moe = sys.modules.get("transformers.integrations.moe")
        if moe is not None and hasattr(moe, "_grouped_mm"):
            patches.append((moe, "_grouped_mm", grouped_mm_as_on_cuda))

    with patched(patches):
        yield


def _mask_read_by_value(original: Callable[..., bool]) -> Callable[..., bool]:
    """``_ignore_bidirectional_mask_sdpa`` deciding on a constant fake mask's real value (see above)."""

    def ignore(padding_mask: Any, *args: Any, **kwargs: Any) -> bool:
        constant = getattr(padding_mask, "constant", None)
        return original(padding_mask if constant is None else constant, *args, **kwargs)

    return ignore


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks, in order (transformers' ``GradientCheckpointingLayer`` subclasses)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def _count_params(built: BuiltModel) -> tuple[int, int]:
    from vramfit.sim.count import count_parameters

    return count_parameters(built.model)
