"""From a trace to figures: allocator replay, phase timeline, components and top tensors at the peak.

A :class:`Summary` holds only numbers keyed by names that do not depend on the number of layers, so
two summaries of the same scenario at two depths can be extrapolated key by key
(:mod:`vramfit.sim.extrapolate`). Forward and backward phases are also cut at the decoder-layer
marks into sub-phases (``head``, ``tail``, and each layer counted from the bottom ``b<d>`` and from
the top ``t<d>``), because a phase's peak can move (from the loss to the last layer's backward, say)
as the model gets deeper, while each sub-phase's own peak stays affine in depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.phases import StepPhase
from vramfit.sim.cuda_allocator import replay
from vramfit.sim.result import SimTensor
from vramfit.sim.trace import BUFFER, PARAM, Trace

#: Component names, in display order (``EstimateResult.components``).
COMPONENTS = (
    "weights", "quantized_base", "adapters", "gradients", "optimizer_state", "autocast_copies",
    "activations", "logits_loss", "temporaries", "workspaces", "allocator_slack",
)
TOP_N = 12


@dataclass
class Summary:
    """Depth-independent keys -> bytes for one trace."""

    timeline: dict[str, int] = field(default_factory=dict)  # ordered: label -> allocated bytes
    timeline_peaks: dict[str, str] = field(default_factory=dict)  # timeline label -> phase whose peak it is
    segment_peaks: dict[str, int] = field(default_factory=dict)  # phase label -> peak allocated
    sub_peaks: dict[str, int] = field(default_factory=dict)  # "phase|head", "phase|b0", "phase|t1" ...
    components: dict[str, dict[str, int]] = field(default_factory=dict)  # phase or sub-phase -> at its peak
    top: dict[str, list[SimTensor]] = field(default_factory=dict)  # phase or sub-phase -> at its peak
    reserved: int = 0
    host_peak: int = 0
    peak_phase: str = ""

    @property
    def peak_allocated(self) -> int:
        return max(self.segment_peaks.values(), default=0)


def classify(trace: Trace, sid: int, full: bool) -> str:
    """The component a live allocation belongs to (see :data:`COMPONENTS`)."""
    kind = trace.kinds[sid]
    if kind in (PARAM, BUFFER):
        if sid in trace.quantized_sids:
            return "quantized_base"
        if sid in trace.trainable_sids and not full:
            return "adapters"
        return "weights"
    if sid in trace.workspace_sids:
        return "workspaces"
    if sid in trace.grad_sids:
        return "gradients"
    if sid in trace.state_sids:
        return "optimizer_state"
    phase = StepPhase.of_trace_label(trace.phases[sid])
    if phase is StepPhase.FORWARD:
        if sid in trace.weight_copy_sids:
            return "autocast_copies"
        if sid in trace.logits_sids:
            return "logits_loss"
        return "activations"
    if phase is StepPhase.BACKWARD and sid in trace.recompute_sids:
        return "activations"
    return "temporaries"


def summarize(trace: Trace, full: bool, windows: tuple[int, int] = (2, 2)) -> Summary:
    """Replay the trace through the caching-allocator model and collect the depth-independent figures.

    ``windows``: how many layers from the bottom and from the top get their own sub-phase key.
    """
    from vramfit.sim.inplace import fold_accumulations

    trace = fold_accumulations(trace)
    allocated, _reserved, stats = replay(trace.events, trace.nbytes, trace.host, trace.streams,
                                        trace.empty_caches)
    s = Summary(reserved=stats.peak_reserved)
    at: dict[str, int] = {}
    for label, start, end in trace.segments():
        peak, idx = _window_peak(allocated, start, end)
        s.segment_peaks[label] = peak
        at[label] = idx
        _timeline(s, label, peak, allocated[end - 1] if end else 0)
        for key, (a, b) in _sub_segments(trace, label, start, end, windows).items():
            s.sub_peaks[key], at[key] = _window_peak(allocated, a, b)
    if s.segment_peaks:
        s.peak_phase = max(s.segment_peaks, key=lambda k: s.segment_peaks[k])
    _snapshots(trace, allocated, at, full, s)
    return s


def _window_peak(allocated: list[int], start: int, end: int) -> tuple[int, int]:
    if end <= start:
        return (allocated[start - 1] if start else 0), max(start - 1, 0)
    window = allocated[start:end]
    peak = max(window)
    return peak, start + window.index(peak)


def _sub_segments(trace: Trace, label: str, start: int, end: int, windows: tuple[int, int]) -> dict[
    str, tuple[int, int]
]:
    """Sub-phases of a forward or backward phase, cut at the layer marks that fall inside it."""
    direction = {StepPhase.FORWARD: "fwd", StepPhase.BACKWARD: "bwd"}.get(StepPhase.of_trace_label(label))
    if direction is None or trace.num_layers == 0:
        return {}
    marks = [(i, kind, k) for i, kind, k in trace.layer_marks if start <= i < end]
    starts = [(i, k) for i, kind, k in marks if kind == direction]
    if not starts:
        return {}
    n, (wb, wt) = trace.num_layers, windows
    out: dict[str, tuple[int, int]] = {f"{label}|head": (start, starts[0][0])}
    ends = {k: i for i, kind, k in marks if kind == "fwd_end"}
    for j, (i, k) in enumerate(starts):
        stop = starts[j + 1][0] if j + 1 < len(starts) else end
        if direction == "fwd" and j + 1 == len(starts) and k in ends:
            stop = ends[k]
            out[f"{label}|tail"] = (stop, end)
        if k < wb:
            out[f"{label}|b{k}"] = (i, stop)
        if n - 1 - k < wt:
            out[f"{label}|t{n - 1 - k}"] = (i, stop)
    return out


_TIMELINE_NAMES = {StepPhase.SCORE: "scoring pass", StepPhase.FORWARD: "forward", StepPhase.BACKWARD: "backward", StepPhase.OPTIMIZER_STEP: "optimizer step"}


def _timeline(s: Summary, label: str, peak: int, after: int) -> None:
    def put(key: str, value: int, peak_of: str | None = None) -> None:
        s.timeline[key] = value
        if peak_of is not None:
            s.timeline_peaks[key] = peak_of

    phase, tag = StepPhase.of_trace_label(label), label.rsplit(".", 1)[0]
    if phase is StepPhase.LOAD:
        put("after model load", after)
    elif phase in _TIMELINE_NAMES:
        name = _TIMELINE_NAMES[phase]
        put(f"{tag} {name} peak", peak, label)
        put(f"{tag} after {name}", after)
    elif phase is StepPhase.ZERO_GRAD:
        put(f"{tag} after zero_grad", after)


def _snapshots(trace: Trace, allocated: list[int], at: dict[str, int], full: bool, s: Summary) -> None:
    wanted: dict[int, list[str]] = {}
    for label, idx in at.items():
        wanted.setdefault(idx, []).append(label)
    live: set[int] = set()
    host_live = 0
    for i, ev in enumerate(trace.events):
        if ev >= 0:
            if ev in trace.host:
                host_live += trace.nbytes[ev]
                s.host_peak = max(s.host_peak, host_live)
            else:
                live.add(ev)
        else:
            sid = ~ev
            if sid in trace.host:
                host_live -= trace.nbytes[sid]
            live.discard(sid)
        if i in wanted:
            comps, top = _breakdown(trace, live, allocated[i], full)
            for label in wanted[i]:
                s.components[label] = comps
                s.top[label] = top


def _breakdown(trace: Trace, live: set[int], allocated: int, full: bool) -> tuple[dict[str, int], list[SimTensor]]:
    comps = dict.fromkeys(COMPONENTS, 0)
    tensors = []
    for sid in live:
        r = round_allocation(trace.nbytes[sid])
        c = classify(trace, sid, full)
        comps[c] += r
        tensors.append((r, sid, c))
    comps["allocator_slack"] = allocated - sum(comps.values())
    tensors.sort(key=lambda x: (-x[0], x[1]))
    top = [SimTensor(r, trace.shapes[sid], trace.dtypes[sid], c, trace.wheres[sid] or trace.phases[sid],
                     trace.ops[sid]) for r, sid, c in tensors[:TOP_N]]
    return comps, top
