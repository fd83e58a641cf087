"""A live-bytes tracker: every storage allocated and freed while the real training code runs.

:class:`LiveTracker` is a ``TorchDispatchMode``: each aten op's outputs are looked up by their
untyped storage; a storage seen for the first time is an allocation, logged with its size, the phase
(``it1.mb1.forward`` ...), the module running and the op. A ``weakref`` on the storage logs the free
when the last reference dies (PyTorch keeps one Python object per live storage, so the callback fires
exactly when the memory would return to the CUDA caching allocator). The result is a
:class:`Trace`: an ordered event list that :mod:`vramfit.sim.cuda_allocator` replays to get
``max_memory_allocated`` / ``max_memory_reserved`` as the CUDA caching allocator would report them.

Why not ``torch.distributed._tools.mem_tracker.MemTracker``: it rounds only tensors on a CUDA device
(ours are fake CPU tensors), keeps running peaks rather than an event log (so no allocator replay and
no layer extrapolation of phases), and deep-copies a snapshot at every new peak. The approach is the
same (storage weakrefs, ``resize_`` patched for FSDP2, DTensor ops desugared first).

Kernels whose scratch a fake kernel cannot show get *synthetic* allocations from :func:`transient_rules`
(allocated before the op's outputs, freed right after): see
:func:`vramfit.sim.qlora.bnb_gemm_4bit_transient` and :mod:`vramfit.sim.cuda_emulation`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

#: Where an allocation came from (``Trace.kinds``).
PARAM, BUFFER, INPUT, OP, SYNTHETIC = "param", "buffer", "input", "op", "synthetic"


@dataclass
class Trace:
    """Everything allocated in one traced run, in order.

    ``events``: ``sid`` (>= 0) for an allocation, ``~sid`` (< 0) for its free.
    ``marks``: ``(event index, label)``: the phase that starts at that event.
    Per allocation (indexed by ``sid``): requested bytes, kind, phase label, module, op, shape, dtype.
    ``host``: sids that live in host memory (paged optimizer state, offloaded activations).
    ``empty_caches``: event indices before which ``torch.cuda.empty_cache()`` ran (the allocator replay returns
    every wholly free cached segment to the driver there, sim/cuda_allocator.py ``CachingAllocatorModel.empty_cache``).
    """

    nbytes: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    wheres: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)
    empty_caches: list[int] = field(default_factory=list)
    host: set[int] = field(default_factory=set)
    # the stream each sid was allocated on, for sids not on the default stream (FSDP2's reduce-scatter
    # outputs, all-gather buffers): the allocator caches blocks per stream (sim/cuda_allocator.py)
    streams: dict[int, int] = field(default_factory=dict)
    # sids of the tensors that are parameter gradients / optimizer state / trainable params
    grad_sids: set[int] = field(default_factory=set)
    state_sids: set[int] = field(default_factory=set)
    trainable_sids: set[int] = field(default_factory=set)
    quantized_sids: set[int] = field(default_factory=set)
    weight_copy_sids: set[int] = field(default_factory=set)
    logits_sids: set[int] = field(default_factory=set)
    recompute_sids: set[int] = field(default_factory=set)
    workspace_sids: set[int] = field(default_factory=set)
    # (event index, "fwd" | "fwd_end" | "bwd", decoder layer index): where each layer's work starts/ends
    layer_marks: list[tuple[int, str, int]] = field(default_factory=list)
    num_layers: int = 0
    # backward: the autograd node that allocated a sid; add.Tensor results that merge two gradients
    nodes: dict[int, int] = field(default_factory=dict)
    accum: dict[int, int] = field(default_factory=dict)  # out sid -> sid of the gradient already buffered

    def segments(self) -> list[tuple[str, int, int]]:
        """``(label, first event, end event)`` for each marked phase."""
        out = []
        for i, (start, label) in enumerate(self.marks):
            end = self.marks[i + 1][0] if i + 1 < len(self.marks) else len(self.events)
            out.append((label, start, end))
        return out


def _storages(t: torch.Tensor) -> list[tuple[torch.UntypedStorage, torch.Tensor]]:
    """The storages behind ``t`` with the plain tensor owning each (a DTensor's local shard)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        attrs, _ = t.__tensor_flatten__()
        out: list[tuple[torch.UntypedStorage, torch.Tensor]] = []
        for a in attrs:
            inner = getattr(t, a)
            if isinstance(inner, torch.Tensor):
                out.extend(_storages(inner))
        return out
    if t.layout is not torch.strided or t.device.type == "meta":  # meta tensors hold no memory (DeepSpeed's
        return []  # ZeRO-1/2 keeps meta copies of its parameters: stage_1_and_2.py round_robin_bit16_meta)
    return [(t.untyped_storage(), t)]


class LiveTracker(TorchDispatchMode):
    """Log storage allocations and frees of the ops run under it (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.trace = Trace()
        self._sid: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: dict[int, weakref.ref] = {}
        self.phase = "setup"
        self.where_stack: list[str] = []
        self.in_logits = False
        self.in_backward = False
        self.host_mode = False  # allocations made now live in host memory
        # the device whose tensors are host memory when the GPU is another device (the DeepSpeed run:
        # sim/deepspeed_zero.py GPU); None: every tensor is device memory
        self.host_device: torch.device | None = None
        self._module_names: dict[int, str] = {}
        self._hook_handles: list[Any] = []
        self._orig_resize: Callable | None = None
        self._fake_mode_on_entry: Any = None
        self._rules = transient_rules()
        self.paused = 0
        from vramfit.sim.inplace import node_id, note_accumulation

        self._node_id, self._note_accumulation = node_id, note_accumulation
        self._restore: list[tuple[Any, str, Any]] = []
        # FSDP2 on the fake process group runs on CPU device handles: torch.cpu.stream() switches
        # torch.cpu.current_stream() as torch.cuda.stream() would on a GPU
        self._default_stream = torch.cpu.current_stream()
        self._stream_ids: dict[int, int] = {}

    # ---------------------------------------------------------------- registration
    def track(self, t: torch.Tensor, kind: str = OP, op: str = "", host: bool = False) -> list[int]:
        """Register the storages of ``t`` (no-op for storages already seen); return their sids."""
        sids = []
        for st, owner in _storages(t):
            sid = self._sid.get(st)
            if sid is None:
                sid = self._new(st.nbytes(), kind, op, tuple(owner.shape), str(owner.dtype).replace("torch.", ""))
                self._sid[st] = sid
                self._refs[sid] = weakref.ref(st, self._freer(sid))
                if host or self.host_mode or owner.device == self.host_device:
                    self.trace.host.add(sid)
            sids.append(sid)
        return sids

    def _is_param(self, t: Any) -> bool:
        if not isinstance(t, torch.Tensor):
            return False
        sid = self.sid_of(t)
        return sid is not None and self.trace.kinds[sid] == PARAM

    def sid_of(self, t: torch.Tensor) -> int | None:
        sts = _storages(t)
        return self._sid.get(sts[0][0]) if sts else None

    def _new(self, nbytes: int, kind: str, op: str, shape: tuple[int, ...], dtype: str) -> int:
        tr = self.trace
        sid = len(tr.nbytes)
        tr.nbytes.append(int(nbytes))
        tr.kinds.append(kind)
        recompute = self.in_backward and torch.is_grad_enabled()
        if self.in_backward and not recompute and self.where_stack:
            # backward runs with grad mode off; a checkpoint recompute with it on. A recompute that stops
            # early (non-reentrant checkpoint) never runs its modules' forward post-hooks.
            self.where_stack.clear()
        tr.phases.append(self.phase)
        tr.wheres.append(self.where_stack[-1] if self.where_stack else "")
        tr.ops.append(op)
        tr.shapes.append(shape)
        tr.dtypes.append(dtype)
        tr.events.append(sid)
        stream = torch.cpu.current_stream()
        if stream is not self._default_stream:
            tr.streams[sid] = self._stream_ids.setdefault(id(stream), len(self._stream_ids) + 1)
        if self.in_logits and kind in (OP, SYNTHETIC):
            tr.logits_sids.add(sid)
        if self.in_backward and kind == OP:
            if recompute:
                tr.recompute_sids.add(sid)
            else:
                tr.nodes[sid] = self._node_id()
        return sid

    def _freer(self, sid: int) -> Callable[[Any], None]:
        def free(_ref: Any) -> None:
            self.trace.events.append(~sid)
            self._refs.pop(sid, None)

        return free

    def synthetic(self, nbytes: int, op: str, shape: tuple[int, ...], dtype: str) -> int:
        """Log an allocation no tensor stands for (a kernel's scratch); free it with :meth:`release`."""
        return self._new(nbytes, SYNTHETIC, op, shape, dtype)

    def release(self, sid: int) -> None:
        self.trace.events.append(~sid)

    def empty_cache(self) -> None:
        """Log ``torch.cuda.empty_cache()`` at this point of the run: fake tensors have no allocator to empty, so the
        call is an event the replay honours (:attr:`Trace.empty_caches`)."""
        self.trace.empty_caches.append(len(self.trace.events))

    def mark(self, label: str) -> None:
        """Start a new phase: allocations from now on carry ``label``."""
        self.phase = label
        self.where_stack.clear()
        self.trace.marks.append((len(self.trace.events), label))

    # ---------------------------------------------------------------- module labels
    def watch_modules(self, model: torch.nn.Module, lm_head: torch.nn.Module | None = None) -> None:
        """Label allocations with the running module; flag those made from ``lm_head`` on as logits."""
        for name, mod in model.named_modules():
            self._module_names[id(mod)] = _short_name(name)
        names = self._module_names

        def pre(mod: torch.nn.Module, _args: Any) -> None:
            name = names.get(id(mod))
            if name is not None:
                self.where_stack.append(name)

        def post(mod: torch.nn.Module, _args: Any, _out: Any) -> None:
            if id(mod) in names and self.where_stack:
                self.where_stack.pop()

        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self._hook_handles += [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
        if lm_head is not None:
            def head(_mod: torch.nn.Module, _args: Any) -> None:
                self.in_logits = True

            self._hook_handles.append(lm_head.register_forward_pre_hook(head))

    def watch_layers(self, layers: list[torch.nn.Module]) -> None:
        """Mark where each decoder layer's forward starts and ends and where its backward starts.

        The backward mark is a hook on the layer's output tensor: it fires when the gradient of that
        output is complete, i.e. when the layer's own backward begins. Checkpoint recomputes (in
        backward) set no marks.
        """
        tr = self.trace
        tr.num_layers = len(layers)

        def pre(idx: int) -> Callable[..., None]:
            def hook(_mod: torch.nn.Module, _args: Any) -> None:
                if not self.in_backward:
                    tr.layer_marks.append((len(tr.events), "fwd", idx))

            return hook

        def post(idx: int) -> Callable[..., None]:
            def hook(_mod: torch.nn.Module, _args: Any, out: Any) -> None:
                if self.in_backward:
                    return
                tr.layer_marks.append((len(tr.events), "fwd_end", idx))
                t = out[0] if isinstance(out, (tuple, list)) else out
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda _g: tr.layer_marks.append((len(tr.events), "bwd", idx)))

            return hook

        for idx, layer in enumerate(layers):
            self._hook_handles += [layer.register_forward_pre_hook(pre(idx)),
                                   layer.register_forward_hook(post(idx))]

    def close(self) -> None:
        for h in self._hook_handles:
            h.remove()
        self._hook_handles.clear()

    # ---------------------------------------------------------------- dispatch
    def __enter__(self) -> LiveTracker:
        from torch._guards import active_fake_mode

        self._fake_mode_on_entry = active_fake_mode()
        self._orig_resize = torch.UntypedStorage.resize_
        orig = self._orig_resize
        tracker = self

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            # FSDP2 frees/re-allocates unsharded parameters by resizing their storage in place
            old = st.nbytes()
            out = orig(st, size)
            sid = tracker._sid.get(st)
            if sid is not None and st.nbytes() != old:
                tracker.release(sid)
                new = tracker._new(st.nbytes(), tracker.trace.kinds[sid], "resize_",
                                   tracker.trace.shapes[sid], tracker.trace.dtypes[sid])
                tracker._sid[st] = new
                tracker._refs[new] = weakref.ref(st, tracker._freer(new))
                tracker._refs.pop(sid, None)
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        self._pause_in_dtensor_propagation()
        return super().__enter__()

    def __exit__(self, *args: Any) -> None:
        if self._orig_resize is not None:
            torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]
        for owner, name, fn in self._restore:
            setattr(owner, name, fn)
        self._restore.clear()
        super().__exit__(*args)

    def _pause_in_dtensor_propagation(self) -> None:
        """DTensor's sharding propagation builds fake copies of its arguments (``gen_fake_args``) in the
        active fake mode to infer output metadata: not memory of the run, so not tracked."""
        import sys

        if "torch.distributed.tensor" not in sys.modules:
            return
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        name = "_propagate_tensor_meta_non_cached"
        orig = getattr(ShardingPropagator, name, None)
        if orig is None:  # pragma: no cover - other torch versions
            return
        tracker = self

        def propagate(*args: Any, **kwargs: Any) -> Any:
            tracker.paused += 1
            try:
                return orig(*args, **kwargs)
            finally:
                tracker.paused -= 1

        setattr(ShardingPropagator, name, propagate)
        self._restore.append((ShardingPropagator, name, orig))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        from torch.distributed.tensor import DTensor

        if any(t is DTensor for t in types):
            return NotImplemented
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        rule = self._rules.get(func)
        scratch = rule(args, kwargs) if rule is not None else ()
        scratch_sids = [self.synthetic(n, f"{func.__name__} scratch: {what}", shape, dtype)
                        for n, what, shape, dtype in scratch]
        if func is torch.ops._c10d_functional.wait_tensor.default and self._fake_mode_on_entry is not None:
            out = args[0]  # the fake kernel returns a new tensor; the real op returns its input
        else:
            out = func(*args, **kwargs)
        from torch._guards import active_fake_mode

        if active_fake_mode() is self._fake_mode_on_entry:
            name = func.__name__
            copy_of_param = func is torch.ops.aten._to_copy.default and self._is_param(args[0])
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    out_sids = self.track(t, OP, name)
                    if copy_of_param:
                        self.trace.weight_copy_sids.update(out_sids)
            if func is torch.ops.aten.add.Tensor and self.in_backward and not torch.is_grad_enabled():
                self._note_accumulation(self, args, out)
        for sid in scratch_sids:
            self.release(sid)
        return out




def _short_name(name: str) -> str:
    for prefix in ("base_model.model.", "_orig_mod."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name or "model"


_RULES: dict[Any, Callable] = {}


def transient_rules() -> dict[Any, Callable]:
    """Op -> scratch rule: CUDA attention backward kernels, bitsandbytes' 4-bit matmul once imported."""
    import sys

    if not _RULES:
        from vramfit.sim.cuda_emulation import scratch_rules

        _RULES.update(scratch_rules())
    if "bitsandbytes" in sys.modules and torch.ops.bitsandbytes.gemm_4bit.default not in _RULES:
        from vramfit.sim.qlora import bnb_gemm_4bit_transient

        _RULES[torch.ops.bitsandbytes.gemm_4bit.default] = bnb_gemm_4bit_transient
    return _RULES
