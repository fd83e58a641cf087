"""Typed results of the plan search, JSON-ready through ``to_dict()`` (integer bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramfit.plan.disk import DiskEstimate
from vramfit.plan.throughput import Speed


@dataclass(frozen=True)
class Plan:
    """One way to run the job: a card, how many (one node), and the settings that make it fit."""

    gpu_id: str
    gpu_name: str
    num_gpus: int
    micro_batch_size: int
    grad_accum: int
    effective_batch: int
    gradient_checkpointing: str
    optimizer: str
    loss: str
    parallelism: str
    offload: str
    scenario: dict[str, Any]  # the full scenario of this plan (estimate it to see the breakdown)
    allocated_bytes: int  # per GPU
    reserved_bytes: int
    device_bytes: int
    usable_bytes: int  # what the card exposes to CUDA
    limit_bytes: int  # usable less the safety margin
    headroom_bytes: int  # limit - what stays on the card (vramfit.plan.verdict)
    host_ram_bytes: int  # offloaded state in host RAM, all GPUs of one node together (each node holds this much)
    speed: Speed | None  # None when the card has no BF16 TFLOPS figure
    hours: float | None  # for dataset_tokens x epochs; None without a dataset or speed
    usd_per_gpu_hour_low: float | None
    usd_per_gpu_hour_high: float | None
    cost_usd_low: float | None
    cost_usd_high: float | None
    usd_per_million_tokens: float | None  # at the low price
    within_budget: bool | None
    disk: DiskEstimate
    price_details: str = ""
    notes: tuple[str, ...] = ()
    billed_gpus: int = 0  # GPUs paid for: the rental unit that holds num_gpus (GB200: 4-GPU trays)
    price_basis: str = ""  # provider and date of usd_per_gpu_hour_low
    stack: str = "cuda"  # the card's software stack (rental.STACKS)
    meets_deadline: bool | None = None  # None without a deadline or a time
    # a published measurement exists on this plan's path (framework, method, sharding, offload,
    # quantization: estimate/accuracy.py); accuracy_note says which, or that none does
    measured_path: bool = False
    accuracy_note: str = ""
    # hours at the speed model's p90 error either way (throughput.time_band); None with --mfu or no hours
    hours_range: tuple[float, float] | None = None
    # the verdict's figure (Peak.required_bytes): the device peak less the cache released on an OOM retry; 0: not set
    required_bytes: int = 0

    @property
    def paging(self) -> bool:
        """Fits only by paging its optimizer state out: the verdict's figure is over the limit (vramfit.plan.verdict)."""
        return (self.required_bytes or self.device_bytes) > self.limit_bytes

    @property
    def tokens_per_s(self) -> float | None:
        return self.speed.tokens_per_s if self.speed else None

    @property
    def label(self) -> str:
        return f"{self.num_gpus} x {self.gpu_id}"

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["speed"] = self.speed.to_dict() if self.speed else None
        out["tokens_per_s"] = self.tokens_per_s
        out["disk"] = self.disk.to_dict()
        out["notes"] = list(self.notes)
        out["paging"] = self.paging
        return out


@dataclass(frozen=True)
class Excluded:
    gpu_id: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"gpu_id": self.gpu_id, "reason": self.reason}


@dataclass(frozen=True)
class PlanReport:
    model_id: str
    num_params: int
    num_trainable_params: int
    scenario: dict[str, Any]  # the user's scenario
    scenario_device_bytes: int  # the user's scenario as given, per GPU
    effective_batch: int
    dataset_tokens: int | None
    epochs: float
    total_tokens: int | None
    budget_usd: float | None
    safety_margin: float
    mfu: float | None  # None: times come from the mechanism model (mfu_source says so)
    mfu_source: str
    plans: tuple[Plan, ...]  # ranked: within budget, then USD per token, then speed
    excluded: tuple[Excluded, ...]
    assumptions: tuple[str, ...]
    changes: dict[str, list] = field(default_factory=dict)  # gpu id -> [Change] for named cards that do not fit
    search_estimates: int = 0
    sort: str = "cost"  # cost | time: how plans are ranked (after budget and deadline)
    deadline_hours: float | None = None
    stacks: tuple[str, ...] = ()  # software stacks planned (empty: all)
    # the fit verdict's figure of the user's scenario (Peak.required_bytes), which the changes' "needs" column states
    scenario_required_bytes: int | None = None

    @property
    def cheapest(self) -> Plan | None:
        priced = [p for p in self.plans if p.usd_per_million_tokens is not None and p.meets_deadline is not False]
        return min(priced, key=lambda p: (p.usd_per_million_tokens, -(p.tokens_per_s or 0)), default=None)

    @property
    def fastest(self) -> Plan | None:
        # under a budget, only plans known to be within it (an unpriced plan's cost is unknown)
        pool = [p for p in self.plans if p.speed and (p.within_budget if self.budget_usd is not None else True)]
        return max(pool, key=lambda p: (p.speed.tokens_per_s, -(p.usd_per_million_tokens or 0)), default=None)

    def to_dict(self) -> dict[str, Any]:
        cheapest, fastest = self.cheapest, self.fastest
        return {
            "model": {"id": self.model_id, "num_params": self.num_params,
                      "num_trainable_params": self.num_trainable_params},
            "scenario": self.scenario,
            "scenario_device_bytes": self.scenario_device_bytes,
            "scenario_required_bytes": self.scenario_required_bytes,
            "inputs": {
                "effective_batch": self.effective_batch, "dataset_tokens": self.dataset_tokens,
                "epochs": self.epochs, "total_tokens": self.total_tokens, "budget_usd": self.budget_usd,
                "safety_margin": self.safety_margin, "mfu": self.mfu, "mfu_source": self.mfu_source,
                "sort": self.sort, "deadline_hours": self.deadline_hours, "stacks": list(self.stacks),
            },
            "plans": [p.to_dict() for p in self.plans],
            "cheapest": cheapest.to_dict() if cheapest else None,
            "fastest": fastest.to_dict() if fastest else None,
            "excluded": [e.to_dict() for e in self.excluded],
            "changes": {g: [c.to_dict() for c in cs] for g, cs in self.changes.items()},
            "assumptions": list(self.assumptions),
        }
