"""The DeepSpeed config as an input: the ``zero_optimization`` keys that size GPU buffers.

A scenario's ``deepspeed_config`` (a path to the JSON/YAML file or the mapping itself) is read into a
frozen :class:`DeepSpeedConfig`; ``"auto"`` values stay ``"auto"`` until :func:`resolve` fills them
as the HF Trainer does from the model's hidden size. Keys the user leaves out take DeepSpeed's own
defaults (deepspeedai/DeepSpeed v0.19.6 deepspeed/runtime/zero/config.py DeepSpeedZeroConfig).
The file is read by the config importer's safe loader (``config_import.loader``), not a second one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramfit.choices import ZERO_FAMILY, Method, Offload, Parallelism, Quantize
from vramfit.errors import ScenarioError
from vramfit.safe_input import shown

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario

AUTO = "auto"
KEY = "deepspeed_config"

#: zero_optimization keys read here -> (DeepSpeed v0.19.6 default, type). Defaults cite
#: deepspeed/runtime/zero/config.py: reduce_bucket_size/allgather_bucket_size pp_int(5e8),
#: contiguous_gradients True, overlap_comm None (= stage == 3, overlap_comm_valid),
#: sub_group_size pp_int(1e9), stage3_prefetch_bucket_size pp_int(5e7),
#: stage3_param_persistence_threshold pp_int(1e5), stage3_max_live_parameters pp_int(1e9),
#: stage3_max_reuse_distance pp_int(1e9).
_INT_KEYS = {
    "reduce_bucket_size": 500_000_000,
    "allgather_bucket_size": 500_000_000,
    "sub_group_size": 1_000_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
}
#: the keys HF fills from hidden_size when "auto" (transformers v5.24.0 integrations/deepspeed.py
#: HfTrainerDeepSpeedConfig.trainer_config_finalize: reduce_bucket_size = h*h;
#: stage3_prefetch_bucket_size = int(0.9*h*h); stage3_param_persistence_threshold = 10*h)
_AUTO_KEYS = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
#: DeepSpeedZeroConfig's own field names for the stage3_ keys, which are only their aliases: the model sets
#: populate_by_name=True (deepspeed 0.16.4 runtime/config_utils.py l. 109; runtime/zero/config.py l. 208-237, e.g.
#: ``max_live_parameters: int = Field(pp_int(1e9), ge=0, alias="stage3_max_live_parameters")``) and the engine reads the
#: field (engine.py ``zero_config.max_live_parameters``): Axolotl's deepspeed_configs/zero3*.json write
#: "max_live_parameters": 0. The HF Trainer fills "auto" under the stage3_ names only (is_auto of the long key).
FIELD_NAMES = {"prefetch_bucket_size": "stage3_prefetch_bucket_size",
               "param_persistence_threshold": "stage3_param_persistence_threshold",
               "max_live_parameters": "stage3_max_live_parameters", "max_reuse_distance": "stage3_max_reuse_distance"}
#: memory_efficient_linear defaults to True (DeepSpeedZeroConfig.memory_efficient_linear, same file)
_BOOL_KEYS = ("overlap_comm", "contiguous_gradients", "memory_efficient_linear")
#: every zero_optimization key this module reads besides the stage and offload sections
SIZING_KEYS = (*_INT_KEYS, *_BOOL_KEYS)
_MAX = 10**15  # catches typos before arithmetic


@dataclass(frozen=True)
class DeepSpeedConfig:
    """The buffer-sizing keys of ``zero_optimization`` as given (None: not given, "auto": HF fills it)."""

    stage: int | None = None
    offload_optimizer: bool = False
    offload_param: bool = False
    reduce_bucket_size: int | str | None = None
    allgather_bucket_size: int | str | None = None
    overlap_comm: bool | None = None
    contiguous_gradients: bool | None = None
    sub_group_size: int | str | None = None
    stage3_prefetch_bucket_size: int | str | None = None
    stage3_param_persistence_threshold: int | str | None = None
    stage3_max_live_parameters: int | str | None = None
    stage3_max_reuse_distance: int | str | None = None
    memory_efficient_linear: bool | None = None
    #: ZeRO++ hpZ: ranks of the secondary (node-local) partition of the 16-bit weights (DeepSpeedZeroConfig
    #: ``zero_hpz_partition_size: int = Field(1, ge=0)``, deepspeed/runtime/zero/config.py); 1 or 0: none
    zero_hpz_partition_size: int | None = None
    #: the file's keys this estimate does not model, as the config importer classifies them (config_import/hf_common.py
    #: read_deepspeed): "key: why" lines the estimate states; not part of the config's JSON layout
    unread: tuple[str, ...] = field(default=(), compare=False)
    #: the batch values the HF Trainer fills when they are "auto" (train_micro_batch_size_per_gpu,
    #: gradient_accumulation_steps, train_batch_size) where the whole file gives a number: the estimate says where they are not the
    #: scenario's (:func:`trainer_note`); not part of zero_optimization
    trainer_values: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        """DeepSpeed's JSON layout, only the keys that were given."""
        zero: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "offload_optimizer" and v:
                zero["offload_optimizer"] = {"device": "cpu"}
            elif f.name == "offload_param" and v:
                zero["offload_param"] = {"device": "cpu"}
            elif f.name not in ("offload_optimizer", "offload_param", "unread", "trainer_values") and v is not None:
                zero[f.name] = v
        return {"zero_optimization": zero, **dict(self.trainer_values)}  # the batch values at the file's top level


