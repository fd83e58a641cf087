"""HF Trainer + DeepSpeed ZeRO on fake tensors: the real ``deepspeed.initialize`` engine, rank 0 of ``num_gpus``.

DeepSpeed (tested with 0.19.8) runs on its CPU accelerator (``DS_ACCELERATOR=cpu``) over PyTorch's fake
process group (:func:`vramfit.sim.fsdp.fake_process_group`), with every parameter, gradient, flat buffer
and optimizer state a fake tensor that the tracker books. What runs is DeepSpeed's own code: ZeRO-1/2
flattening the 16-bit parameters and copying this rank's fp32 partition (``stage_1_and_2.py``), the IPG
gradient buckets of ``reduce_bucket_size`` (two with ``overlap_comm``), ZeRO-3's parameter partitioning,
gather/release under ``stage3_max_live_parameters`` with the prefetch bucket and persistence threshold
(``stage3.py``, ``partitioned_param_coordinator.py``), and the step's fp32 gradient partitions. The HF
Trainer side follows transformers 5.24.0 ``integrations/deepspeed.py``: the config's "auto" values as
``trainer_config_finalize`` fills them (here through :func:`vramfit.estimate.deepspeed.resolve`), the
Trainer's own optimizer passed to the engine when the config has no ``optimizer`` section
(``deepspeed_optim_sched``), no autocast (accelerate 1.15.0 accelerator.py leaves ``native_amp`` off for
``DistributedType.DEEPSPEED``; the engine casts the module to bf16/fp16 itself), and per micro-batch
``engine.backward(loss)`` then ``engine.step()`` (accelerate ``DeepSpeedEngineWrapper.backward``).

The GPU is the fake device ``cpu:0`` and the host plain ``cpu`` (:data:`GPU`, :func:`gpu_labelled_accelerator`):
fake tensors keep the index, so ZeRO-Offload's host tensors (``offload_optimizer``: fp32 partitions, their
gradients and the optimizer states; ``offload_param``: the 16-bit partitions) are host memory in the trace, and
its copies between the two are real copies. The Trainer's AdamW steps the host partitions
(``zero_force_ds_cpu_optimizer: false``, runtime/engine.py ``_configure_optimizer``): DeepSpeedCPUAdam, which the
HF configs' ``optimizer`` section selects, is a compiled kernel that reads real memory; it updates the same host
tensors in place, so the GPU figures are the same. ZeRO++ hpZ passes ``zero_hpz_partition_size`` (the GPUs of a
node); its secondary group is a sub-group of the fake process group.

Four things DeepSpeed does that a one-process fake run cannot, each replaced with what a real run does:

- ``.item()`` on a fake tensor has no value (``aten._local_scalar_dense``): :class:`ScalarValues` answers
  "no overflow" (bool/int flags: ``has_overflow``, ``is_invalid_grad_norm``) and 1.0 for floats (the
  optimizer step count, the grad norm): a step that is taken, as in a run without overflow.
- ``DeepSpeedEngine`` moves the module with ``module.to(device)``, which for fake parameters always goes
  through ``torch.utils.swap_tensors`` and fails on their weak references; the model is put on the GPU before, so it
  gets ``dont_change_device=True`` (its own constructor argument). As the HF Trainer leaves the model on the host
  under DeepSpeed (transformers 5.24.0 trainer.py ``place_model_on_device`` is False with ``is_deepspeed_enabled``),
  the engine casts the parameters there and only their 16-bit copies reach the GPU (engine.py
  ``_configure_distributed_model``: ``_cast_module_mixed_precision``, then ``self.module.to(self.device)``); the
  simulator makes the same cast on the meta model (:func:`engine_cast`), then materialises it on the GPU.
- ZeRO-3's ``assert_ints_same_as_other_ranks`` checks that ranks agree on the module order by
  broadcasting from rank 0 and reading the values back; on one process rank 0 compares with itself.
- The CPU accelerator's shared-memory collective kernel (``build_shm_op``) is compiled at backend
  start; the fake process group never calls it.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vramfit.choices import Framework, Loss, Offload, Parallelism, Precision, ShardScope
from vramfit.errors import ScenarioError
from vramfit.scenario import Scenario

STAGES = {Parallelism.ZERO1: 1, Parallelism.ZERO2: 2, Parallelism.ZERO3: 3}
#: the engine holds the module in bf16/fp16 with an fp32 master partition for "-true" and "-mixed" alike (HF
#: TrainingArguments bf16/fp16 -> the config's "bf16"/"fp16" "auto"): both precisions run the same engine
_BF16 = (Precision.BF16_MIXED, Precision.BF16_TRUE)
_FP16 = (Precision.FP16_MIXED, Precision.FP16_TRUE)
#: the HF docs' offload sections (transformers 5.24.0 docs/source/en/deepspeed.md ZeRO-2/ZeRO-3 examples)
OFFLOAD = {"device": "cpu", "pin_memory": True}
MAX_GRAD_NORM = 1.0  # HF TrainingArguments.max_grad_norm default -> DeepSpeed "gradient_clipping" ("auto")


def check(sc: Scenario) -> None:
    """What the DeepSpeed path of the simulator runs; one line naming the field otherwise."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        raise ScenarioError("parallelism", f"simulating {sc.parallelism.value} runs DeepSpeed itself: install it "
                            "(pip install 'vramfit[export]'), or simulate without ZeRO", ["none", "fsdp"])
    if sc.framework is not Framework.HF:
        raise ScenarioError("framework", "the simulator runs DeepSpeed ZeRO under the HF Trainer", ["hf"])
    if sc.optimizer_in_backward:
        raise ScenarioError("optimizer_in_backward", "DeepSpeed steps its own optimizer after backward", ["false"])


