"""``measure(scenario)``: run the scenario on this machine and return (and store) the run record.

The measuring happens in a fresh process (:mod:`vramfit.measure.launch`), or in this one with
``in_process=True`` (tests, with a :class:`~vramfit.measure.probe.FakeProbe`). The record holds the
scenario, the environment, the three peaks, step time and tokens/s, and next to them vramfit's
estimate and (when the simulator is installed) its simulation, so the differences can be read off.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from vramfit.errors import VramfitError
from vramfit.measure.records import SOURCE_ID, RunRecord, scenario_dict
from vramfit.scenario import Scenario, parse_scenario

PEAKS = ("allocated_bytes", "reserved_bytes", "device_bytes")


class MeasureError(VramfitError):
    """The measurement cannot run here (no GPU, unsupported scenario value, bad weights directory)."""


def estimate_figures(scenario: Scenario) -> dict[str, Any]:
    """The estimator's peaks, parameter counts and components for the record."""
    from vramfit import __version__
    from vramfit.estimate import estimate

    r = estimate(scenario)
    return {
        **{k: getattr(r.peak, k) for k in PEAKS},
        "peak_phase": r.peak.phase,
        "num_params": r.model.num_params,
        "num_trainable_params": r.model.num_trainable_params,
        "components": {c.name: c.bytes for c in r.components},
        "vramfit_version": __version__,
    }


def simulation_figures(scenario: Scenario) -> tuple[dict[str, Any] | None, str]:
    """The simulator's peaks, or None and the reason (not installed, unsupported scenario, failure)."""
    try:
        from vramfit.sim import simulate  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"simulation unavailable ({exc})"
    try:
        result = simulate(scenario)
        inner = getattr(result, "result", result)  # SimulationResult.result is an EstimateResult
        peak = getattr(inner, "peak", None)
        figures: dict[str, Any] = {k: getattr(peak, k) for k in PEAKS if isinstance(getattr(peak, k, None), int)}
        for key in ("peak_label", "layers_traced", "seconds"):
            value = getattr(result, key, None)
            if isinstance(value, (str, int, float, tuple, list)):
                figures[key] = list(value) if isinstance(value, tuple) else value
    except Exception as exc:  # the simulator is optional evidence; its failure must not lose the run
        return None, f"simulation failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if not any(k in figures for k in PEAKS):
        return None, "simulation returned no peak figures"
    traced = getattr(inner, "scenario", None)
    if getattr(traced, "fsdp_version", None) not in (None, scenario.fsdp_version):  # sim/engine.py as_fsdp2
        from vramfit.sim.engine import FSDP2_TRACED  # after the model's own notes, so found by its opening

        said = next((a for a in inner.assumptions if a.startswith(FSDP2_TRACED)), FSDP2_TRACED)
        return figures, f"simulation: {said}"
    return figures, ""


def _source(env: dict[str, Any], scenario: Scenario, steps_done: int | None, run_id: str, created: str) -> str:
    pk = env.get("packages") or {}
    versions = ", ".join(f"{k} {pk[k]}" for k in ("torch", "transformers", "peft", "bitsandbytes") if pk.get(k))
    where = env.get("gpu_name") or env.get("device") or "unknown device"
    extra = f", CUDA {env['cuda']}" if env.get("cuda") else ""
    extra += f", driver {env['driver']}" if env.get("driver") else ""
    return (f"vramfit measure {pk.get('vramfit') or ''} on {scenario.num_gpus}x {where} ({versions}{extra}); "
            f"{steps_done} steps; run {run_id} at {created}").replace("  ", " ")


def make_record(scenario: Scenario, result: dict[str, Any], estimate: dict[str, Any] | None,
                simulation: dict[str, Any] | None, *, steps: int, notes: str = "", weights: Any = None,
                extra_notes: list[str] | None = None) -> RunRecord:
    """The run record of one worker result."""
    from vramfit.measure.env import package_versions
    from vramfit.measure.loop import tokens_per_step

    run_id = uuid.uuid4().hex[:16]
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    env = result.get("environment") or {"device": None, "packages": package_versions()}
    step_time = result.get("step_time_s")
    status = result.get("status") if result.get("status") in ("ok", "oom", "error") else "error"
    details = {
        "steps_requested": steps,
        "step_times_s": result.get("step_times_s") or [],
        "step_peaks": result.get("step_peaks") or [],
        "failed_at": result.get("failed_at"),
        "error": result.get("error"),
        "load": result.get("load") or {},
        "num_params": result.get("num_params"),
        "num_trainable_params": result.get("num_trainable_params"),
        "assumptions": result.get("assumptions") or [],
        "weights": str(weights) if weights else None,
    }
    for key in ("per_rank", "ranks_without_result", "log_tail"):
        if result.get(key):
            details[key] = result[key]
    if extra_notes:
        details["remarks"] = list(extra_notes)
    text = notes.strip()
    if status == "oom":
        text = (f"Out of memory at {result.get('failed_at')} after {result.get('steps_done', 0)} complete step(s). "
                + text).strip()
    return RunRecord(
        id=run_id,
        created_at=created,
        scenario=scenario_dict(scenario),
        environment=env,
        status=status,
        steps_done=int(result.get("steps_done") or 0),
        **{k: result.get(k) for k in PEAKS},
        step_time_s=step_time,
        tokens_per_s=(tokens_per_step(scenario) / step_time) if step_time else None,
        estimate=estimate,
        simulation=simulation,
        source_id=SOURCE_ID,
        source=_source(env, scenario, result.get("steps_done"), run_id, created),
        notes=text,
        details=details,
    )


