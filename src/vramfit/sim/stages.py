"""DPO and GRPO in the simulator: TRL 1.16.0's own loss step, run on fake tensors.

What runs is TRL's code, unbound methods of the real trainer classes on an instance made without
``__init__`` (:func:`_trainer`), whose attributes are set from TRL's own config dataclass exactly as
``__init__`` sets them (dpo_trainer.py:801-818, grpo_trainer.py:811-983):

* DPO: ``DPOTrainer._compute_loss`` (dpo_trainer.py:1285): the policy's forward over the concatenated
  chosen + rejected batch through TRL's fused LM head (``add_fused_lm_head``, trainer/utils.py:1548,
  ``ChunkedLogProbFunction``, kernels/chunked_logprob.py:299), the reference forward under
  ``torch.no_grad`` (the PEFT model with ``use_adapter(model, None)``, i.e. its adapters disabled, or a
  frozen copy for full fine-tuning), and the sigmoid loss;
* GRPO: the scoring pass ``GRPOTrainer._get_per_token_logps_and_entropies`` under ``torch.no_grad``
  in chunks of ``per_device_train_batch_size`` (grpo_trainer.py:2635-2737: old-policy log-probs with
  vLLM, the reference's when beta != 0), then ``GRPOTrainer._compute_loss`` (grpo_trainer.py:3020) per
  micro-batch. Generation is not traced (the scenario's engine is vLLM on other GPUs).

Three things fake CPU tensors cannot do are answered as CUDA would (:class:`_AsOnCuda`): the
Triton tile kernels of the fused head fold each tile in place in registers, so their torch
stand-ins are replaced by no-ops (``_forward_tile``/``_backward_tile``) and ``_addmm_fp32`` takes its
CUDA branch (``addmm(..., out_dtype=float32, out=acc)``); the head scores only the labelled positions
(``_use_triton`` is True on CUDA, trainer/utils.py:1641), whose count the simulator knows from the
batch it builds; and scalar reads (``.item()``, ``bool(tensor)``) answer 1: they feed TRL's logged
metrics and transformers' "is the attention mask all ones" test, which an unpadded batch passes (so
SDPA runs with ``is_causal`` and no mask, as for the SFT step).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vramfit.choices import Generation, Method, Reference, Stage
from vramfit.scenario import Scenario
from vramfit.sim.cuda_emulation import patched

aten = torch.ops.aten
SIMULATED = (Stage.DPO, Stage.GRPO)


class _AsOnCuda(TorchDispatchMode):
    """Scalar reads answer 1; a boolean mask index becomes the integer index CUDA's ``nonzero`` builds,
    of the length the simulator registered for the mask's shape (``true_counts``)."""

    def __init__(self, true_counts: dict[tuple[int, ...], int]) -> None:
        super().__init__()
        self.true_counts = true_counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            t = args[0]
            return True if t.dtype == torch.bool else 1.0 if t.is_floating_point() else 1
        if func is aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1]):
            return func(args[0], self._expand(args[1]))
        return func(*args, **kwargs)

    def _expand(self, indices: list[Any]) -> list[Any]:
        out: list[Any] = []
        for i in indices:
            if i is not None and i.dtype == torch.bool:
                out.extend(self._positions(i))
            else:
                out.append(i)
        return out

    def _positions(self, mask: torch.Tensor) -> list[torch.Tensor]:
        n = self.true_counts.get(tuple(mask.shape))
        if n is None:
            raise RuntimeError(f"the simulator does not know how many positions of a {tuple(mask.shape)} mask are "
                               "set (vramfit.sim.stages)")
        nz = torch.empty((n, mask.dim()), dtype=torch.long, device=mask.device)  # aten.nonzero's output
        return list(nz.unbind(1))


def _no_fold(*_args: Any, **_kwargs: Any) -> None:
    """A Triton tile kernel: updates its accumulators (or the tile) in place, allocates nothing."""