#: What the HF Trainer docs' example configs set when the scenario names no DeepSpeed file
#: (transformers v5.24.0 docs/source/en/deepspeed.md, ZeRO-2/ZeRO-3 example configs: overlap_comm true,
#: contiguous_gradients true, reduce_bucket_size / stage3_prefetch_bucket_size /
#: stage3_param_persistence_threshold "auto", sub_group_size 1e9, stage3_max_live_parameters 1e9,
#: stage3_max_reuse_distance 1e9; ZeRO-2 allgather_bucket_size 2e8).
HF_TEMPLATE = DeepSpeedConfig(
    reduce_bucket_size=AUTO, allgather_bucket_size=200_000_000, overlap_comm=True, contiguous_gradients=True,
    sub_group_size=1_000_000_000, stage3_prefetch_bucket_size=AUTO, stage3_param_persistence_threshold=AUTO,
    stage3_max_live_parameters=1_000_000_000, stage3_max_reuse_distance=1_000_000_000,
)


@dataclass(frozen=True)
class ZeroBuffers:
    """The config resolved for one model: element counts and switches DeepSpeed runs with."""

    reduce_bucket_size: int
    allgather_bucket_size: int
    overlap_comm: bool
    contiguous_gradients: bool
    sub_group_size: int
    prefetch_bucket_size: int
    persistence_threshold: int
    max_live_parameters: int
    max_reuse_distance: int
    memory_efficient_linear: bool = True


def resolve(cfg: DeepSpeedConfig | None, hidden_size: int, stage: int) -> ZeroBuffers:
    """Fill "auto" as HF does and missing keys with DeepSpeed's defaults."""
    cfg = cfg or HF_TEMPLATE
    # transformers 5.24.0 integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_finalize:
    # reduce_bucket_size = h*h, stage3_prefetch_bucket_size = int(0.9*h*h), persistence threshold = 10*h
    auto = {"reduce_bucket_size": hidden_size * hidden_size,
            "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
            "stage3_param_persistence_threshold": 10 * hidden_size}

    def num(key: str) -> int:
        v = getattr(cfg, key)
        if v is None:
            return _INT_KEYS[key]
        return auto[key] if v == AUTO else int(v)

    overlap = cfg.overlap_comm if cfg.overlap_comm is not None else stage == 3
    contiguous = True if cfg.contiguous_gradients is None else cfg.contiguous_gradients
    return ZeroBuffers(
        num("reduce_bucket_size"), num("allgather_bucket_size"), overlap, contiguous, num("sub_group_size"),
        num("stage3_prefetch_bucket_size"), num("stage3_param_persistence_threshold"),
        num("stage3_max_live_parameters"), num("stage3_max_reuse_distance"),
        cfg.memory_efficient_linear is not False,
    )


def _int_value(key: str, v: Any) -> int | str:
    if v == AUTO:  # the HF Trainer's is_auto compares the value with "auto" exactly (integrations/deepspeed.py)
        if key not in _AUTO_KEYS:
            raise ScenarioError(KEY, f"zero_optimization.{key}: 'auto' is filled by the HF Trainer only for "
                                     f"{', '.join(_AUTO_KEYS)}; give a number")
        return AUTO
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or not 0 <= v <= _MAX or v != int(v):
        raise ScenarioError(KEY, f"zero_optimization.{key} must be a whole number of elements from 0 to {_MAX:.0e}"
                                 f" or 'auto', got {v!r}")
    return int(v)


def offload_section_error(zero: Any, key: str) -> str | None:
    """Why ``zero_optimization.<key>`` (an offload section) cannot be read, or None: DeepSpeed's config model takes a
    DeepSpeedZeroOffload*Config mapping, not a word (``"offload_param": "cpu"``). The one check of the estimator and
    the config importer (config_import/ds_read.py)."""
    sub = zero.get(key) if isinstance(zero, dict) else None
    if sub is None or isinstance(sub, dict):
        return None
    return f"zero_optimization.{key} must be a mapping such as {{\"device\": \"cpu\"}}, got {sub!r}"