def _with_detected_gpu(sc: Scenario, env: dict[str, Any], remarks: list[str]) -> Scenario:
    """The scenario with ``gpu`` set to the catalog card it ran on, when it named none (the estimate
    depends on it: Hopper's larger cuBLAS workspace, fit checks)."""
    from vramfit.measure.env import catalog_gpu_id

    if sc.gpu is not None or env.get("device") != "cuda":
        return sc
    gpu_id = catalog_gpu_id(env.get("gpu_name"), env.get("gpu_total_bytes"))
    if gpu_id is None:
        return sc
    remarks.append(f"gpu set to {gpu_id}, the catalog card matching the device {env.get('gpu_name')!r}.")
    return sc.replace(gpu=gpu_id)


def preflight(scenario: Scenario | dict[str, Any], device: str | None = None) -> Scenario:
    """The scenario, checked as far as it can be before a process is started: measurable values, a known model and,
    given ``device``, that many GPUs visible (:func:`vramfit.measure.worker.device_problem`)."""
    from vramfit.measure.build import check_measurable, model_config

    sc = parse_scenario(scenario)
    check_measurable(sc)
    model_config(sc)  # an unknown model fails here
    if device is not None:
        from vramfit.measure.worker import device_problem

        why = device_problem(device, sc.num_gpus - 1, sc.num_gpus)
        if why:
            raise MeasureError(why)
    return sc


def measure(scenario: Scenario | dict[str, Any], *, steps: int = 10, device: str = "cuda", weights: Any = None,
            store: Any = None, simulate: bool = True, notes: str = "", timeout_s: float | None = None,
            in_process: bool = False, probe: Any = None, probe_kind: str | None = None,
            probe_spec: dict[str, Any] | None = None, stream: bool = False, seed: int = 0) -> RunRecord:
    """Measure ``scenario`` for ``steps`` optimizer steps; store the record in ``store`` when given.

    Out of memory gives a record with ``status="oom"``; a scenario that cannot run here raises
    :class:`MeasureError` (nothing stored). ``probe`` (an object, in-process runs only) or ``probe_kind``
    (``cuda``, ``fake`` with ``probe_spec``, ``none``) choose where the figures come from; the default is
    the CUDA counters on ``cuda`` and none on ``cpu``.
    """
    sc = preflight(scenario)
    if steps < 1:
        raise MeasureError("steps: must be at least 1")
    if device not in ("cuda", "cpu"):
        raise MeasureError(f"device: unknown value {device!r} (valid values: cuda, cpu)")
    if in_process and sc.num_gpus > 1:
        raise MeasureError("num_gpus > 1 runs one process per GPU; in_process is for single-device runs")
    remarks: list[str] = []
    request = {"scenario": sc.to_dict(), "steps": steps, "device": device,
               "weights": str(weights) if weights else None, "seed": seed, "probe": probe_kind,
               "probe_spec": probe_spec}
    if in_process:
        from vramfit.measure.worker import execute

        result = execute(request, probe=probe)
    else:
        from vramfit.measure.launch import run_worker

        result = run_worker(request, num_gpus=sc.num_gpus, timeout_s=timeout_s, stream=stream)
    if result.get("status") == "setup-error":
        raise MeasureError(result.get("error") or "the measurement could not start")
    sc = _with_detected_gpu(sc, result.get("environment") or {}, remarks)
    try:
        est = estimate_figures(sc)
    except VramfitError as exc:
        est = None
        remarks.append(f"estimate unavailable: {exc}")
    sim = None
    if simulate:
        sim, why = simulation_figures(sc)
        if why:
            remarks.append(why)
    record = make_record(sc, result, est, sim, steps=steps, notes=notes, weights=weights, extra_notes=remarks)
    if store is not None:
        store.add(record)
    return record


def differences(record: RunRecord) -> dict[str, dict[str, float | None]]:
    """Per counter: (estimate − measured) / measured and (simulation − measured) / measured."""
    out: dict[str, dict[str, float | None]] = {}
    for key in PEAKS:
        measured = getattr(record, key)
        row: dict[str, float | None] = {}
        for name, figs in (("estimate", record.estimate), ("simulation", record.simulation)):
            ours = (figs or {}).get(key)
            row[name] = (ours - measured) / measured if measured and isinstance(ours, int) else None
        out[key.replace("_bytes", "")] = row
    return out
