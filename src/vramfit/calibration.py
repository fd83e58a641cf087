"""A user's calibration: the CUDA context and allocator slack their own runs measured, per GPU family.

``vramfit calibrate`` writes it (:func:`save`) from the overheads of stored runs
(:mod:`vramfit.measure.calibration`); ``estimate``, ``plan``, ``fit``, ``sweep`` and ``serve`` load it at the
command line or web face (:func:`load_active`) and pass it to the estimator as data (``calibration=``). The
estimator applies an entry only to a card of the family it was measured on (:func:`Calibration.for_card`):
one GPU's calibration never moves another's figure. Light: json and dataclasses only (platformdirs is
imported only to find the default path).

File (JSON; ``speed_factor`` and ``speed_runs`` optional, files written before them still load)::

    {"version": 1, "families": {"h100": {"runs": 7, "cuda_context_bytes": 548405248,
                                         "allocator_fraction": 0.031, "gpus": ["h100-sxm"],
                                         "speed_factor": 1.12, "speed_runs": 5}}}
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from vramfit.errors import VramfitError
from vramfit.safe_input import shown, write_text_file

VERSION = 1
#: Environment variable naming the calibration file the faces load (and ``calibrate`` writes by default);
#: ``off`` disables calibration.
ENV = "VRAMFIT_CALIBRATION"
FILENAME = "calibration.json"


@dataclass(frozen=True)
class FamilyCalibration:
    """What single-GPU runs on one GPU family measured (medians, :class:`vramfit.measure.calibration.Overhead`)."""

    family: str
    runs: int
    cuda_context_bytes: int  # device - reserved: nvidia-smi minus PyTorch's reserved peak
    allocator_fraction: float  # (reserved - allocated) / allocated
    gpus: tuple[str, ...] = ()  # the catalog ids (or device names) the runs were made on, for the note
    #: median of measured / predicted step time over the family's runs with a step time (the planner's
    #: mechanism model, ``plan.timing.scenario_speed``); None: times not calibrated
    speed_factor: float | None = None
    speed_runs: int = 0  # the runs speed_factor is the median of

    def speed_note(self) -> str:
        """What the planner says of a time it multiplied by :attr:`speed_factor`."""
        where = ", ".join(self.gpus) if self.gpus else self.family
        return (f"times calibrated from {self.speed_runs} run{'s' if self.speed_runs != 1 else ''} on {where} "
                f"(vramfit calibrate): x{self.speed_factor:.2f}")

    def note(self) -> str:
        where = ", ".join(self.gpus) if self.gpus else self.family
        return (f"Calibrated from {self.runs} run{'s' if self.runs != 1 else ''} on {where} (vramfit calibrate): "
                f"CUDA context {self.cuda_context_bytes / 2**20:,.0f} MiB and allocator slack "
                f"{self.allocator_fraction:.1%} of allocated, as measured, replace the defaults.")


@dataclass(frozen=True)
class Calibration:
    families: dict[str, FamilyCalibration] = field(default_factory=dict)
    path: str = ""

    def for_card(self, gpu_id: str | None) -> FamilyCalibration | None:
        """The entry of ``gpu_id``'s family (first dash-separated part of its catalog id), or None."""
        if not gpu_id:
            return None
        return self.families.get(card_family(gpu_id))

    def to_dict(self) -> dict[str, Any]:
        fams = {k: {**asdict(v), "gpus": list(v.gpus)} for k, v in sorted(self.families.items())}
        for v in fams.values():
            del v["family"]
            if v["speed_factor"] is None:  # times not calibrated: the file as before the fields existed
                del v["speed_factor"], v["speed_runs"]
        return {"version": VERSION, "families": fams}


def card_family(gpu_id: str) -> str:
    """A catalog id's family, as :func:`vramfit.measure.env.gpu_family` names the family of a run's GPU."""
    return gpu_id.lower().split("-")[0]