#: DeepSpeed's deprecated offload switches and the sections they stand for: deepspeedai/DeepSpeed@edaa722 (v0.19.5+)
#: runtime/zero/config.py l. 181-213, ``cpu_offload`` -> ``offload_optimizer``, ``cpu_offload_param`` -> ``offload_param``,
#: each ``DeepSpeedZeroOffload*Config(device=cpu)`` when true (runtime/config_utils.py ``_process_deprecated_field``,
#: which refuses a deprecated switch beside the section that replaces it)
LEGACY_OFFLOAD = {"cpu_offload": "offload_optimizer", "cpu_offload_param": "offload_param"}


def with_legacy_offload(zero: dict[str, Any]) -> dict[str, Any]:
    """``zero`` (a zero_optimization mapping) with each deprecated offload switch as the section it stands for
    (:data:`LEGACY_OFFLOAD`) where it is on, and gone, as DeepSpeed deletes it (``delattr``)."""
    out = {k: v for k, v in zero.items() if k not in LEGACY_OFFLOAD}
    for old, new in LEGACY_OFFLOAD.items():
        value = zero.get(old)
        if value is None:
            continue
        on = _lax_bool(value)
        if on is None:
            raise ScenarioError(KEY, f"zero_optimization.{old} must be true or false, got {shown(value)}",
                                ["true", "false"])
        if new in zero:
            raise ScenarioError(KEY, f"zero_optimization.{old} (deprecated) and {new} together: DeepSpeed refuses "
                                "them together; keep the section")
        if on:
            out[new] = {"device": "cpu"}
    return out


def _lax_bool(value: Any) -> bool | None:
    """``value`` as pydantic reads a bool field of DeepSpeed's config (v2 lax mode: 0/1 and the words accelerate's
    bool takes, any case: config_import/values.py ``ACCELERATE_BOOL``), None where it refuses it."""
    from vramfit.config_import.values import ACCELERATE_BOOL

    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return ACCELERATE_BOOL.get(value.strip().lower()) if isinstance(value, str) else None


def _device(zero: dict, key: str) -> bool:
    sub = zero.get(key)
    if sub is None:
        return False
    if (why := offload_section_error(zero, key)) is not None:
        raise ScenarioError(KEY, why)
    dev = sub.get("device", "none")
    if dev not in ("cpu", "nvme", "none", None):
        raise ScenarioError(KEY, f"zero_optimization.{key}.device must be one of cpu, nvme, none, got {dev!r}")
    return dev in ("cpu", "nvme")


def from_mapping(data: dict[str, Any]) -> DeepSpeedConfig:
    """A DeepSpeed config mapping (the whole JSON or its zero_optimization section) as typed values."""
    zero = data.get("zero_optimization", data)
    if not isinstance(zero, dict):
        raise ScenarioError(KEY, f"zero_optimization must be a mapping, got {type(zero).__name__}")
    zero = with_legacy_offload(zero)
    stage = zero.get("stage")
    if stage is not None and (isinstance(stage, bool) or stage not in (0, 1, 2, 3)):
        raise ScenarioError(KEY, f"zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}", ["0", "1", "2", "3"])
    kw: dict[str, Any] = {"stage": stage, "offload_optimizer": _device(zero, "offload_optimizer"),
                          "offload_param": _device(zero, "offload_param")}
    for key in _INT_KEYS:
        if zero.get(key) is not None:
            kw[key] = _int_value(key, zero[key])
    for name, alias in FIELD_NAMES.items():
        if zero.get(name) is not None and zero[name] != AUTO:  # the HF Trainer fills only the stage3_ name and
            if zero.get(alias) not in (None, AUTO):             # DeepSpeed drops "auto" (config_utils.py l. 55): its
                raise ScenarioError(KEY, f"zero_optimization.{name} and {alias} name one DeepSpeed setting: give one")
            kw[alias] = _int_value(name, zero[name])          # default applies, as for a key not given
    hpz = zero.get("zero_hpz_partition_size")
    if hpz is not None:
        if isinstance(hpz, bool) or not isinstance(hpz, int) or not 0 <= hpz <= _MAX:
            raise ScenarioError(KEY, f"zero_optimization.zero_hpz_partition_size must be a whole number of ranks, got {hpz!r}")
        kw["zero_hpz_partition_size"] = hpz
    for key in _BOOL_KEYS:
        if zero.get(key) is not None:
            if not isinstance(zero[key], bool):
                raise ScenarioError(KEY, f"zero_optimization.{key} must be true or false, got {zero[key]!r}")
            kw[key] = zero[key]
    return DeepSpeedConfig(**kw)


