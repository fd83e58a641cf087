"""Axolotl's base model and its dtype: which base an ``adapter`` with ``load_in_4bit``/``load_in_8bit``/``gptq``
loads, and the precision its ``bf16``/``fp16``/``bfloat16``/``float16`` resolve to, as
axolotl-ai-cloud/axolotl@067b021 does; and its config model's switches, which pydantic reads in lax mode
(values.py ``PYDANTIC_BOOL``: "false", "no", "0" are false)."""

from __future__ import annotations

from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import.report import KeyReader
from vramfit.safe_input import shown

_SRC = "axolotl-ai-cloud/axolotl@067b021"
SOURCE = f"{_SRC} src/axolotl/utils/schemas/config.py"
#: resolve_dtype: bf16 'auto' is True on a bf16 GPU (vramfit sizes Ampere and newer) unless fp16 is on, then False
#: (l. 157-170); bf16 turns fp16 off (l. 188-189); torch_dtype is bf16 for bf16/bfloat16, else fp16 for
#: load_in_8bit/fp16/float16, else fp32 (l. 191-196)
DTYPE_SRC = f"{_SRC} src/axolotl/utils/config/__init__.py resolve_dtype"
BF16_SRC = f"{DTYPE_SRC}: 'auto' = bf16 on Ampere and newer, off when fp16 is on"

#: adapter: lora with load_in_4bit. Axolotl builds a 4-bit BitsAndBytesConfig only for adapter qlora
#: (loaders/model.py l. 712 ``elif self.cfg.adapter == "qlora" and self.cfg.load_in_4bit``), so the base loads
#: unquantized in torch_dtype; _prepare_model_for_quantization (l. 1015-1023) still runs peft's
#: prepare_model_for_kbit_training for adapter lora with load_in_4bit, which casts every fp16/bf16 parameter to fp32
#: (peft v0.19.1, axolotl's pin, src/peft/utils/other.py prepare_model_for_kbit_training), and
#: _configure_embedding_dtypes (l. 456-477) casts the modules named *norm* and the embeddings/lm_head back to
#: torch_dtype: the linears stay fp32 under the Trainer's bf16/fp16 autocast. ZeRO-3 and FSDP with
#: cpu_ram_efficient_loading skip the preparation (l. 1003-1009; so does a Qwen-1 model, model_config_type qwen).
LORA_4BIT_FP32 = ("adapter lora with load_in_4bit: Axolotl quantizes only for adapter qlora, so the base loads "
                  "unquantized and prepare_model_for_kbit_training casts it to fp32 (norms and embeddings back to "
                  "16 bits): counted as an fp32 base under the Trainer's autocast")
LORA_4BIT_16BIT = ("adapter lora with load_in_4bit: Axolotl quantizes only for adapter qlora, so the base loads "
                   "unquantized in 16 bits (ZeRO-3, FSDP cpu_ram_efficient_loading and Qwen-1 models skip "
                   "prepare_model_for_kbit_training)")
#: adapter qlora (4-bit) or lora with load_in_8bit: after prepare_model_for_kbit_training, _configure_embedding_dtypes
#: (loaders/model.py l. 456-477, ``should_convert`` for every lora/qlora adapter unless qlora under FSDP) casts the
#: modules named *norm* and the embeddings/lm_head back to torch_dtype; qlora under FSDP and ZeRO-3 skip the
#: preparation (l. 1003-1009). Either way they train in 16 bits: the scenario's kbit_prepare no.
KBIT_16BIT = ("Axolotl casts norms, embeddings and lm_head back to 16 bits after prepare_model_for_kbit_training "
              "(loaders/model.py _configure_embedding_dtypes; FSDP and ZeRO-3 skip the preparation)")
BF16_OVER_FP16 = "bf16 is on too, and Axolotl then turns fp16 off (utils/config/__init__.py l. 188-189)"


def switch(r: KeyReader, key: str, *default: Any) -> bool:
    """A ``bool | None`` key of Axolotl's config model (pydantic's lax bool); unset or None: ``default`` (recorded
    with its source) or false."""
    if default:
        return hf.boolean(r, key, default[0], SOURCE, spellings=hf.PYDANTIC_BOOL)
    return hf.switch_value(r, key, r.get(key), hf.PYDANTIC_BOOL)


def word_or_switch(r: KeyReader, key: str, words: tuple[str, ...], *default: Any, source: str = SOURCE) -> str | bool:
    """A ``Literal[words] | bool | None`` key: one of ``words`` as written (pydantic's Literal is exact), else a
    switch in pydantic's lax bool spellings; anything else refused in one line naming the key. Unset or None:
    ``default`` (recorded with ``source``) or false."""
    value = r.get(key, default[0], source) if default else r.get(key)
    if isinstance(value, str) and value in words:
        return value
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (str, int)) and str(value).lower() in hf.PYDANTIC_BOOL:
        return hf.PYDANTIC_BOOL[str(value).lower()]
    spellings = ", ".join(sorted(k for k in hf.PYDANTIC_BOOL if not k.isdigit()))
    raise r.error(f"{key}: {shown(value)} is not a boolean or {' or '.join(words)} (valid values: true, false, "
                  f"{', '.join(words)}; or {spellings}, 0, 1)")