def _addmm_fp32_cuda(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``_addmm_fp32``'s CUDA branch (chunked_logprob.py:61): no fp32 copies of ``a`` and ``b``."""
    if a.dtype in (torch.float16, torch.bfloat16):
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        acc.addmm_(a, b)


class _Accelerator:
    """The accelerate calls the loss step makes, for one process: gathers return their input."""

    num_processes = 1
    is_main_process = True
    device = torch.device("cpu")

    def __init__(self, autocast: Any) -> None:
        self._autocast = autocast

    def autocast(self) -> Any:
        return self._autocast()

    def gather(self, t: Any) -> Any:
        return t

    gather_for_metrics = gather

    def reduce(self, t: Any, reduction: str = "sum") -> Any:
        return t

    def unwrap_model(self, model: Any) -> Any:
        return model


def _config(cls: type, sc: Scenario, **kw: Any) -> Any:
    """TRL's own config dataclass for the scenario (its defaults are TRL's)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(output_dir=tempfile.gettempdir(), report_to=[], bf16=False,
                   per_device_train_batch_size=sc.micro_batch_size, gradient_accumulation_steps=sc.grad_accum, **kw)


@dataclass
class StageRunner:
    """Runs one stage's micro-batch loss (and GRPO's scoring pass) with TRL's code."""

    sc: Scenario
    built: Any
    reference: Any  # the frozen copy (BuiltModel) or None
    autocast: Any  # () -> context manager: the precision's autocast
    trainer: Any = None
    true_counts: dict[tuple[int, ...], int] = field(default_factory=dict)
    scored: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Sequences per micro-batch: DPO concatenates chosen and rejected (dpo_trainer.py:351)."""
        return 2 * self.sc.micro_batch_size if self.sc.stage is Stage.DPO else self.sc.micro_batch_size

    @property
    def has_score_phase(self) -> bool:
        """GRPO scores its completions before training; DPO's reference pass is inside its loss."""
        return self.sc.stage is Stage.GRPO

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        import transformers.masking_utils as masking
        import trl.kernels.chunked_logprob as kernel
        import trl.trainer.utils as utils

        patches = [(kernel, "_forward_tile", _no_fold), (kernel, "_backward_tile", _no_fold),
                   (kernel, "_addmm_fp32", _addmm_fp32_cuda), (utils, "_use_triton", lambda device: True),
                   # transformers reads a fake mask as "tracing" and keeps it; real all-ones masks are dropped
                   # for SDPA's is_causal (masking_utils._ignore_causal_mask_sdpa), as here
                   (masking, "is_tracing", lambda tensor=None: False)]
        with patched(patches), _AsOnCuda(self.true_counts):
            yield

    def score(self, device: str) -> None:
        """GRPO's no_grad scoring of the step's completions (grpo_trainer.py:2635-2737)."""
        if self.sc.stage is not Stage.GRPO:
            return
        from trl.models.utils import disable_gradient_checkpointing
        from trl.trainer.utils import use_adapter

        from vramfit.estimate.stages import has_reference_pass
        from vramfit.estimate.stages.rl import scores_rollouts

        sc, tr = self.sc, self.trainer
        rows = sc.micro_batch_size * sc.grad_accum  # the generation batch (grpo_config.py:521-530)
        ids = torch.randint(0, self.built.vocab_size, (rows, sc.seq_len), device=device)
        mask = torch.ones_like(ids)
        self.scored = {"ids": ids, "mask": mask}
        get = tr._get_per_token_logps_and_entropies
        with torch.no_grad(), disable_gradient_checkpointing(self.built.model, None):
            if scores_rollouts(sc) and sc.generation is not Generation.HF:
                self.scored["old"] = get(self.built.model, ids, mask, sc.completion_len, batch_size=sc.micro_batch_size)[0]
            if has_reference_pass(sc):
                ref = self.reference.model if self.reference is not None else self.built.model
                ctx = use_adapter(ref, None) if self.reference is None else contextlib.nullcontext()
                with ctx:
                    self.scored["ref"] = get(ref, ids, mask, sc.completion_len, batch_size=sc.micro_batch_size)[0]

    def loss(self, ids: torch.Tensor, mb: int) -> torch.Tensor:
        if self.sc.stage is Stage.DPO:
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": torch.ones_like(ids)}
            if self.trainer.precompute_ref_logps:
                B = self.sc.micro_batch_size
                inputs |= {"ref_chosen_logps": torch.zeros(B), "ref_rejected_logps": torch.zeros(B)}
            return self.trainer._compute_loss(self.built.model, inputs, False)
        return self.trainer._compute_loss(self.built.model, self._grpo_inputs(ids, mb))

    def _grpo_inputs(self, ids: torch.Tensor, mb: int) -> dict[str, Any]:
        sc = self.sc
        B, C = sc.micro_batch_size, sc.completion_len
        rows = slice((mb - 1) * B, mb * B)
        inputs: dict[str, Any] = {
            "prompt_ids": ids[:, :-C], "prompt_mask": torch.ones_like(ids[:, :-C]),
            "completion_ids": ids[:, -C:], "completion_mask": torch.ones_like(ids[:, -C:]),
            "advantages": torch.zeros(B), "num_items_in_batch": torch.tensor(float(B * C * sc.grad_accum)),
        }
        if "old" in self.scored:
            inputs["old_per_token_logps"] = self.scored["old"][rows]
            inputs["importance_sampling_ratio"] = torch.ones(B, C)
        if "ref" in self.scored:
            inputs["ref_per_token_logps"] = self.scored["ref"][rows]
        return inputs