def with_unread(cfg: DeepSpeedConfig, data: dict[str, Any], path: Path | str) -> DeepSpeedConfig:
    """``cfg`` with the keys of ``data`` it does not model (``unread``), classified by the config importer's DeepSpeed
    reader so that ``--deepspeed-config`` and ``--from`` say the same of one file."""
    from vramfit.config_import.hf_common import read_deepspeed

    whole = data if "zero_optimization" in data else {"zero_optimization": data}  # from_mapping takes either
    _, entries = read_deepspeed(None, "", Path(str(path)), whole, strict=False)
    why: dict[str, list[str]] = {}  # one line per reason, its keys in file order
    for e in entries:
        # hpZ is modelled here or refused (_hpz_keys), never left unread on this path
        if e.kind == "not modelled yet" and not e.key.endswith("zero_optimization.zero_hpz_partition_size"):
            why.setdefault(e.note, []).append(e.key.removeprefix(" → "))
    unread = tuple(f"{', '.join(keys)}: {note}" for note, keys in why.items())
    return replace(cfg, unread=unread) if unread else cfg


#: the Trainer-filled batch keys of a DeepSpeed file and the scenario keys the HF Trainer matches them against
#: (transformers 5.24.0 integrations/deepspeed.py trainer_config_finalize: a mismatch is refused), as the importer
#: checks them (config_import/ds_read.py DS_TRAINER_MATCH)
TRAINER_KEYS = {"train_micro_batch_size_per_gpu": "micro_batch_size", "gradient_accumulation_steps": "grad_accum",
                # micro-batch x accumulation x world size (transformers integrations/deepspeed.py trainer_config_process
                # fill_match("train_batch_size", ...)): Scenario.effective_batch
                "train_batch_size": "effective_batch"}


def trainer_values(data: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """The whole file's Trainer-filled batch keys given as whole numbers ("auto" and absent ones left out)."""
    if "zero_optimization" not in data:  # a zero_optimization section alone names none
        return ()
    from vramfit.scenario import INT_LIMITS

    out = []
    for key, own in TRAINER_KEYS.items():
        v = data.get(key)
        if v is None or (isinstance(v, str) and v.strip().lower() == AUTO):
            continue
        lo, hi = INT_LIMITS.get(own, (1, _MAX))  # the scenario key's own range (a product: any whole number)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ScenarioError(KEY, f"{key} must be a whole number from {lo} to {hi:,} or 'auto', got {shown(v)}")
        out.append((key, v))
    return tuple(out)


def trainer_note(sc) -> list[str]:
    """The estimate's line on a DeepSpeed file whose batch values are not the scenario's: the HF Trainer refuses such
    a file (the ``--from`` import does too), so the estimate is of the scenario's values."""
    cfg = sc.deepspeed_config
    off = [(k, v, TRAINER_KEYS[k]) for k, v in (cfg.trainer_values if cfg is not None else ()) if v != getattr(sc, TRAINER_KEYS[k])]
    if not off:
        return []
    def give(key: str, v: int) -> str:  # what to set: the key, or the keys whose product the whole batch is
        return (f"micro_batch_size x grad_accum x data-parallel GPUs = {v}" if key == "effective_batch"
                else f"{key} {v}")

    return [f"DeepSpeed config {k} {v} is not this scenario's {key} ({getattr(sc, key)}): the HF Trainer refuses the "
            f"mismatch (trainer_config_finalize); this estimate is of {key} {getattr(sc, key)}. Give {give(key, v)}, or "
            f"\"auto\" in the file." for k, v, key in off]


def unread_note(sc) -> list[str]:
    """The estimate's line on a scenario's DeepSpeed config keys it does not model (none where all are read)."""
    cfg = sc.deepspeed_config
    if cfg is None or not cfg.unread:
        return []
    return ["DeepSpeed config keys not modelled, their effect (if any) not in this estimate: "
            + "; ".join(cfg.unread) + "."]


def master_note(sc) -> list[str]:
    """Under ZeRO a 16-bit "-true" run still has fp32 master weights: the precision line's "no fp32 master copy" is the
    plain trainer's, not DeepSpeed's (the optimizer partitions: estimate/core.py ``_ds_mixed``)."""
    from vramfit.estimate.core import _ds_mixed

    if not _ds_mixed(sc) or sc.precision.mixed:
        return []
    return ["DeepSpeed ZeRO keeps an fp32 master copy and fp32 optimizer states in each rank's partition whatever the "
            "model's dtype (stage_1_and_2.py single_partition_of_fp32_groups, stage3.py fp32_partitioned_groups_flat)."]


def parse(value: Any) -> DeepSpeedConfig:
    """The scenario value: a DeepSpeedConfig, a mapping, or a path to a DeepSpeed JSON/YAML file."""
    if isinstance(value, DeepSpeedConfig):
        return value
    if isinstance(value, dict):
        return _typed(value, "deepspeed_config")
    if isinstance(value, (str, Path)) and str(value).strip():
        from vramfit.config_import.loader import load_mapping

        path = Path(str(value).strip()).expanduser()
        if not path.is_file():
            raise ScenarioError(KEY, f"file not found: {path}" if not path.exists()
                                else f"{path} is a directory or a device, not a file")
        try:
            return _typed(load_mapping(path), path)
        except ScenarioError as exc:
            if exc.key == KEY:
                raise
            raise ScenarioError(KEY, exc.message.removeprefix("from: ")) from None
    raise ScenarioError(KEY, f"must be a DeepSpeed config: a path to its JSON file or the mapping itself, got {value!r}")


def _typed(data: dict[str, Any], path: Path | str) -> DeepSpeedConfig:
    """A file's mapping typed: its buffer keys, the keys it does not model and its Trainer-filled batch values."""
    cfg = with_unread(from_mapping(data), data, path)
    values = trainer_values(data)
    return replace(cfg, trainer_values=values) if values else cfg


_ZERO = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}  # the config importer's map (config_import/hf_common.py)