def ds_config(sc: Scenario, hidden_size: int) -> dict[str, Any]:
    """The DeepSpeed config the engine gets: the scenario's zero_optimization keys with "auto" resolved as
    the HF Trainer resolves them (the same :func:`vramfit.estimate.deepspeed.resolve` the estimator uses)."""
    from vramfit.estimate.deepspeed import resolve

    stage = STAGES[sc.parallelism]
    z = resolve(sc.deepspeed_config, hidden_size, stage)
    zero = {"stage": stage, "reduce_bucket_size": z.reduce_bucket_size,
            "allgather_bucket_size": z.allgather_bucket_size, "overlap_comm": z.overlap_comm,
            "contiguous_gradients": z.contiguous_gradients, "sub_group_size": z.sub_group_size,
            "stage3_prefetch_bucket_size": z.prefetch_bucket_size,
            "stage3_param_persistence_threshold": z.persistence_threshold,
            "stage3_max_live_parameters": z.max_live_parameters,
            "stage3_max_reuse_distance": z.max_reuse_distance,
            "memory_efficient_linear": z.memory_efficient_linear}
    if sc.offload is not Offload.NONE:
        zero["offload_optimizer"] = dict(OFFLOAD)
    if sc.offload is Offload.OPTIMIZER_PARAMS:
        zero["offload_param"] = dict(OFFLOAD)
    if sc.shard_scope is ShardScope.NODE:  # ZeRO++ hpZ: a secondary weight partition inside each node
        zero["zero_hpz_partition_size"] = sc.gpus_per_node
    return {"train_micro_batch_size_per_gpu": sc.micro_batch_size, "gradient_accumulation_steps": sc.grad_accum,
            "train_batch_size": sc.micro_batch_size * sc.grad_accum * sc.num_gpus,
            "gradient_clipping": MAX_GRAD_NORM, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
            "zero_force_ds_cpu_optimizer": False,
            "bf16": {"enabled": sc.precision in _BF16}, "fp16": {"enabled": sc.precision in _FP16}}


