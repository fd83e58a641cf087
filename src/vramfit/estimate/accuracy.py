"""How far to trust an estimate: the published measurements nearest to its path, and our errors on them.

The path of a scenario is what decides which code ran (framework, method with its training stage, sharding with its
scope, offload, quantization). ``data/accuracy.json`` lists every row of the measured sets in
``benchmarks/data/measured/`` (public.jsonl, found.jsonl, stages.jsonl) with its path and our signed error; it is written by
``python benchmarks/accuracy.py --write-bands`` (tests/benchmarks/test_accuracy_bands.py checks it is up
to date), so an estimate only reads a small file.
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from importlib import resources
from typing import Any

from vramfit.choices import FSDP_FAMILY
from vramfit.scenario import FsdpVersion, Quantize, Scenario, ShardScope, Stage

FIELDS = ("framework", "method", "sharding", "offload", "quantization")
#: Nearness when no case is on the path: a field that swaps more of the code that runs weighs more than
#: all the fields after it together (framework > method > quantization > sharding > offload).
_WEIGHT = {"framework": 16, "method": 8, "quantization": 4, "sharding": 2, "offload": 1}

_QUANT_FAMILY = {
    Quantize.NONE: "none", Quantize.NF4: "bnb-4bit", Quantize.NF4_DQ: "bnb-4bit", Quantize.FP4: "bnb-4bit",
    Quantize.FP4_DQ: "bnb-4bit", Quantize.INT8: "bnb-int8", Quantize.GPTQ_INT4: "gptq",
}


def path_of(sc: Scenario, images: bool | None = None) -> dict[str, str]:
    """The fields that select which code runs; 4-bit bitsandbytes formats share one path; tensor, pipeline and
    context parallel degrees are part of the sharding (``fsdp+tp8+pp2``: no published case runs them yet), and so is
    sharding inside each node (``shard_scope=node``: HSDP or ZeRO++ hpZ, ``fsdp+node``). A training stage other than
    SFT runs another step (a reference model, pairs, generation: estimate/stages): part of the method (``lora+dpo``),
    so a DPO or GRPO estimate is never vouched for by SFT measurements; so are DoRA (``lora+dora``: estimate/dora.py) and trained module copies (``lora+modules_to_save``), and a vision-language model's images
    (``lora+images``: a tower's forward and backward, image tokens in the sequence), never vouched for by text runs;
    ``images``: whether the model sees them (None: the scenario's images or frames; a text model ignores them). Sharding
    inside each node is the same run as over every rank on one node, so ``+node`` needs several nodes."""
    sharding = sc.parallelism.value if sc.num_gpus > 1 or sc.parallelism.value.startswith(("zero", "fsdp")) else "none"
    if sc.fsdp_version is FsdpVersion.V2 and sc.parallelism in FSDP_FAMILY:  # another FSDP runs (estimate/fsdp2.py)
        sharding += "+fsdp2"
    for name, degree in (("tp", sc.tensor_parallel), ("pp", sc.pipeline_parallel), ("cp", sc.context_parallel)):
        sharding += f"+{name}{degree}" if degree > 1 else ""
    sharding += "+node" if sc.shard_scope is ShardScope.NODE and sc.num_nodes > 1 else ""
    return {
        "framework": sc.framework.value,
        "method": sc.method.value + ("+dora" if sc.dora else "") + ("+modules_to_save" if sc.modules_to_save else "") + (f"+{sc.stage.value}" if sc.stage is not Stage.SFT else "")
        + ("+images" if (sc.sees_pixels if images is None else images) else ""),
        "sharding": sharding,
        "offload": sc.offload.value,
        "quantization": _QUANT_FAMILY[sc.quantize],
    }


@lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, Any], ...]:
    text = resources.files("vramfit").joinpath("data/accuracy.json").read_text(encoding="utf-8")
    return tuple(json.loads(text)["cases"])


def _describe(path: dict[str, str]) -> str:
    return " · ".join(path[f] for f in FIELDS)


def accuracy_for(sc: Scenario, images: bool | None = None) -> dict[str, Any]:
    """The ``accuracy`` object of a result: the measured cases on the scenario's path (all five fields
    equal), else the nearest ones (the most weighty fields equal), with their signed errors (``images``: as
    :func:`path_of`)."""
    cached = _accuracy_for_path(tuple(path_of(sc, images).items()))
    # the cached record's containers are copied (one level: they hold plain values), so a caller's edit stays its own
    return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in cached.items()}


@lru_cache(maxsize=1024)  # a pure function of the path and the bundled data file
def _accuracy_for_path(key: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The band is drawn from the cases measured at their exact sequence length where there are any: a case whose
    source gives only an upper bound of its lengths (padded to the longest sample, ``seq_exact: false``) holds the
    estimate at the bound against a run of shorter sequences, so its error mixes ours with an unknown input
    (``bound_cases``; the band rests on them only where nothing else is on the path, and says so)."""
    path = dict(key)
    scored = [(sum(_WEIGHT[f] for f in FIELDS if c["path"][f] == path[f]), c) for c in _cases()]
    best = max((s for s, _ in scored), default=0)
    near = [c for s, c in scored if s == best and best > 0]
    on_path = best == sum(_WEIGHT.values())
    exact = [c for c in near if c.get("exact", True)]
    errors = [c["error"] for c in exact or near]
    bound = [c["id"] for c in near if not c.get("exact", True)]
    out: dict[str, Any] = {
        "path": path,
        "measured_path": on_path,
        "matched_fields": [f for f in FIELDS if near and all(c["path"][f] == path[f] for c in near)],
        "cases": [c["id"] for c in near],
        "bound_cases": bound,
        "median_abs_error": round(statistics.median(abs(e) for e in errors), 4) if errors else None,
        "error_band": [min(errors), max(errors)] if errors else None,
    }
    band = f"{100 * min(errors):+.1f} % to {100 * max(errors):+.1f} %" if errors else ""
    if on_path and not exact:
        out["note"] = (f"{len(near)} published measurement(s) on this path ({_describe(path)}), each at an upper-bound "
                       f"sequence length (padded to it, the real lengths unknown): our figure at that length is {band} "
                       f"off, median |error| {100 * out['median_abs_error']:.1f} %")
        return out
    if on_path:
        out["note"] = (f"{len(near)} published measurement(s) on this path ({_describe(path)}): our error {band}, "
                       f"median |error| {100 * out['median_abs_error']:.1f} %")
    elif near:
        out["note"] = (f"no measurement behind this path ({_describe(path)}); the nearest {len(near)} share "
                       f"{', '.join(out['matched_fields']) or 'no field'}: our error {band}")
    else:
        out["note"] = f"no measurement behind this path ({_describe(path)})"
    if bound and exact:
        out["note"] += (f"; {len(bound)} of them, at an upper-bound sequence length (padded to it, the real lengths "
                        "unknown), are left out of the band")
    elif bound:
        out["note"] += "; each at an upper-bound sequence length (padded to it, the real lengths unknown)"
    return out