def scenario_keys(value: Any, kw: dict[str, Any]) -> None:
    """parse_scenario's ``deepspeed_config``: typed into ``kw``; its stage and offload set parallelism/offload
    when those are not given and must agree with them when they are."""
    from vramfit.choices import Offload, Parallelism

    cfg = parse(value)
    kw[KEY] = cfg
    if cfg.stage is not None:
        par = Parallelism(_ZERO[cfg.stage])
        if "parallelism" not in kw:
            kw["parallelism"] = par
        elif kw["parallelism"] is not par:
            raise ScenarioError(KEY, f"zero_optimization.stage {cfg.stage} means parallelism "
                                f"{par.value}, but parallelism is {kw['parallelism'].value}", [par.value])
    # parameter-only offload has no layout of its own: counted as none, as the config importer does; below stage 3
    # DeepSpeed never reads offload_param (_configure_zero_optimizer hands DeepSpeedZeroOptimizer the
    # offload_optimizer_config only: deepspeedai/DeepSpeed@edaa722, v0.19.5+, runtime/engine.py l. 2382-2416)
    params = cfg.offload_param and kw.get("parallelism") is Parallelism.ZERO3
    off = (Offload.OPTIMIZER_PARAMS if params else Offload.OPTIMIZER) if cfg.offload_optimizer else Offload.NONE
    if "offload" not in kw:
        kw["offload"] = off
    elif kw["offload"] is not off:
        raise ScenarioError(KEY, f"its offload sections mean offload {off.value}, but offload is "
                            f"{kw['offload'].value}", [off.value])
    if kw.get("parallelism") not in ZERO_FAMILY:
        raise ScenarioError(KEY, "applies to DeepSpeed ZeRO; set parallelism to one of its stages",
                            ["zero1", "zero2", "zero3"])
    _hpz_keys(cfg, kw)


def _hpz_keys(cfg: DeepSpeedConfig, kw: dict[str, Any]) -> None:
    """ZeRO++ hpZ (``zero_hpz_partition_size`` > 1) is the scenario's ``shard_scope: node`` on ZeRO-3, which the
    estimate models with the secondary partition over the GPUs of one node (estimate/core.py ``_hpz``): set it where
    not given, and refuse a size or a layout that model does not cover."""
    from vramfit.choices import ShardScope

    size = cfg.zero_hpz_partition_size or 1
    if size <= 1:
        return
    where = f"zero_optimization.zero_hpz_partition_size {size}"
    if kw["parallelism"] is not Parallelism.ZERO3:
        raise ScenarioError(KEY, f"{where}: ZeRO++ hpZ partitions ZeRO-3 parameters; the config's stage is "
                            f"{kw['parallelism'].value}", ["zero3"])
    gpus, nodes = kw.get("num_gpus", 1), kw.get("num_nodes", 1)
    per_node = gpus // nodes if nodes and gpus % nodes == 0 else gpus
    if nodes <= 1 or size != per_node:
        raise ScenarioError(KEY, f"{where}: hpZ is modelled with the secondary partition over the GPUs of one node, "
                            f"across several nodes (num_nodes > 1, size num_gpus / num_nodes); this run has {nodes} "
                            f"node(s) of {per_node} GPUs", [str(per_node)] if nodes > 1 else [])
    if kw.get("shard_scope", ShardScope.NODE) is not ShardScope.NODE:
        raise ScenarioError(KEY, f"{where} means shard_scope node, but shard_scope is {kw['shard_scope'].value}",
                            ["node"])
    kw["shard_scope"] = ShardScope.NODE


