"""The scenario: one training configuration, validated once (see ``shared/design/scenario.md``).

Every finite choice is an enum; :func:`parse_scenario` turns a mapping (YAML, JSON, CLI flags, a web
form) into a frozen :class:`Scenario` or raises :class:`~vramfit.errors.ScenarioError` naming the key
and listing the valid values. Nothing is silently defaulted except where the schema gives a default.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any

from vramfit.errors import ScenarioError


class _Choice(str, Enum):
    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]


class Method(_Choice):
    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"


class Precision(_Choice):
    BF16_TRUE = "bf16-true"
    BF16_MIXED = "bf16-mixed"
    FP16_MIXED = "fp16-mixed"
    FP16_TRUE = "fp16-true"
    FP32 = "fp32"

    @property
    def mixed(self) -> bool:
        return self in (Precision.BF16_MIXED, Precision.FP16_MIXED)

    @property
    def param_bytes(self) -> int:
        """Bytes per element of the stored (trainable) weights: fp32 master for ``-mixed``."""
        return 2 if self in (Precision.BF16_TRUE, Precision.FP16_TRUE) else 4

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of activations (autocast dtype for ``-mixed``)."""
        return 4 if self is Precision.FP32 else 2

    @property
    def meaning(self) -> str:
        """What the precision keeps in memory, in words (printed with the assumptions and --help)."""
        half = "bf16" if self.value.startswith("bf16") else "fp16"
        if self is Precision.FP32:
            return "fp32 weights, gradients, optimizer states and activations"
        if self.mixed:
            return (f"fp32 weights (the master copy), gradients and optimizer states; {half} autocast compute "
                    "(full fine-tuning with AdamW: 16 B per parameter)")
        return f"{half} weights, gradients and optimizer states, no fp32 master copy (full fine-tuning with AdamW: 8 B per parameter)"


class Quantize(_Choice):
    NF4 = "nf4"
    NF4_DQ = "nf4-dq"
    FP4 = "fp4"
    FP4_DQ = "fp4-dq"
    INT8 = "int8"
    GPTQ_INT4 = "gptq-int4"
    NONE = "none"


class QuantizeExperts(_Choice):
    """Whether a quantized base (QLoRA) also quantizes mixture-of-experts expert weights.

    ``auto`` follows the framework profile: transformers 5 stores experts as fused 3-D parameters,
    which bitsandbytes (nn.Linear only) leaves unquantized; transformers 4 (one nn.Linear per
    expert), torchtune and litgpt quantize them. ``yes``/``no`` force it. Ignored without quantization.
    """

    AUTO = "auto"
    YES = "yes"
    NO = "no"


class Optimizer(_Choice):
    ADAMW = "adamw"
    ADAMW_8BIT = "adamw-8bit"
    PAGED_ADAMW = "paged-adamw"
    PAGED_ADAMW_8BIT = "paged-adamw-8bit"
    ADAMW_4BIT = "adamw-4bit"
    ADAFACTOR = "adafactor"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd-momentum"
    LION = "lion"
    LION_8BIT = "lion-8bit"


class Checkpointing(_Choice):
    NONE = "none"
    FULL = "full"
    SELECTIVE = "selective"
    OFFLOAD = "offload"


class Attention(_Choice):
    SDPA = "sdpa"
    FLASH = "flash"
    EAGER = "eager"


class Loss(_Choice):
    STANDARD = "standard"
    CHUNKED = "chunked"
    FUSED = "fused"


class Parallelism(_Choice):
    NONE = "none"
    DDP = "ddp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"
    FSDP_GRAD_OP = "fsdp-grad-op"


class Framework(_Choice):
    """Whose training code runs the step: its layout of adapters, loss and quantized base differs.

    ``hf``: transformers + PEFT (+ Trainer/TRL); ``torchtune``; ``litgpt``. This key is an
    extension of the shared schema (default ``hf``), added because the measured sources differ in
    exactly these ways (see the README, "Frameworks").
    """

    HF = "hf"
    TORCHTUNE = "torchtune"
    LITGPT = "litgpt"


class Offload(_Choice):
    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_PARAMS = "optimizer+params"


