"""``--from FILE`` / ``--dialect`` / ``--write-to FILE``: a training config as scenario overrides, and the
change that fits written back into it. Explicit flags override the file. The mapping goes to stderr."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any

from rich.console import Console

from vramfit.errors import ScenarioError

err_console = Console(stderr=True, soft_wrap=True)
_CURRENT: ContextVar[Any] = ContextVar("vramfit_imported", default=None)
_NEEDS_FROM = "needs --from FILE (the config to write the change into)"


def overlay(files: list[Path] | None, dialect: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """Scenario keys from ``--from`` files with the explicit flags on top (flags win)."""
    _CURRENT.set(None)
    if not files:
        if dialect:
            raise ScenarioError("dialect", "needs --from FILE")
        return flags
    from vramfit.config_import import from_config

    imp = from_config(files[0], *files[1:], dialect=dialect)
    imp.flags = dict(flags)  # explicit flags: written back too, with the change that fits
    if {"num_nodes", "num_gpus"} & set(flags) and "shard_scope" not in flags:  # a DeepSpeed file's hpZ in the
        from vramfit.config_import.companions import hpz_across_nodes  # layout the flags give

        probe = {**imp.overrides, **flags}
        try:  # flags arrive as typed; a bad count is refused by the scenario's own parse
            probe.update({k: int(probe.get(k, 1)) for k in ("num_nodes", "num_gpus")})
        except (TypeError, ValueError):
            probe = {}
        hpz_across_nodes(imp.entries, probe)
        if "shard_scope" in probe:
            imp.overrides["shard_scope"] = probe["shard_scope"]
        elif probe:
            imp.overrides.pop("shard_scope", None)
    _CURRENT.set(imp)
    for line in imp.lines():
        err_console.print(line, highlight=False, markup=False)
    data = dict(imp.overrides)
    if "model" in flags or "params" in flags:
        data.pop("model", None)
    if "method" in flags and "quantize" not in flags:
        data.pop("quantize", None)
    if imp.eval_follows_micro and "micro_batch_size" in flags and "eval_batch_size" not in flags:
        data["eval_batch_size"] = flags["micro_batch_size"]  # the file evaluates at its micro batch
    _flags_over_deepspeed(data, flags)
    return {**data, **flags}


def _flags_over_deepspeed(data: dict, flags: dict) -> None:
    """A --parallelism or --offload flag replaces what the DeepSpeed file's stage and offload sections set ("a flag
    replaces the key the file sets"): the file's buffer sizes stay for a ZeRO stage, the whole file goes otherwise."""
    ds = data.get("deepspeed_config")
    if not isinstance(ds, dict) or not ({"parallelism", "offload"} & set(flags)):
        return
    if str(flags.get("parallelism", data.get("parallelism", ""))) not in ("zero1", "zero2", "zero3"):
        data.pop("deepspeed_config")
        if "offload" not in flags:  # the file's offload was DeepSpeed's: it goes with the file
            data.pop("offload", None)
        return
    par = str(flags.get("parallelism", data.get("parallelism")))
    zero = {k: v for k, v in ds.get("zero_optimization", {}).items() if k != "stage"}
    off = str(flags.get("offload", data.get("offload", "none")))
    if par != "zero3" and off == "optimizer+params" and "offload" not in flags:
        off = data["offload"] = "optimizer"  # DeepSpeed reads parameter offload at stage 3 only
    elif par != "zero3" and off == "optimizer+params":  # asked for: the scenario's own rule, not the file's sections
        raise ScenarioError("offload", "parameter offload needs fully sharded parameters", ["zero3", "fsdp"])
    # parameter offload below stage 3 is no DeepSpeed section: the scenario's own check then says what it needs
    for section, on in (("offload_optimizer", off != "none"), ("offload_param", off == "optimizer+params" and par == "zero3")):
        zero.pop(section, None)
        if on:
            zero[section] = {"device": "cpu"}
    data["deepspeed_config"] = {**ds, "zero_optimization": zero}


def eval_follows_micro() -> bool:
    """Whether the ``--from`` config evaluates at its micro-batch (``Imported.eval_follows_micro``) and no
    ``--eval-batch-size`` pins it: the planner's micro-batch variants then evaluate at their own micro-batch, as
    ``estimate --micro-batch-size`` does (:func:`overlay`)."""
    imp = _CURRENT.get()
    return bool(imp is not None and imp.eval_follows_micro and "eval_batch_size" not in imp.flags)


def check_write_to(key: str, dest: Path | None) -> None:
    """Refuse ``--write-to`` before any work: it needs ``--from FILE`` and a file name in an existing folder."""
    if dest is None:
        return
    if _CURRENT.get() is None:
        raise ScenarioError(key, _NEEDS_FROM)
    from vramfit.safe_input import writable_file

    writable_file(key, dest)  # named by the user, even the --from file itself (edited in place, the diff printed)