def ipg_bytes(z: ZeroBuffers, stage: int, dtype_bytes: int) -> int:
    """Gradient reduction buckets on the GPU (``contiguous_gradients``): ZeRO-1/2 one buffer of
    reduce_bucket_size elements in the optimizer's dtype, a second one with overlap_comm
    (DeepSpeed v0.19.6 deepspeed/runtime/zero/stage_1_and_2.py setup_buckets: buf_0, buf_1); ZeRO-3 one per
    trainable dtype (stage3.py __init__: ``bucket.buffer = torch.empty(self.reduce_bucket_size, ...)``).
    allgather_bucket_size only splits the all-gather of the updated partitions into the existing 16-bit
    flat buffers (runtime/utils.py all_gather_dp_groups narrows them): no allocation of its own."""
    if not z.contiguous_gradients:
        return 0
    copies = 2 if (stage < 3 and z.overlap_comm) else 1
    return copies * z.reduce_bucket_size * dtype_bytes


def ipg_made_in_backward(sc: Scenario) -> bool:
    """ZeRO-1/2 allocate their IPG buckets at the first parameter-gradient hook and drop them at the end of backward
    (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py process_gradients -> setup_buckets: ``buf_0``/``buf_1 =
    torch.empty(self.reduce_bucket_size, ...)``; independent_gradient_partition_epilogue -> _release_ipg_buffers:
    ``bucket.buffer.clear()``): not live in forward nor at the loss's backward. ZeRO-3 allocates its bucket at init
    (stage3.py ``bucket.buffer = torch.empty(self.reduce_bucket_size, ...)``) and keeps it."""
    return sc.parallelism in (Parallelism.ZERO1, Parallelism.ZERO2)


def zero3_grads_resident(sc: Scenario) -> bool:
    """ZeRO-3 keeps this rank's 16-bit gradient partitions in one flat buffer allocated at init and kept for the
    whole run (DeepSpeed 0.19.8 runtime/zero/stage3.py ``self.grad_partitions_flat_buffer = torch.zeros(sum(
    p.partition_numel() for p in all_params), dtype=self.gradient_accumulation_dtype, device=self.device)``;
    on the host with optimizer offload, ``self.device`` cpu): held from the first step on, not made in backward.
    Each parameter's whole gradient is still made by autograd before the hook reduces it into the buffer."""
    return sc.parallelism is Parallelism.ZERO3 and not sc.optimizer_in_backward


def zero3_head_grad_flushed(spec: ModelSpec, sc: Scenario) -> bool:
    """Whether ZeRO-3 has reduced the output layer's whole gradient before the top block's backward. A gradient larger
    than the reduce bucket waits as ``param.grad`` until the next parameter's gradient overflows the bucket (DeepSpeed
    v0.16.5 runtime/zero/stage3.py l. 1266-1271 ``reduce_independent_p_g_buckets_and_remove_grads``: reduce the bucket
    first ``if self.elements_in_ipg_bucket + param.ds_numel > self.reduce_bucket_size and self.elements_in_ipg_bucket
    > 0``, then add; the reduce partitions the gradient and drops it). In full fine-tuning the final norm's weight
    gradient comes between the output layer's and the top block's, so the head's is gone before the block recomputes.
    The simulator (DeepSpeed 0.19.8, Qwen2.5-7B, 4 GPUs, Liger's loss, full checkpointing, seq 1024): backward peak
    31.65 GiB, the estimate 32.82 GiB with the head's 1.02 GiB gradient at the top block, 31.80 without."""
    return (sc.parallelism is Parallelism.ZERO3 and sc.method is Method.FULL and spec.final_norm_params > 0
            and not sc.optimizer_in_backward)


def gathered_bytes(z: ZeroBuffers, block_bytes_per_elem: float, largest_bytes: int, model_bytes: int) -> int:
    """ZeRO-3 parameters gathered at once on one GPU.

    The coordinator prefetches at every trace step (every module: containers, norms, LoRA's lora_A /
    lora_B / dropout, the base linears) at least one not-yet-gathered parameter, up to
    stage3_prefetch_bucket_size elements, while fewer than stage3_max_live_parameters elements are
    gathered (DeepSpeed v0.19.6 runtime/zero/partitioned_param_coordinator.py fetch_sub_module:
    ``max_params_to_prefetch = min(max_n_available_params - n_available_params, prefetch_bucket_sz)``);
    a step releases one module's parameters. With more trace steps than large parameters the
    look-ahead grows until the cap: max_live_parameters elements, plus the parameter in use or the one
    that overshoots it (the largest: for tied embeddings the V x h output layer at the loss)."""
    live = int(z.max_live_parameters * block_bytes_per_elem) + largest_bytes
    return min(model_bytes, live)


