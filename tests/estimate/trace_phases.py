"""The live bytes of a traced forward + backward (vramfit.sim.trace.LiveTracker with ``phase`` set to "backward"
before ``loss.backward()``): what stayed saved when backward began and each phase's peak, less the inputs."""

from __future__ import annotations


def saved_and_peaks(trace, inputs: int, merge_inplace_add: bool = False) -> tuple[int, int, int]:
    """(saved at the start of backward, forward peak, backward peak), each less ``inputs`` bytes.
    ``merge_inplace_add``: the gradients ``add.Tensor`` merges are summed in place on CUDA (vramfit/sim/inplace.py)."""
    live, peaks, saved = 0, {"forward": 0, "backward": 0}, None
    for e in trace.events:
        sid = e if e >= 0 else ~e
        size = trace.nbytes[sid]
        if merge_inplace_add and e >= 0 and trace.ops[sid].startswith("add.Tensor"):
            size = 0
        if e >= 0 and trace.phases[sid] == "backward" and saved is None:
            saved = live
        live += size if e >= 0 else -size
        phase = "backward" if saved is not None else "forward"
        peaks[phase] = max(peaks[phase], live)
    return saved - inputs, peaks["forward"] - inputs, peaks["backward"] - inputs