#: Target module names PEFT understands across the catalog's families, besides ``all-linear``.
ALL_LINEAR = "all-linear"

#: Upper bounds that catch typos (a 10-trillion-token sequence) before they reach arithmetic.
MAX_SEQ_LEN = 10_000_000
MAX_BATCH = 1_000_000
MAX_GPUS = 100_000
MAX_RANK = 65_536


@dataclass(frozen=True)
class Scenario:
    """One training configuration. Field names are the JSON contract of ``scenario.md``."""

    model: str | None = None
    params: int | None = None
    method: Method = Method.LORA
    precision: Precision = Precision.BF16_TRUE  # parse_scenario: the framework profile's default_precision
    quantize: Quantize = Quantize.NONE
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = (ALL_LINEAR,)
    optimizer: Optimizer = Optimizer.ADAMW
    optimizer_in_backward: bool = False
    micro_batch_size: int = 1
    seq_len: int = 2048
    grad_accum: int = 1
    gradient_checkpointing: Checkpointing = Checkpointing.NONE
    attention: Attention = Attention.SDPA
    loss: Loss = Loss.STANDARD
    num_gpus: int = 1
    parallelism: Parallelism = Parallelism.NONE
    offload: Offload = Offload.NONE
    gpu: str | None = None
    framework: Framework = Framework.HF
    lora_dropout: float | None = None  # None: the framework's default (PEFT/torchtune 0.0, litgpt 0.05)
    compile: bool = False  # torch.compile of the model and loss (extension of the shared schema)
    quantize_experts: QuantizeExperts = QuantizeExperts.AUTO  # MoE experts in the quantized base (extension)

    @property
    def trains_adapters(self) -> bool:
        return self.method is not Method.FULL

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.micro_batch_size * self.seq_len

    @property
    def data_parallel_size(self) -> int:
        return self.num_gpus

    @property
    def effective_batch(self) -> int:
        return self.micro_batch_size * self.grad_accum * self.data_parallel_size

    def to_dict(self) -> dict[str, Any]:
        """The scenario as JSON-ready plain values, every key present."""
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, Enum):
                out[k] = v.value
            elif isinstance(v, tuple):
                out[k] = list(v)
        return out

    def replace(self, **changes: Any) -> Scenario:
        """A new validated scenario with some keys changed (values as a user would give them)."""
        data = self.to_dict()
        # values derived from another key follow it when that key changes and they are not given
        derived = {"method": "quantize", "lora_rank": "lora_alpha", "num_gpus": "parallelism"}
        for key, follower in derived.items():
            if key in changes and follower not in changes:
                data.pop(follower, None)
        if "params" in changes and "model" not in changes:
            data.pop("model", None)
        if "model" in changes and "params" not in changes:
            data.pop("params", None)
        data.update(changes)
        return parse_scenario(data)


SCENARIO_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Scenario))

_ENUM_KEYS: dict[str, type[_Choice]] = {
    "method": Method,
    "precision": Precision,
    "quantize": Quantize,
    "optimizer": Optimizer,
    "gradient_checkpointing": Checkpointing,
    "attention": Attention,
    "loss": Loss,
    "parallelism": Parallelism,
    "offload": Offload,
    "framework": Framework,
    "quantize_experts": QuantizeExperts,
}

_INT_LIMITS: dict[str, tuple[int, int]] = {
    "lora_rank": (1, MAX_RANK),
    "micro_batch_size": (1, MAX_BATCH),
    "seq_len": (1, MAX_SEQ_LEN),
    "grad_accum": (1, MAX_BATCH),
    "num_gpus": (1, MAX_GPUS),
}