def runner_for(sc: Scenario, built: Any, reference: Any, autocast: Any) -> StageRunner | None:
    """The stage runner of a preference/RL scenario (None for SFT); TRL's fused head added to the
    policy (and the copy) as the trainer's ``__init__`` does."""
    if sc.stage is Stage.SFT:
        return None
    from trl.trainer.utils import add_fused_lm_head

    run = StageRunner(sc, built, reference, autocast)
    S = sc.seq_len
    if sc.stage is Stage.DPO:
        run.trainer = _dpo_trainer(sc, built, reference, autocast)
        add_fused_lm_head(built.causal_lm, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
        for rows in (sc.micro_batch_size, 2 * sc.micro_batch_size):  # the batch, and its chosen half (metrics)
            run.true_counts[(rows, S - 1)] = rows * (S - 1)
    else:
        run.trainer = _grpo_trainer(sc, built, reference, autocast)
        add_fused_lm_head(built.causal_lm, outputs=("log_probs", "entropy"))
        run.true_counts[(sc.micro_batch_size, S - 1)] = sc.micro_batch_size * sc.completion_len
    if reference is not None:
        add_fused_lm_head(reference.causal_lm)
    return run


def _dpo_trainer(sc: Scenario, built: Any, reference: Any, autocast: Any) -> Any:
    from trl import DPOConfig, DPOTrainer

    from vramfit.estimate.stages import reference as resolved

    args = _config(DPOConfig, sc, max_length=sc.seq_len, precompute_ref_log_probs=resolved(sc) is Reference.PRECOMPUTED)
    tr = DPOTrainer.__new__(DPOTrainer)
    tr.args, tr.model, tr.accelerator = args, built.model, _Accelerator(autocast)
    tr.ref_model = reference.model if reference is not None else None
    # dpo_trainer.py:801-818, 905, 974
    tr.beta, tr.precompute_ref_logps, tr.loss_types = args.beta, args.precompute_ref_log_probs, args.loss_type
    tr.loss_weights = args.loss_weights or [1.0] * len(tr.loss_types)
    tr.ld_alpha, tr.f_divergence_type = args.ld_alpha, args.f_divergence_type
    tr.f_alpha_divergence_coef, tr.label_smoothing = args.f_alpha_divergence_coef, args.label_smoothing
    tr.use_weighting, tr.aux_loss_enabled, tr._tp_size = args.use_weighting, False, 1
    tr._metrics, tr._total_train_tokens = {"train": _Metrics(), "eval": _Metrics()}, 0
    return tr


def _grpo_trainer(sc: Scenario, built: Any, reference: Any, autocast: Any) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    from vramfit.estimate.stages import has_reference_pass

    use_vllm = sc.generation is not Generation.HF
    args = _config(GRPOConfig, sc, num_generations=sc.num_generations, max_completion_length=sc.completion_len,
                   beta=0.04 if has_reference_pass(sc) else 0.0, use_vllm=use_vllm,
                   **({"vllm_mode": "server" if sc.generation is Generation.VLLM_SERVER else "colocate"}
                      if use_vllm else {}))
    tr = GRPOTrainer.__new__(GRPOTrainer)
    tr.args, tr.model, tr.accelerator = args, built.model, _Accelerator(autocast)
    tr.ref_model = reference.model if reference is not None else None
    # grpo_trainer.py:811-850, 945-983
    tr.use_vllm, tr.loss_type, tr.beta = args.use_vllm, args.loss_type, args.beta
    tr.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    tr.vllm_importance_sampling_mode = args.vllm_importance_sampling_mode
    tr.importance_sampling_level, tr.off_policy_mask_threshold = args.importance_sampling_level, args.off_policy_mask_threshold
    tr.top_entropy_quantile, tr.max_completion_length = args.top_entropy_quantile, args.max_completion_length
    tr.entropy_coef, tr.use_adaptive_entropy = args.entropy_coef, args.use_adaptive_entropy
    tr._entropy_bonus_enabled = tr.entropy_coef != 0.0 or tr.use_adaptive_entropy
    tr.epsilon_low = args.epsilon
    tr.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    tr.aux_loss_enabled, tr.current_gradient_accumulation_steps = False, sc.grad_accum
    tr._metrics = {"train": _Metrics(), "eval": _Metrics()}
    return tr


class _Metrics(dict):
    """``defaultdict(list)`` (the trainers' ``_metrics``)."""

    def __missing__(self, key: str) -> list:
        self[key] = []
        return self[key]


def reference_copy(sc: Scenario) -> bool:
    """A frozen reference copy is built: full fine-tuning with a reference pass."""
    from vramfit.estimate.stages import reference

    return reference(sc) is Reference.COPY


def check(sc: Scenario) -> None:
    """The stages and references the simulator runs; the rest stay estimator-only (one clear error)."""
    from vramfit.errors import ScenarioError
    from vramfit.estimate.stages import reference

    if sc.stage is Stage.SFT:
        return
    if sc.stage not in SIMULATED:
        raise ScenarioError("stage", f"the simulator runs TRL's DPO and GRPO loss steps; {sc.stage.value} is "
                            "estimator-only for now: use `vramfit estimate`", ["sft", "dpo", "grpo"])
    if sc.stage is Stage.GRPO and sc.generation is not Generation.VLLM_SERVER:
        raise ScenarioError("generation", "the simulator traces GRPO's scoring and training on the training GPU; "
                            "rollouts are not traced, so it needs the engine on other GPUs", ["vllm-server"])
    if reference(sc) is Reference.COPY and sc.method is not Method.FULL:
        raise ScenarioError("reference", "a separate reference copy beside LoRA adapters is estimator-only in the "
                            "simulator", ["auto", "adapters-off", "precomputed"])
    if sc.images_per_sample or sc.frames_per_sample:  # its stage batches hold text rows only (the mask's positions)
        raise ScenarioError("images_per_sample", f"the simulator runs {sc.stage.value} on text only; with images it "
                            "is estimator-only", ["0"])