def tied_head_inside(z: ZeroBuffers, layers: int, layer_elems: int, final_norm_elems: int) -> bool:
    """Whether a tied embedding (the output layer's weight) stays gathered from the embedding's forward to the output
    layer's, so it counts inside stage3_max_live_parameters at the loss and one block parameter overshoots the cap.
    DeepSpeed 0.19.8 partitioned_param_coordinator.py ``__params_to_release`` keeps a module's parameter after its
    forward if its next use comes within stage3_max_reuse_distance elements of the recorded module order (the walk
    adds each later submodule's ``ds_numel``): between the embedding and the output layer lie every block and the
    final norm. Past that distance it is released and gathered again at the head, on top of the cap (Qwen2.5-7B's
    untied head: 1.49e9 elements live in training, :func:`vramfit.estimate.core.zero3_eval_head_relief`). The
    simulator at Llama-3.2-1B's whole 16 layers (973,146,112 elements in its blocks and final norm, ZeRO-3 on 8 ranks, bf16-mixed, seq
    1024): 6,183,384,576 B at the peak; the estimate with the head on top 6,630,796,800 (+7.2 %), inside
    6,192,726,528 (+0.15 %)."""
    return layers * layer_elems + final_norm_elems < z.max_reuse_distance


def reuse_kept_bytes(z: ZeroBuffers, layers: int, layer_elems: int, head_elems: int, recompute: bool,
                     per_elem: float) -> int:
    """Bytes of the parameters ZeRO-3 keeps gathered from their forward to their backward: a module's parameters
    are released after its forward unless they are used again within stage3_max_reuse_distance elements of the
    recorded module order (DeepSpeed 0.19.8 partitioned_param_coordinator.py ``__params_to_release``: walks
    ``__submodule_order[step_id:]`` adding ``param.ds_numel``). Block ``i`` of ``L`` comes back after the blocks above
    it in forward, the output layer twice (forward, backward) and the blocks above it in backward, twice each with
    recomputation (the recomputed forward fetches them again): (L-1-i) x block x (2 or 3) + 2 x head elements. The
    output layer (or tied embedding) is used again at once."""
    per_block = 3 if recompute else 2
    kept = sum(1 for i in range(layers)
               if (layers - 1 - i) * layer_elems * per_block + 2 * head_elems < z.max_reuse_distance)
    return int((kept * layer_elems + head_elems) * per_elem)