class ScalarValues(TorchDispatchMode):
    """``.item()`` of a fake tensor: no overflow / valid norm for flags, 1.0 for floats (module docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func is torch.ops.aten._local_scalar_dense.default:
            t = args[0]
            if t.dtype == torch.bool:
                return False
            return 1.0 if t.is_floating_point() else 0
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def deepspeed_on_fake_pg(world_size: int, on_empty_cache: Callable[[], None] | None = None) -> Iterator[Any]:
    """Import DeepSpeed on its CPU accelerator over a fake process group, with the module docstring's patches;
    ``on_empty_cache``: called where the engine empties the cache (:func:`gpu_labelled_accelerator`)."""
    from vramfit.sim.cuda_emulation import patched
    from vramfit.sim.fsdp import fake_process_group

    env = {"DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import importlib

        import deepspeed
        import deepspeed.runtime.zero.partitioned_param_coordinator as coordinator

        ds_comm = importlib.import_module("deepspeed.comm.torch")  # deepspeed.comm.torch the attribute is torch

        class Engine(deepspeed.DeepSpeedEngine):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["dont_change_device"] = True
                super().__init__(*args, **kwargs)

        with fake_process_group(world_size), gpu_labelled_accelerator(on_empty_cache), patched([
            (ds_comm, "build_shm_op", lambda: None), (deepspeed, "DeepSpeedEngine", Engine),
            (coordinator, "assert_ints_same_as_other_ranks", lambda ints: None),
            # ZeRO-3 replaces torch.nn.functional.linear with zero3_linear_wrap for the rest of the process
            # (deepspeed 0.19.8 runtime/zero/partition_parameters.py l. 419); it stays in place during this run,
            # as on a GPU, and the original is put back after it so that a next simulation runs plain torch
            (torch.nn.functional, "linear", torch.nn.functional.linear),
        ]):
            try:
                yield deepspeed
            finally:  # DeepSpeed's own teardown of its group cache and backend, so that a next run starts clean
                from deepspeed.utils import groups

                groups._release_process_group_references(group=None)
                importlib.import_module("deepspeed.comm.comm").cdb = None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: the device of the fake tensors that stand for GPU memory; host memory (offload, CPU scalars) is plain "cpu".
#: Fake tensors keep the index: ``cpu:0`` and ``cpu`` are two devices (an op mixing them fails as on a GPU, ``.to()``
#: between them copies), so the tracker counts what lives on ``cpu`` as host memory.
GPU = torch.device("cpu", 0)
HOST = torch.device("cpu")
ROOMY_CARD = 1 << 50  # bytes of free accelerator memory the engine sees: more than any model here


@contextlib.contextmanager
def gpu_labelled_accelerator(on_empty_cache: Callable[[], None] | None = None) -> Iterator[None]:
    """DeepSpeed's CPU accelerator with its current device named ``cpu:0``: ZeRO puts what a GPU holds on
    ``get_accelerator().current_device_name()`` and what it offloads on ``"cpu"`` (DeepSpeed 0.19.8
    stage_1_and_2.py ``self.device = get_accelerator().current_device_name() if not self.cpu_offload else 'cpu'``,
    stage3.py the same with ``OffloadDeviceEnum.cpu``); with the two names apart the run keeps both devices.

    ``empty_cache`` is the CUDA accelerator's ``torch.cuda.empty_cache()`` (DeepSpeed 0.19.8
    accelerator/cuda_accelerator.py l. 138), a no-op on the CPU accelerator (cpu_accelerator.py l. 137): here it calls
    ``on_empty_cache`` (the tracker logs it, sim/trace.py ``LiveTracker.empty_cache``), so the allocator replay
    returns the cached segments a GPU returns where the engine calls it: ZeRO-3's ``defragment`` (runtime/zero/
    utils.py l. 234), ZeRO-1/2's ``empty_cache()`` before flattening each group (stage_1_and_2.py l. 449)."""
    from deepspeed.accelerator import real_accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    class GpuLabelled(CPU_Accelerator):
        def device_name(self, device_index: int | None = None) -> str:
            return str(GPU)  # the accelerator's device, as "cuda" names the current GPU

        def current_device_name(self) -> str:
            return str(GPU)

        def current_device(self) -> int:
            return 0

        def on_accelerator(self, tensor: torch.Tensor) -> bool:
            return tensor.device == GPU

        def available_memory(self, device_index: int | None = None) -> int:
            # the CPU accelerator answers the host's free RAM; a card with room for ZeRO-1/2's flat buffer
            # (stage_1_and_2.py flatten_on_accelerator; estimate/ds_load.py takes the same with no card named)
            return ROOMY_CARD

        def empty_cache(self) -> None:
            if on_empty_cache is not None:
                on_empty_cache()

        def stream(self, stream: Any) -> Any:
            # a stream context as CUDA's: torch.cpu.stream switches torch.cpu.current_stream(), which the tracker
            # books each allocation under (sim/trace.py streams); the CPU accelerator's own is a no-op
            if isinstance(stream, torch.cpu.Stream):
                return torch.cpu.stream(stream)
            return super().stream(stream)

    saved = real_accelerator.ds_accelerator
    real_accelerator.ds_accelerator = GpuLabelled()
    try:
        yield
    finally:
        real_accelerator.ds_accelerator = saved


