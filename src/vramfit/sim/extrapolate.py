"""Trace a few decoder layers, extrapolate to the full depth.

Every allocated figure of a training step is affine in the number of identical decoder layers *as
long as it is taken at the same place*: each layer adds the same weights, gradients, optimizer state
and saved activations, and the transients belong to one layer or to the layer-independent head and
tail (embeddings, final norm, logits, loss). A phase's peak, though, can move as the model deepens:
with checkpointing and gradients, backward peaks at the loss for two layers but at the last layer's
backward for forty. So phases are cut into sub-phases at the layer marks (:mod:`vramfit.sim.analyze`):
the head, the tail, and the layers within a window of each end. Under linear drift the maximum over
the middle layers is at the window's edge, so the phase peak at depth ``L`` is the largest of the
sub-phase peaks, each extrapolated as ``f(a) + (f(b) - f(a)) (L - a) / (b - a)``.

Depths: both traces hold whole periods of the layer pattern (``layer_types`` of Gemma 2/3, Qwen MoE's
``decoder_sparse_step``) after any leading special layers (``first_k_dense_replace``), and are deep
enough that the bottom window (the special first layer, the leading layers and one period) and the
top window (the last layer and one period) never reach the other end: ``a >= lead + p + 2``.
Irregular layouts (``mlp_only_layers``, a partial ``max_window_layers``) are traced at full depth.

The caching allocator's reserved bytes are not affine: its fragmentation overhead (reserved -
allocated) jumps with block reuse patterns; the extrapolated reserved peak is the extrapolated
allocated peak plus the larger overhead of the two traces.
``tests/sim/test_sim_extrapolate.py`` checks all of it against full-depth traces per family.
"""

from __future__ import annotations

from vramfit.sim.analyze import Summary
from vramfit.sim.build import hf_config, num_layers_of


def layer_period(config: dict) -> int | None:
    """Length of the repeating layer pattern (1 for uniform stacks), or None when there is none."""
    full = num_layers_of(config)
    if config.get("mlp_only_layers"):
        return None
    if config.get("use_sliding_window") and isinstance(config.get("max_window_layers"), int) \
            and 0 < config["max_window_layers"] < full:
        return None
    period = 1
    types = getattr(hf_config(config), "layer_types", None)  # transformers derives it when absent
    if isinstance(types, (list, tuple)) and types:
        period = _min_period(list(types))
        if period is None:
            return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    step = config.get("decoder_sparse_step") or text.get("interleave_moe_layer_step")  # Llama 4 interleaving
    if isinstance(step, int) and step > 1:
        period = _lcm(period, step)
    return period


def trace_plan(config: dict) -> tuple[tuple[int, ...], tuple[int, int]]:
    """(depths to trace, (bottom window, top window)): two depths, or the full depth alone."""
    full = num_layers_of(config)
    period = layer_period(config)
    if period is None:
        return (full,), (full, full)
    lead = int(config.get("first_k_dense_replace") or 0)
    windows = (lead + 1 + period, period + 1)
    a = lead + period * -(-(period + 2) // period)
    b = a + period
    if b >= full:
        return (full,), (full, full)
    return (a, b), windows


def trace_depths(config: dict) -> tuple[int, ...]:
    """The depths to trace (see :func:`trace_plan`)."""
    return trace_plan(config)[0]


def extrapolate(sa: Summary, a: int, sb: Summary, b: int, depth: int) -> Summary:
    """The summary at ``depth`` layers from summaries at ``a`` and ``b`` layers."""
    t = (depth - a) / (b - a)

    def lin(x: int, y: int) -> int:
        return round(x + (y - x) * t)

    out = Summary()
    for label, peak_b in sb.segment_peaks.items():
        keys = [k for k in sb.sub_peaks if k.startswith(label + "|") and k in sa.sub_peaks]
        if not keys:
            keys = [label]
            cand = {label: lin(sa.segment_peaks.get(label, 0), peak_b)}
        else:
            cand = {k: lin(sa.sub_peaks[k], sb.sub_peaks[k]) for k in keys}
        best = max(keys, key=lambda k: cand[k])
        out.segment_peaks[label] = max(0, cand[best])
        ca, cb = sa.components.get(best, {}), sb.components.get(best, {})
        out.components[label] = {n: lin(ca.get(n, 0), v) for n, v in cb.items()}
        out.top[label] = list(sb.top.get(best, []))
    for key, v in sb.timeline.items():
        phase = sb.timeline_peaks.get(key)
        out.timeline[key] = out.segment_peaks[phase] if phase else max(0, lin(sa.timeline.get(key, 0), v))
    out.timeline_peaks = dict(sb.timeline_peaks)
    overhead = max(sa.reserved - sa.peak_allocated, sb.reserved - sb.peak_allocated, 0)
    out.reserved = out.peak_allocated + overhead
    out.host_peak = max(0, lin(sa.host_peak, sb.host_peak))
    out.peak_phase = max(out.segment_peaks, key=lambda k: out.segment_peaks[k]) if out.segment_peaks else ""
    return out


def _min_period(seq: list) -> int | None:
    n = len(seq)
    for p in range(1, n + 1):
        if all(seq[i] == seq[i % p] for i in range(n)):
            return p if p < n or n == 1 else None
    return None


def _lcm(x: int, y: int) -> int:
    from math import gcd

    return x * y // gcd(x, y)