def default_path() -> Path:
    """``$VRAMFIT_CALIBRATION``, else ``calibration.json`` in the user's config directory (platformdirs)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    try:
        from platformdirs import user_config_dir
    except ImportError:  # the light install: the XDG default platformdirs would give on Linux
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "vramfit" / FILENAME
    return Path(user_config_dir("vramfit")) / FILENAME


#: Bounds of the file's numbers: no GPU has a terabyte of memory, no user a billion runs.
MAX_BYTES = 2**40
MAX_RUNS = 10**9
_NEEDS = "needs runs, cuda_context_bytes and allocator_fraction"


def parse(data: Any, path: str = "") -> Calibration:
    """A :class:`Calibration` from the file's JSON; one clear error naming the file, family and key."""
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("families"), dict):
        raise VramfitError(f"calibration file {path}: expected {{\"version\": {VERSION}, \"families\": {{...}}}}")
    fams = {}
    for fam, e in data["families"].items():
        at = f"calibration file {path}: family {shown(fam)}"
        if not isinstance(e, dict) or not {"runs", "cuda_context_bytes", "allocator_fraction"} <= e.keys():
            raise VramfitError(f"{at} {_NEEDS} (an object with all three)")
        fc = FamilyCalibration(str(fam), _whole(e, "runs", at, 1, MAX_RUNS),
                               _whole(e, "cuda_context_bytes", at, 0, MAX_BYTES), _fraction(e, at), _gpus(e, at))
        fams[fc.family] = replace(fc, **_speed_fields(e, at))
    return Calibration(fams, path)


def _whole(e: dict, key: str, at: str, low: int, high: int) -> int:
    """``e[key]``: a JSON integer from ``low`` to ``high`` (no float, string or boolean)."""
    v = e[key]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise VramfitError(f"{at}: {key} must be a whole number from {low:,} to {high:,}, got {shown(v)}")
    return v


def _fraction(e: dict, at: str) -> float:
    v = e["allocator_fraction"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:  # NaN and inf fail 0 <= v < 1
        raise VramfitError(f"{at}: allocator_fraction must be a number from 0 to below 1, got {shown(v)}")
    return float(v)


def _gpus(e: dict, at: str) -> tuple[str, ...]:
    v = e.get("gpus", [])
    if not isinstance(v, list) or len(v) > 1000 or not all(isinstance(g, str) and len(g) <= 200 for g in v):
        raise VramfitError(f"{at}: gpus must be a list of GPU ids (strings), got {shown(v)}")
    return tuple(v)


def _speed_fields(e: dict, where: str) -> dict[str, Any]:
    """``speed_factor`` (a finite number > 0, or absent/null) and ``speed_runs`` (an integer >= 1 with a factor)."""
    factor, runs = e.get("speed_factor"), e.get("speed_runs", 0)
    if factor is None:
        return {}
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0:
        raise VramfitError(f"{where}: speed_factor must be a finite number > 0 (measured / predicted step time), "
                           f"got {shown(factor)}")
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise VramfitError(f"{where}: speed_runs must be a whole number from 1 to {MAX_RUNS:,} with a speed_factor, "
                           f"got {shown(runs)}")
    return {"speed_factor": float(factor), "speed_runs": runs}


def load(path: str | Path) -> Calibration:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested without end
        raise VramfitError(f"calibration file {p}: cannot read it ({type(exc).__name__}: {exc})"[:300]) from None
    return parse(data, str(p))


def is_off() -> bool:
    """``$VRAMFIT_CALIBRATION`` is ``off``: no face applies a calibration, and ``calibrate`` writes none by default."""
    return os.environ.get(ENV, "").strip().lower() == "off"


def load_active() -> Calibration | None:
    """The calibration the faces apply: the file at :func:`default_path` when it exists, else None."""
    if is_off():
        return None
    p = default_path()
    return load(p) if p.is_file() else None


def save(cal: Calibration, path: str | Path | None = None) -> Path:
    """Write ``cal`` to ``path`` (default :func:`default_path`) atomically; an OS error is one line."""
    p = Path(path) if path is not None else default_path()
    write_text_file("calibration", p, json.dumps(cal.to_dict(), indent=2) + "\n")
    return p


def adjust(allocated: int, reserved: int, context: int, fc: FamilyCalibration | None) -> tuple[int, int]:
    """(reserved, CUDA context) with ``fc``'s measured figures in place of the modelled ones.

    Reserved becomes allocated x (1 + the measured median slack fraction); the context the measured median.
    Without an entry both are returned unchanged.
    """
    if fc is None:
        return reserved, context
    return allocated + round(allocated * fc.allocator_fraction), fc.cuda_context_bytes