def engine_cast(model: torch.nn.Module, sc: Scenario) -> None:
    """The engine's 16-bit cast of the (meta) parameters, buffers left as they are (DeepSpeed 0.19.8 engine.py
    ``_cast_module_mixed_precision``: ``p.data = p.data.to(param_dtype)`` for floating parameters; buffers only
    with a ``buffer_dtype``, unset by default)."""
    dtype = torch.bfloat16 if sc.precision in _BF16 else (torch.float16 if sc.precision in _FP16 else None)
    if dtype is None:
        return
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)


def initialize(deepspeed: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, config: dict) -> Any:
    """``deepspeed.initialize`` as the HF Trainer calls it with its own optimizer; returns the engine."""
    engine, _opt, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config,
                                              dist_init_required=False)
    return engine


def zero_state_tensors(engine: Any) -> list[torch.Tensor]:
    """The fp32 master partitions and the wrapped optimizer's states (``optimizer_state`` in the result)."""
    from vramfit.sim.optim import optimizer_state_tensors

    zopt = engine.optimizer
    out = list(optimizer_state_tensors(zopt.optimizer))
    for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
        out.extend(t for t in getattr(zopt, name, None) or () if isinstance(t, torch.Tensor))
    return out


def zero_grad_tensors(engine: Any) -> list[torch.Tensor]:
    """The 16-bit gradient buffers ZeRO keeps (``gradients`` in the result): ZeRO-1/2's partition of reduced
    gradients (stage_1_and_2.py ``grads_in_partition``), ZeRO-3's flat partitioned-gradient buffer (stage3.py
    ``grad_partitions_flat_buffer``), and the IPG bucket buffers both fill during backward (``ipg_buckets``)."""
    zopt = engine.optimizer
    out = [getattr(zopt, name, None) for name in ("grads_in_partition", "grad_partitions_flat_buffer")]
    for bucket in (getattr(zopt, "ipg_buckets", None) or {}).values():
        buf = getattr(bucket, "buffer", None)  # a list of buffers (ZeRO-1/2) or one tensor (ZeRO-3)
        out.extend(buf if isinstance(buf, list) else [buf])
    return [t for t in out if isinstance(t, torch.Tensor)]