def _as_int(key: str, value: Any) -> int:
    lo, hi = _INT_LIMITS[key]
    if isinstance(value, bool):
        raise ScenarioError(key, f"must be an integer from {lo} to {hi}, got {value!r}")
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        if key == "seq_len" and text[-1:] in ("k", "K") and text[:-1].isdigit():
            text = str(int(text[:-1]) * 1024)  # "4k" context = 4096 tokens (Llama-2's "4k" is 4096 positions)
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise ScenarioError(key, f"must be an integer from {lo} to {hi}, got {value!r}") from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ScenarioError(key, f"must be a whole number from {lo} to {hi}, got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise ScenarioError(key, f"must be an integer from {lo} to {hi}, got {value!r}")
    if not lo <= value <= hi:
        raise ScenarioError(key, f"must be from {lo} to {hi}, got {value}")
    return value


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return value.strip().lower() in ("true", "1", "yes", "on")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ScenarioError(key, f"must be true or false, got {value!r}", ["true", "false"])


def _as_enum(key: str, value: Any) -> _Choice:
    enum = _ENUM_KEYS[key]
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        for member in enum:
            if member.value == text:
                return member
    if key == "gradient_checkpointing" and isinstance(value, bool):
        return Checkpointing.FULL if value else Checkpointing.NONE
    raise ScenarioError(key, f"unknown value {value!r}", enum.values())


def _as_targets(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise ScenarioError(
            "lora_targets", f"must be a list of module names or 'all-linear', got {value!r}"
        )
    names: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip() or not item.replace("_", "").replace(
            ".", ""
        ).replace("-", "").isalnum():
            raise ScenarioError(
                "lora_targets",
                f"{item!r} is not a module name (e.g. q_proj, v_proj, all-linear)",
            )
        names.append(item.strip())
    if not names:
        raise ScenarioError("lora_targets", "must name at least one module or 'all-linear'")
    if ALL_LINEAR in names and len(names) > 1:
        extra = [n for n in names if n != ALL_LINEAR]
        if any(n not in ("lm_head", "embed_tokens") for n in extra):
            raise ScenarioError("lora_targets", "'all-linear' cannot be combined with block module names")
    return tuple(dict.fromkeys(names))


def finite_number(key: str, value: Any, what: str = "a number") -> float:
    """A finite float from a number or a numeric string (never a bool), else ScenarioError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScenarioError(key, f"must be {what}, got {value!r}")
    try:
        out = float(value)
    except ValueError:
        raise ScenarioError(key, f"must be {what}, got {value!r}") from None
    if not math.isfinite(out):
        raise ScenarioError(key, f"must be {what}, got {value!r}")
    return out


def positive_number(key: str, value: Any, hi: float = math.inf, what: str = "a positive number") -> float:
    """A finite number > 0 (and <= ``hi``) from a number or a numeric string, else ScenarioError."""
    out = finite_number(key, value, what)
    if out <= 0 or out > hi:
        raise ScenarioError(key, f"must be {what}" + (f" up to {hi:g}" if math.isfinite(hi) else "") + f", got {value!r}")
    return out


def fraction(key: str, value: Any, lo_open: bool) -> float:
    """A number in (0, 1] (``lo_open``) or [0, 1)."""
    out = finite_number(key, value)
    if not ((0 < out <= 1) if lo_open else (0 <= out < 1)):
        rng = "above 0 and at most 1" if lo_open else "from 0 up to (not including) 1"
        raise ScenarioError(key, f"must be a fraction {rng}, got {value!r}")
    return out


def parse_scenario(data: Any) -> Scenario:
    """Validate a mapping of scenario keys into a :class:`Scenario`.

    Accepts CLI-style dashed keys too (``micro-batch-size``). Unknown keys, missing model,
    bad values and incompatible combinations raise :class:`ScenarioError`.
    """
    if isinstance(data, Scenario):
        return data
    if not isinstance(data, dict):
        raise ScenarioError("scenario", f"must be a mapping of scenario keys, got {type(data).__name__}")
    raw: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ScenarioError(str(key), "keys must be strings", SCENARIO_KEYS)
        norm = key.strip().replace("-", "_")
        if norm not in SCENARIO_KEYS:
            raise ScenarioError(key, "unknown scenario key", SCENARIO_KEYS)
        if value is not None:
            raw[norm] = value

    kw: dict[str, Any] = {}
    for key in _ENUM_KEYS:
        if key in raw:
            kw[key] = _as_enum(key, raw[key])
    for key in _INT_LIMITS:
        if key in raw:
            kw[key] = _as_int(key, raw[key])
    for key in ("optimizer_in_backward", "compile"):
        if key in raw:
            kw[key] = _as_bool(key, raw[key])
    if "lora_targets" in raw:
        kw["lora_targets"] = _as_targets(raw["lora_targets"])
    if "lora_dropout" in raw:
        kw["lora_dropout"] = fraction("lora_dropout", raw["lora_dropout"], lo_open=False)
    if "lora_alpha" in raw:
        kw["lora_alpha"] = positive_number("lora_alpha", raw["lora_alpha"])
    else:
        kw["lora_alpha"] = 2.0 * kw.get("lora_rank", Scenario.lora_rank)

    model = raw.get("model")
    params = raw.get("params")
    if model is not None and params is not None:
        raise ScenarioError("model", "give either model or params, not both")
    if model is None and params is None:
        raise ScenarioError("model", "is required (a catalog/Hub id or a config.json path), or give params")
    if model is not None:
        if not isinstance(model, str) or not model.strip():
            raise ScenarioError("model", f"must be a non-empty string, got {model!r}")
        kw["model"] = model.strip()
    if params is not None:
        from vramfit.models.generic import parse_param_count

        kw["params"] = parse_param_count(params)

    method = kw.get("method", Method.LORA)
    if "precision" not in kw:  # what a user of the framework gets by default (its profile says, with sources)
        from vramfit.estimate.framework import profile_for

        kw["precision"] = dict(profile_for(kw.get("framework", Framework.HF)).default_precision)[method]
    if "quantize" not in kw:
        kw["quantize"] = Quantize.NF4_DQ if method is Method.QLORA else Quantize.NONE
    elif method is Method.QLORA and kw["quantize"] is Quantize.NONE:
        raise ScenarioError(
            "quantize", "qlora needs a quantized base", [q for q in Quantize.values() if q != "none"]
        )
    elif method is Method.FULL and kw["quantize"] is not Quantize.NONE:
        raise ScenarioError("quantize", "full fine-tuning trains every weight, so the base cannot be quantized", ["none"])

    num_gpus = kw.get("num_gpus", 1)
    if "parallelism" not in kw:
        kw["parallelism"] = Parallelism.NONE if num_gpus == 1 else Parallelism.DDP
    elif num_gpus == 1 and kw["parallelism"] is not Parallelism.NONE and kw["parallelism"] is not Parallelism.DDP:
        # ZeRO/FSDP on one GPU is legal (DeepSpeed runs it) and shards nothing; keep it.
        pass
    elif num_gpus > 1 and kw["parallelism"] is Parallelism.NONE:
        raise ScenarioError(
            "parallelism", f"{num_gpus} GPUs need a way to split the work", [p for p in Parallelism.values() if p != "none"]
        )
    offload = kw.get("offload", Offload.NONE)
    if offload is not Offload.NONE and kw["parallelism"] not in (
        Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP
    ):
        raise ScenarioError(
            "offload",
            "CPU offload of model state is done by ZeRO or FSDP; set parallelism to one of them",
            ["zero1", "zero2", "zero3", "fsdp", "fsdp-grad-op"],
        )
    if offload is Offload.OPTIMIZER_PARAMS and kw["parallelism"] not in (Parallelism.ZERO3, Parallelism.FSDP):
        raise ScenarioError("offload", "parameter offload needs fully sharded parameters", ["zero3", "fsdp"])

    if "gpu" in raw:
        gpu = raw["gpu"]
        if not isinstance(gpu, str) or not gpu.strip():
            raise ScenarioError("gpu", f"must be a GPU id, got {gpu!r}")
        from vramfit.gpus import get_gpu

        kw["gpu"] = get_gpu(gpu.strip()).gpu_id
    return Scenario(**kw)


def load_scenario_file(path: str | Path) -> Scenario:
    """Read a YAML or JSON scenario file."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError("scenario", f"file not found: {p}")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ScenarioError("scenario", f"{p} is not valid JSON/YAML: {exc}") from None
    except Exception as exc:  # yaml.YAMLError
        raise ScenarioError("scenario", f"{p} is not valid YAML: {exc}") from None
    return parse_scenario(data)