def write_back(dest: Path | None, changes: dict[str, Any], scenario: dict[str, Any]) -> None:
    """Save the ``--from`` file with ``changes`` (scenario keys) to ``dest``, print the diff."""
    if dest is None:
        return
    imp = _CURRENT.get()
    if imp is None:
        raise ScenarioError("write-to", _NEEDS_FROM)
    # explicit flags are written too, as the validated scenario holds them (typed, not the CLI's strings)
    flagged = {k: scenario[k] for k in imp.flags if k in scenario and scenario[k] != imp.overrides.get(k)}
    changes = {k: v for k, v in {**flagged, **changes}.items() if k not in ("gpu", "model", "params")}
    if not changes:
        err_console.print(f"nothing to change: the scenario already fits; {dest} not written", highlight=False)
        return
    from vramfit.config_import.hf_common import trainer_mismatch
    from vramfit.config_import.writeback import write_back as write
    from vramfit.scenario import parse_scenario

    clash = trainer_mismatch(imp.entries, parse_scenario(scenario))  # a DeepSpeed file is not rewritten with it
    if clash:
        raise ScenarioError("write-to", f"the new values would contradict the DeepSpeed config: {clash}; vramfit "
                                        f"rewrites only {imp.path.name}, so change the DeepSpeed config first; nothing written")
    diff, left = write(imp, changes, scenario, dest)
    err_console.print(diff.rstrip("\n"), highlight=False, markup=False)
    err_console.print(f"wrote {dest}", highlight=False)
    if left:
        err_console.print("not in the file (set at launch or by hand): " + ", ".join(left), highlight=False, markup=False)


def write_fit(dest: Path | None, sc: Any, safety_margin: float) -> None:
    """``fit --write-to``: the first ranked change that fits (preferring one the file can hold), written back."""
    if dest is None:
        return
    from vramfit.plan import changes_to_fit

    imp = _CURRENT.get()
    fitting = [c for c in changes_to_fit(sc, sc.gpu, safety_margin=safety_margin,
                                         eval_follows_micro=eval_follows_micro()) if c.fits]
    writable = [c for c in fitting if imp is None or all(k in imp.write_keys for k in c.changes)]
    if imp is not None and fitting and fitting[0] not in writable:  # the best needs keys the file cannot hold:
        # the best of what it can (its own combination too, not only the single changes that fit alone)
        writable = [c for c in changes_to_fit(sc, sc.gpu, safety_margin=safety_margin, eval_follows_micro=
                                              eval_follows_micro(), only_keys=imp.write_keys) if c.fits] or writable
        err_console.print(f"best change: {fitting[0].description} (this file cannot hold all of it)", highlight=False)
    if imp is not None and fitting and not writable:  # what the file can hold alone fits nowhere: no copy of it
        raise ScenarioError("write-to", f"no change this file can hold fits {sc.gpu} (the best, {fitting[0].description}, "
                                        "needs keys it cannot hold); nothing written")
    pick = (writable or fitting or [None])[0]
    if pick is None and fitting == [] and not _fits(sc, safety_margin):
        raise ScenarioError("write-to", f"no change found that fits {sc.gpu}; nothing written")
    changes = {} if pick is None else {k: v for k, v in pick.changes.items() if k != "gpu"}
    if pick is not None:
        err_console.print(f"change: {pick.description}", highlight=False)
    from vramfit.plan.evaluate import evaluation_follows

    follow = evaluation_follows(sc, changes) if eval_follows_micro() else {}
    write_back(dest, changes, sc.replace(**changes, **follow).to_dict() if changes else sc.to_dict())


def _fits(sc: Any, safety_margin: float) -> bool:
    from vramfit.plan import fit

    return fit(sc, sc.gpu, safety_margin=safety_margin, eval_follows_micro=eval_follows_micro()).fits


def write_plan(dest: Path | None, sc: Any, plan: Any) -> None:
    """``plan --write-to``: the picked plan's settings that differ from the scenario, written back."""
    if dest is None:
        return
    if plan is None:
        raise ScenarioError("write-to", "no plan fits; nothing written")
    keys = ("num_gpus", "micro_batch_size", "grad_accum", "gradient_checkpointing", "optimizer", "loss",
            "parallelism", "offload")
    now = sc.to_dict()
    changes = {k: getattr(plan, k) for k in keys if getattr(plan, k) != now[k]}
    write_back(dest, changes, plan.scenario)
    _held_alone(sc, plan, changes)


def _held_alone(sc: Any, plan: Any, changes: dict[str, Any]) -> None:
    """Where the file cannot hold every change, what the file as written needs on the plan's card, when that is over
    the limit: the keys left to the launch or to the hand are what make it fit."""
    from vramfit.config_import.writeback import file_values
    from vramfit.estimate import estimate

    imp = _CURRENT.get()
    _, left = file_values(imp, changes, plan.scenario)
    held = {k: v for k, v in changes.items() if f"{k}={v}" not in left}
    if len(held) == len(changes):
        return
    need = estimate(sc.replace(**held, gpu=plan.gpu_id)).peak.required_bytes
    if need > plan.limit_bytes:
        err_console.print(f"as written, without those keys, the run needs {need / 2**30:,.2f} GiB per GPU, over the "
                          f"{plan.gpu_id} limit of {plan.limit_bytes / 2**30:,.2f} GiB: set them as well", highlight=False)