def assumptions(sc: Scenario, config: dict) -> list[str]:
    z = config["zero_optimization"]
    keys = ", ".join(f"{k}={v}" for k, v in z.items() if k != "stage")
    return [f"DeepSpeed ZeRO-{z['stage']} engine (deepspeed.initialize, DeepSpeed's own code on its CPU accelerator) "
            f"over {sc.num_gpus} ranks on a fake process group; figures are rank 0's. zero_optimization: {keys}.",
            "HF Trainer under DeepSpeed: no autocast (the engine holds the module in the 16-bit dtype), the "
            "Trainer's optimizer handed to the engine, engine.backward + engine.step per micro-batch, "
            "gradient_clipping=1.0.",
            "Fake-tensor run: .item() answers no overflow and a finite grad norm; ZeRO-3's cross-rank order "
            "checks are skipped (one process).",
            *(["CPU offload: the offloaded tensors are host memory, not in the GPU figures; the Trainer's AdamW steps "
               "them on the host (zero_force_ds_cpu_optimizer=false) where DeepSpeedCPUAdam would, in place."]
              if sc.offload is not Offload.NONE else [])]


def run_deepspeed(built: Any, sc: Scenario, progress: Callable[[str], None] | None = None,
                  workspaces: list[int] | None = None) -> Any:
    """Materialise ``built`` on fake CPU tensors, hand it to the DeepSpeed engine and trace ``ITERATIONS``
    optimizer steps of ``grad_accum`` micro-batches; returns a :class:`vramfit.sim.run.StepResult`."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vramfit.estimate.phases import StepPhase
    from vramfit.sim.build import materialize
    from vramfit.sim.optim import make_optimizer
    from vramfit.sim.run import StepResult, _count_params, _register_model
    from vramfit.sim.trace import LiveTracker

    config = ds_config(sc, int(built.model.config.hidden_size))
    engine_cast(built.model, sc)  # on the host, before the engine moves the model (module docstring)
    tracker = LiveTracker()
    with warnings.catch_warnings(), deepspeed_on_fake_pg(sc.num_gpus, tracker.empty_cache) as deepspeed, \
            FakeTensorMode(allow_non_fake_inputs=True), tracker:
        # ZeRO-1/2 asserts each partition's data_ptr() alignment, which torch 2.13 answers for a fake tensor with
        # a deprecation warning (stage_1_and_2.py: partitioned_data.data_ptr() % alignment == 0)
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
        # DeepSpeed 0.19.8 calls the collectives torch 2.13 deprecates (all_gather_into_tensor, reduce_scatter_tensor):
        # the user's own run prints them, the simulation of it need not
        warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning)
        tracker.host_device = HOST
        materialize(built, GPU)
        _register_model(built, tracker)
        optimizer, text = make_optimizer(sc, built.trainable_parameters(), tracker)
        with ScalarValues():
            engine = initialize(deepspeed, built.model, optimizer, config)
        side_reduction_stream(engine)
        _book_parameters(built.model, tracker)
        try:
            _ds_loop(engine, built, sc, tracker, progress, workspaces, StepPhase)
        finally:
            tracker.close()
        num_params, num_trainable = _count_params(built)
    return StepResult(tracker.trace, num_params, num_trainable, [text, *assumptions(sc, config)])


def side_reduction_stream(engine: Any) -> None:
    """ZeRO-1/2's reduction stream as on a GPU: DeepSpeed 0.19.8 stage_1_and_2.py l. 599 makes it only where the
    accelerator is not a synchronized device (``get_accelerator().Stream()``; the CPU accelerator answers None), and
    with ``overlap_comm`` runs ``copy_grads_in_partition`` under it (``reduce_ipg_grads``), so the partition's
    gradient buffer is that stream's allocation. The CPU accelerator still resolves data dependencies, so no
    ``wait_stream``/``record_stream`` is issued; only the allocation's stream differs."""
    zopt = engine.optimizer
    if getattr(zopt, "overlap_comm", False) and hasattr(zopt, "reduction_stream") and zopt.reduction_stream is None:
        zopt.reduction_stream = torch.cpu.Stream()