def method(r: KeyReader) -> tuple[str, str, bool]:
    """(method, quantize, upcast): ``upcast`` when the base is an unquantized one that Axolotl still prepares for
    k-bit training (adapter lora with load_in_4bit: :data:`LORA_4BIT_FP32`)."""
    adapter = r.get("adapter", None, f"{SOURCE}: no adapter = full fine-tuning")
    in4, in8 = switch(r, "load_in_4bit", False), switch(r, "load_in_8bit", False)
    gptq = switch(r, "gptq")
    if in4 and in8:
        raise r.error("load_in_4bit and load_in_8bit are both true; choose one")
    if adapter in (None, "", "none"):
        if in4 or in8 or gptq:
            raise r.error("load_in_4bit/load_in_8bit/gptq without an adapter: a quantized base cannot be fully fine-tuned")
        return "full", "none", False
    if gptq:
        return "qlora", "gptq-int4", False
    if adapter not in ("lora", "qlora"):
        raise r.error(f"adapter '{adapter}' is not modelled yet (valid values: lora, qlora)")
    if adapter == "qlora" and not in4:
        raise r.error("adapter: qlora needs load_in_4bit: true (Axolotl refuses it otherwise)")
    if adapter == "lora" and in4:  # loaders/model.py l. 712: 4 bits for qlora only (LORA_4BIT_FP32)
        return "lora", "none", True
    if in4:
        return "qlora", "nf4-dq", False
    if in8:  # l. 740: adapter lora with load_in_8bit loads an int8 base
        return "qlora", "int8", False
    return "lora", "none", False


def kbit_prepare_skipped(r: KeyReader, layout: dict[str, Any]) -> bool:
    """ZeRO-3, FSDP with cpu_ram_efficient_loading, or a Qwen-1 model: Axolotl skips prepare_model_for_kbit_training
    (loaders/model.py l. 991-993 ``model_config_type == "qwen"`` for adapter lora, l. 1003-1009
    ``is_deepspeed_zero3_enabled()``, ``fsdp_config.cpu_ram_efficient_loading``). Only adapter lora reaches here."""
    from vramfit.models.catalog import catalog_entry

    parallelism = str(layout.get("parallelism", ""))
    if parallelism == "zero3":
        return True
    entry = catalog_entry(str(r.out.get("model", "")))  # l. 991-993: Qwen-1 (model_config_type qwen) with adapter lora
    if entry is not None and entry["config"].get("model_type") == "qwen":
        return True
    if not parallelism.startswith("fsdp"):
        return False
    name = next((k for k in r.sub("fsdp_config") if k.removeprefix("fsdp_") == "cpu_ram_efficient_loading"), None)
    return name is not None and switch(r, f"fsdp_config.{name}")


def precision(r: KeyReader, method_: str, in8: bool, upcast: bool) -> str:
    """The scenario's precision from Axolotl's resolve_dtype (:data:`DTYPE_SRC`) and the Trainer's autocast
    (core/builders/base.py l. 271-278: ``fp16 = fp16 and not bf16``, ``bf16 = bf16 or bfloat16``). ``upcast``: the
    base prepared for k-bit training unquantized (:data:`LORA_4BIT_FP32`), fp32 weights under that autocast."""
    bf16 = word_or_switch(r, "bf16", ("auto",), "auto", source=BF16_SRC)
    fp16 = switch(r, "fp16", False)
    bf16_load, fp16_load = switch(r, "bfloat16"), switch(r, "float16")
    if bf16 == "auto":
        bf16 = not fp16
        r.entries["bf16"].note = BF16_SRC
    if bf16 and fp16:
        r.entries["fp16"].note = BF16_OVER_FP16
    amp_bf16, amp_fp16 = bool(bf16 or bf16_load), bool(fp16 and not bf16)
    if upcast:
        return "bf16-mixed" if amp_bf16 else "fp16-mixed" if amp_fp16 else "fp32"
    if bf16 or bf16_load:
        return "bf16-true"  # Axolotl loads the weights in bf16 (torch_dtype) and trains them in place
    if in8 or fp16 or fp16_load:  # torch_dtype float16 (l. 193-194), load_in_8bit's even without fp16
        return "fp16-true" if method_ != "full" else "fp16-mixed"
    return "fp32"


def set_precision(r: KeyReader, method_: str, quantize: str, upcast: bool, layout: dict[str, Any]) -> None:
    """``precision`` (and, for adapter lora with load_in_4bit, what load_in_4bit did, in the report)."""
    upcast = upcast and not kbit_prepare_skipped(r, layout)
    value = precision(r, method_, quantize == "int8", upcast)
    r.set("bf16", "precision", value)
    if r.entries.get("load_in_4bit") and method_ == "lora" and switch(r, "load_in_4bit", False):
        r.set("load_in_4bit", "precision", value)
        r.entries["load_in_4bit"].note = LORA_4BIT_FP32 if upcast else LORA_4BIT_16BIT