def hpz_gathered(gathered: int, largest: int, hpz: int, kept: int) -> int:
    """ZeRO-3 gathered parameters with ZeRO++ hpZ, less the secondary partitions that do not exist while they are
    gathered, bytes per GPU. A parameter's node-local secondary partition is made when the gathered parameter is
    partitioned again (DeepSpeed 0.19.8 runtime/zero/partition_parameters.py ``_partition`` ->
    ``_partition_param_sec``: ``torch.empty(secondary_partition_size, ...)`` only if ``ds_secondary_tensor is None``)
    and dropped after every step for the optimizer's parameters (stage3.py ``_post_step`` ->
    ``invalidate_secondary_tensor`` walks ``self.fp16_groups``, the trainable ones; frozen ones keep theirs). From the
    second step on, a trainable parameter kept gathered from forward to backward (``kept`` bytes of them,
    :func:`reuse_kept_bytes`; 0 when the base is frozen) has no secondary partition at the loss: its 1/hpz share
    (``secondary_partition_size = tensor_size // num_ranks_in_param_group``) is not live. The first step (trace not
    yet complete) releases every module's parameters after use, so all secondaries and the one parameter in use
    (``largest``) are live. The model-state figure counts every secondary; this returns the gathered bytes that go
    with it at the larger of the two steps."""
    if hpz <= 1 or not kept:
        return gathered
    return max(gathered - min(gathered, kept) // hpz, largest)


def subgroup_grad_buffer(z: ZeroBuffers, trainable_partition_numel: int) -> int:
    """ZeRO-3 without optimizer offload: the fp32 gradient of the largest optimizer sub-group (sub-groups cut at
    sub_group_size elements of partitions by _create_fp16_sub_groups), bytes per GPU. It exists only inside the
    step: DeepSpeed 0.19.8 runtime/zero/stage3.py _prepare_fp32_grad_for_sub_group makes it
    (``self.flatten(self.averaged_gradients[sub_group_id]).to(fp32 dtype)``) and _release_sub_group drops it
    (``fp32_partitioned_groups_flat[sub_group_id].grad = None``); the init-time ``gradient_buffer`` of
    initialize_optimizer_states is let go at its end (``if not self.offload_optimizer: ... group.grad = None``).
    The flat 16-bit copy the cast reads is alive with it (:func:`fp32_grad_partition`)."""
    return fp32_grad_partition(min(z.sub_group_size, trainable_partition_numel))


def grad_norm_transient(largest_param_partition_numel: int) -> int:
    """Without optimizer offload the gradient norm is taken in float64, one parameter's partitioned
    gradient at a time (DeepSpeed v0.19.6 stage3.py get_grad_norm_direct: ``g...double().norm(2)``;
    stage_1_and_2.py get_grad_norm_direct: ``torch.linalg.vector_norm(g.data.double(), ...)``); bytes."""
    return 8 * largest_param_partition_numel


def fp32_grad_partition(partition_numel: int) -> int:
    """Without optimizer offload the step flattens this GPU's 16-bit gradient partition and casts it to fp32 for the
    optimizer, both alive inside the cast: 2 + 4 bytes per element. ZeRO-1/2 (DeepSpeed 0.19.8
    runtime/zero/stage_1_and_2.py step: ``flat_grad_partition = self.flatten(self.averaged_gradients[i])``,
    ``single_grad_partition = flat_grad_partition.to(self.single_partition_of_fp32_groups[i].dtype)``, then ``del
    flat_grad_partition``; the fp32 one freed after _optimizer_step); ZeRO-3 per sub-group (stage3.py
    _prepare_fp32_grad_for_sub_group: ``self.flatten(self.averaged_gradients[sub_group_id]).to(fp32 dtype)``)."""
    return (2 + 4) * partition_numel


def host_partition_copy(largest_bytes: int, num_gpus: int, gathers_on_one_gpu: bool) -> int:
    """ZeRO-3 with offload_param: a fetch copies the parameter's host partition to the GPU before the all-gather
    (DeepSpeed v0.19.6 partition_parameters.py _all_gather_sequential: ``param_ds_tensor.to(current_device)``), on
    top of the gathered buffer: the largest parameter's partition, bytes. On one GPU DeepSpeed >= 0.9.0 skips the
    gather (NoGatherHandle: the one copy is the gathered parameter); before v0.9.0 the whole parameter was copied,
    then gathered into a second buffer (``gathers_on_one_gpu``, v0.8.3 all_gather_coalesced)."""
    if num_gpus == 1:
        return largest_bytes if gathers_on_one_gpu else 0
    return -(-largest_bytes // num_gpus)


def linear_saves_inputs(z: ZeroBuffers) -> bool:
    """ZeRO-3's zero.Init (memory_efficient_linear, the default) replaces torch.nn.functional.linear for the rest of
    the process (DeepSpeed v0.19.6 partition_parameters.py _enable_mem_efficient_linear: "This will persist unless
    manually reset") by LinearFunctionForZeroStage3, whose setup_context saves input, weight and bias
    (runtime/zero/linear.py ``ctx.save_for_backward(input, weight, bias)``): every nn.Linear keeps its input, frozen
    or not (torch's own linear keeps it only for a weight gradient); the weight is the partitioned parameter."""
    return z.memory_efficient_linear


def zero3_linear_saves_inputs(spec: ModelSpec, sc: Scenario, quantized: bool) -> bool:
    """ZeRO-3 replaces F.linear (:func:`linear_saves_inputs`); a 4-bit base layer runs
    bitsandbytes' matmul_4bit, not F.linear, so only unquantized frozen linears change."""
    if sc.parallelism is not Parallelism.ZERO3 or quantized or sc.method is Method.FULL:
        return False
    return linear_saves_inputs(resolve(sc.deepspeed_config, spec.hidden_size, 3))


def largest_head(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of the output layer (or tied embedding) as ZeRO-3 gathers it."""
    head = (spec.lm_head_params or spec.embedding_params) * sc.precision.compute_bytes
    return 2 * head if sc.method is Method.QLORA and profile.qlora_unquantized_fp32 else head


def zero3_largest(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> tuple[int, int]:
    """(largest parameter, largest block linear) in bytes as ZeRO-3 gathers them."""
    from vramfit.estimate.state import quantized_weight_bytes

    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    block = max(
        (quantized_weight_bytes(lin.out_features, lin.in_features, sc.quantize) if quantized else
         lin.in_features * lin.out_features * sc.precision.compute_bytes) for lin in spec.block_linears)
    return max(largest_head(spec, sc, profile), block), block


def zero3_fetch_copies(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> tuple[int, int]:
    """ZeRO-3 with offload_param: the host partition a fetch copies to the GPU before its all-gather
    (:func:`host_partition_copy`), bytes: (the largest parameter's, fetched at the output
    layer at the end of forward; the largest block linear's, fetched while a block runs backward)."""
    if sc.parallelism is not Parallelism.ZERO3 or sc.offload is not Offload.OPTIMIZER_PARAMS:
        return 0, 0
    largest, block = zero3_largest(spec, sc, profile)
    one = profile.ds_gathers_on_one_gpu
    return host_partition_copy(largest, sc.num_gpus, one), host_partition_copy(block, sc.num_gpus, one)