def _book_parameters(model: torch.nn.Module, tracker: Any) -> None:
    """Book what the parameters live in after ``initialize`` as parameters: ZeRO-1/2's flat 16-bit buffer (the
    parameters are views of it), ZeRO-3's ``ds_tensor`` partitions (the full ``data`` is empty between uses)."""
    from vramfit.sim.trace import PARAM

    for p in model.parameters():
        for t in (p, getattr(p, "ds_tensor", None)):
            if t is None:
                continue
            for sid in tracker.track(t, PARAM, "parameter"):
                tracker.trace.kinds[sid] = PARAM
                if p.requires_grad:
                    tracker.trace.trainable_sids.add(sid)


def _train_loss(engine: Any, built: Any, sc: Scenario, ids: Any, labels: Any, keep: dict, pixels: Any) -> Any:
    """The training loss through the engine: the model's own, or Liger's fused loss inside the CausalLM's forward,
    which reads ``lm_head.weight`` there (sim/losses.py), as the HF Trainer's use_liger_kernel runs it."""
    if sc.loss is Loss.FUSED and not pixels:
        from vramfit.sim.losses import chunked_or_fused_loss

        return chunked_or_fused_loss(built, sc, ids, labels, keep.get("logits_to_keep"), root=engine)
    return engine(input_ids=ids, labels=labels, **keep, **(pixels or {})).loss


def _ds_loop(engine: Any, built: Any, sc: Scenario, tracker: Any, progress: Callable[[str], None] | None,
             workspaces: list[int] | None, StepPhase: Any) -> None:
    from vramfit.sim import images
    from vramfit.sim.label_mask import keep_labels
    from vramfit.sim.run import (
        ITERATIONS,
        _cuda_semantics,
        _transformers_as_on_cuda,
        decoder_layers,
        mark_backward,
        mark_forward,
    )

    tracker.watch_modules(built.model, built.lm_head)
    tracker.watch_layers(decoder_layers(built.model))
    dtype = torch.bfloat16 if sc.precision in _BF16 else (torch.float16 if sc.precision in _FP16 else torch.float32)
    with _cuda_semantics(True, False, []), _transformers_as_on_cuda(True), ScalarValues():
        for it in range(1, ITERATIONS + 1):
            for mb in range(1, sc.grad_accum + 1):
                tag = mark_forward(tracker, workspaces, it, mb, progress)
                ids, labels, pixels = images.batch(built.images, built.vocab_size, sc.micro_batch_size, sc.seq_len,
                                                   dtype, GPU)
                labels, keep = keep_labels(sc, labels)  # sim/label_mask.py
                loss = _train_loss(engine, built, sc, ids, labels, keep, pixels)
                del ids, labels, pixels
                mark_backward(tracker, workspaces, tag, progress)
                engine.backward(loss)  # the engine divides by gradient_accumulation_steps itself
                del loss
                tracker.in_backward = False
                if mb == sc.grad_accum:
                    tracker.mark(f"it{it}.{StepPhase.OPTIMIZER_STEP.trace_mark}")
                engine.step()  # steps the optimizer only at the accumulation boundary
            for tensors, sids in ((zero_state_tensors(engine), tracker.trace.state_sids),
                                  (zero_grad_tensors(engine), tracker.trace.grad_sids)):
                sids.update(sid for sid in map(tracker.sid_of, tensors) if sid is not None)
        if sc.eval_batch_size:  # an evaluation pass under no_grad, engine in eval mode (sim/run.py _evaluate)
            tracker.mark(StepPhase.EVALUATE.trace_mark)
            tracker.in_logits = False
            ids, labels, _ = images.batch(None, built.vocab_size, sc.eval_batch_size, sc.seq_len, dtype, GPU)
            labels, keep = keep_labels(sc, labels)
            engine.eval()
            with torch.no_grad():
                del engine(input_ids=ids, labels=labels, **keep).loss
            engine.train()
        tracker.mark("end")
