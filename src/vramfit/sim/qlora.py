"""QLoRA's 4-bit base without quantizing anything: bitsandbytes layers with directly built quant state.

``bitsandbytes.nn.Params4bit`` is a tensor subclass that cannot wrap a fake tensor, and quantizing
needs data. :class:`SimLinear4bit` is a ``bnb.nn.Linear4bit`` (so PEFT dispatches its bnb LoRA layer)
whose packed weight and ``QuantState`` tensors are built with the shapes and dtypes
``bitsandbytes.functional.quantize_4bit`` produces (bitsandbytes 0.50 ``_ops.py`` fake kernel,
``functional.py``; summarised in ``shared/design/cuda-memory-facts.md`` section 3):

- packed weight ``[(n + 1) // 2, 1]`` uint8 (``quant_storage=torch.uint8``; in the model's 16-bit dtype, the same
  bytes, where FSDP1 flattens it: :func:`prepare_qlora`);
- ``absmax``: fp32 ``[ceil(n / 64)]``, or with double quantization uint8 ``[ceil(n / 64)]`` plus a nested
  state (fp32 absmax ``[ceil(blocks / 256)]``, 256-entry fp32 code) and an fp32 scalar ``offset``;
- the 16-entry NF4/FP4 code (fp32).

Forward and backward run bitsandbytes' own ``MatMul4Bit`` (``bnb.matmul_4bit``): its backward
dequantizes with the library's ops (their fake kernels give the transient's shape); the CUDA forward's
dequantize-then-``F.linear`` scratch, which the fused op's fake kernel hides, is added by
:func:`vramfit.sim.trace.bnb_gemm_4bit_transient`. The same module runs on a real GPU (values are
uninitialised; memory is what matters).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from vramfit.scenario import Quantize, Scenario

BLOCKSIZE = 64  # bitsandbytes functional.quantize_4bit default blocksize
NESTED_BLOCKSIZE = 256  # double quantization of the absmax (functional.py quantize_blockwise blocksize=256)


def _linear4bit_base() -> type:
    import bitsandbytes as bnb

    return bnb.nn.Linear4bit


def is_linear(mod: torch.nn.Module) -> bool:
    return isinstance(mod, torch.nn.Linear)


def make_sim_linear4bit(lin: torch.nn.Linear, quant_type: str, double_quant: bool,
                        compute_dtype: torch.dtype, weight_dtype: torch.dtype,
                        storage: torch.dtype = torch.uint8) -> torch.nn.Module:
    """A bitsandbytes 4-bit layer equivalent to quantizing ``lin`` (built on ``lin``'s device); ``storage``: the
    packed weight's dtype (``bnb_4bit_quant_storage``), the same bytes in elements of that size."""
    base = _linear4bit_base()
    cls = _sim_class(base)
    return cls(lin, quant_type, double_quant, compute_dtype, weight_dtype, storage)


_SIM_CLASS: dict[type, type] = {}


def _sim_class(base: type) -> type:
    if base in _SIM_CLASS:
        return _SIM_CLASS[base]

    class SimLinear4bit(base):  # type: ignore[misc, valid-type]
        """bnb.nn.Linear4bit whose quantized weight and quant state are built, not computed."""

        def __init__(self, lin: torch.nn.Linear, quant_type: str, double_quant: bool,
                     compute_dtype: torch.dtype, weight_dtype: torch.dtype,
                     storage: torch.dtype = torch.uint8) -> None:
            torch.nn.Module.__init__(self)
            self.in_features = lin.in_features
            self.out_features = lin.out_features
            dev = lin.weight.device
            n = lin.in_features * lin.out_features
            blocks = math.ceil(n / BLOCKSIZE)
            per = 2 * storage.itemsize  # 4-bit codes per storage element (bitsandbytes Params4bit quant_storage)
            w = torch.nn.Parameter(torch.empty(((n + per - 1) // per, 1), dtype=storage, device=dev),
                                   requires_grad=False)
            w.compress_statistics = double_quant  # read by PEFT's bnb dispatcher
            w.quant_type = quant_type
            self.weight = w
            self.bias = lin.bias
            if self.bias is not None:
                self.bias.requires_grad_(False)
            self.compute_dtype = compute_dtype
            self.compute_type_is_set = True
            self.quant_state = None
            self.quant_storage = storage
            self.support_avx512bf16_for_cpu = False
            self._quant_type = quant_type
            self._weight_dtype = weight_dtype
            self._double_quant = double_quant
            self.register_buffer("code", torch.empty(16, dtype=torch.float32, device=dev), persistent=False)
            if double_quant:
                nested = math.ceil(blocks / NESTED_BLOCKSIZE)
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=dev), persistent=False)
                self.register_buffer("nested_absmax", torch.empty(nested, dtype=torch.float32, device=dev),
                                     persistent=False)
                self.register_buffer("nested_code", torch.empty(256, dtype=torch.float32, device=dev),
                                     persistent=False)
                self.register_buffer("offset", torch.empty((), dtype=torch.float32, device=dev), persistent=False)
            else:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32, device=dev),
                                     persistent=False)

        def _state(self) -> Any:
            from bitsandbytes.functional import QuantState

            state2 = None
            offset = None
            if self._double_quant:
                state2 = QuantState(absmax=self.nested_absmax, code=self.nested_code,
                                    blocksize=NESTED_BLOCKSIZE, dtype=torch.float32)
                offset = self.offset
            return QuantState(absmax=self.absmax, shape=torch.Size([self.out_features, self.in_features]),
                              code=self.code, blocksize=BLOCKSIZE, quant_type=self._quant_type,
                              dtype=self._weight_dtype, offset=offset, state2=state2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # bitsandbytes 0.50 nn/modules.py Linear4bit.forward, training path
            import bitsandbytes as bnb

            inp_dtype = x.dtype
            if self.compute_dtype is not None:
                x = x.to(self.compute_dtype)
            bias = self.bias
            if bias is not None:
                if bias.dtype != x.dtype:
                    bias.data = bias.data.to(x.dtype)
                bias = bias.to(self.compute_dtype)
            return bnb.matmul_4bit(x, self.weight, bias=bias, quant_state=self._state()).to(inp_dtype)

    _SIM_CLASS[base] = SimLinear4bit
    return SimLinear4bit


def patch_dora_dequantize() -> None:
    """Let PEFT's DoRA de-quantize a :class:`SimLinear4bit`. DoRA reads the base weight through
    ``dequantize_module_weight`` (peft v0.21.2 utils/integrations.py), which knows bitsandbytes' ``Params4bit`` by its
    class name and de-quantizes it with ``bnb.functional.dequantize_4bit(weight.data, weight.quant_state)``
    (``dequantize_bnb_weight``); the simulated layer's packed weight is a plain Parameter (``Params4bit`` cannot wrap a
    fake tensor), so the same call is made here with the layer's built quant state. Other modules are left to PEFT."""
    import peft.tuners.lora.dora as dora

    original = dora.dequantize_module_weight
    if getattr(original, "vramfit_sim", False):
        return

    def dequantize(module: torch.nn.Module) -> torch.Tensor:
        if type(module) in _SIM_CLASS.values():
            import bitsandbytes as bnb

            return bnb.functional.dequantize_4bit(module.weight.data, module._state())
        return original(module)

    dequantize.vramfit_sim = True  # type: ignore[attr-defined]
    dora.dequantize_module_weight = dequantize


def quantizable_linears(model: torch.nn.Module) -> tuple[list[tuple[str, torch.nn.Linear]], list[str]]:
    """The linears transformers' bitsandbytes integration replaces, and the subclassed ones it leaves.

    transformers 5 ``integrations/bitsandbytes.py`` ``replace_with_bnb_linear`` converts modules with
    ``type(module) is nn.Linear`` (or ``Conv1D``), except the output embeddings (``quantizers/base.py``
    ``get_keys_to_not_convert``). Subclasses such as Falcon's ``FalconLinear`` are not converted.
    """
    head = model.get_output_embeddings()
    keep, skipped = [], set()
    for name, mod in model.named_modules():
        if mod is head or not isinstance(mod, torch.nn.Linear):
            continue
        if type(mod) is torch.nn.Linear:
            keep.append((name, mod))
        else:
            skipped.add(type(mod).__name__)
    return keep, sorted(skipped)


def _vision_linears_kept(model: torch.nn.Module, scenario: Scenario) -> set[str]:
    """Names of the linears outside the language model (the vision tower and projector) that the scenario's
    quantize_vision leaves 16-bit; none where they are quantized or the model has no vision part."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.vision import vision_quantized

    if vision_quantized(scenario, scenario_profile(scenario)):
        return set()
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    inside = {id(m) for m in decoder.modules()} | {id(head)}
    return {name for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) and id(mod) not in inside}


_MATMUL_NOTE = ("QLoRA 4-bit matmul: bitsandbytes 0.50 MatMul4Bit; on CUDA more than 512 tokens per micro-batch take "
                "the dequantize + F.linear path (a compute-dtype copy of the weight while the matmul runs; fused "
                "kernel below), backward dequantizes the weight again.")


def _storage_note(quant_type: str, double_quant: bool, compute_dtype: torch.dtype,
                  storage: torch.dtype = torch.uint8) -> str:
    dq = "with" if double_quant else "without"
    kept = "" if storage == torch.uint8 else " (the quant storage FSDP1 flattens beside the block's 16-bit tensors)"
    return (f"QLoRA: decoder-block linears stored as bitsandbytes 4-bit {quant_type} ({dq} double quantization, "
            f"blocksize 64, {str(storage).replace('torch.', '')} storage{kept}), compute dtype "
            f"{str(compute_dtype).replace('torch.', '')}; lm_head kept.")


def prepare_qlora(model: Any, scenario: Scenario, compute_dtype: torch.dtype) -> list[str]:
    """Swap in 4-bit layers, then run ``peft.prepare_model_for_kbit_training`` on the (meta) model."""
    from peft import prepare_model_for_kbit_training

    from vramfit.estimate.framework import scenario_profile
    from vramfit.scenario import Checkpointing
    from vramfit.sim.fsdp import traces_fsdp1

    quant_type = "fp4" if scenario.quantize in (Quantize.FP4, Quantize.FP4_DQ) else "nf4"
    double_quant = scenario.quantize in (Quantize.NF4_DQ, Quantize.FP4_DQ)
    linears, skipped = quantizable_linears(model)
    kept_vision = _vision_linears_kept(model, scenario)
    linears = [(name, lin) for name, lin in linears if name not in kept_vision]
    # FSDP1 flattens a unit's tensors into one FlatParameter of one dtype: the recipes that shard QLoRA with it store
    # the 4-bit codes in the model's dtype (transformers v5.24.0 distributed/fsdp.py update_fsdp_plugin_peft reads
    # bnb_4bit_quant_storage; AnswerDotAI/fsdp_qlora@4cd6923 train.py quant_storage=torch_dtype)
    storage = compute_dtype if traces_fsdp1(scenario) else torch.uint8
    for name, lin in linears:
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, make_sim_linear4bit(lin, quant_type, double_quant, compute_dtype, compute_dtype, storage))
    model.is_loaded_in_4bit = True
    gc = scenario.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD)
    if not scenario_profile(scenario).qlora_unquantized_fp32:
        # kbit_prepare no (or a framework whose recipe never calls it): no fp32 upcast; get_peft_model freezes the
        # base later, and the Trainer's non-reentrant checkpointing needs no input that requires grad
        return _unprepared_notes(model, quant_type, double_quant, compute_dtype, storage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_model_for_kbit_training(model, use_gradient_checkpointing=gc,
                                        gradient_checkpointing_kwargs={"use_reentrant": False})
    notes = _trl_embeddings_to_bf16(model, scenario)
    if not scenario.precision.mixed and compute_dtype != torch.float32:
        notes.append(
            "QLoRA runs under autocast in the compute dtype, as HF Trainer's bf16=True/fp16=True does: "
            "without it the fp32 embeddings and norms left by prepare_model_for_kbit_training would make "
            "every activation fp32 (Linear4bit returns its input's dtype)."
        )
    experts = sorted({name.rsplit(".", 1)[-1] for name, p in model.named_parameters() if p.dim() == 3})
    if experts:
        notes.append(f"QLoRA: the expert weights ({', '.join(experts)}) are 3-D parameters, not nn.Linear: "
                     "bitsandbytes leaves them unquantized (fp32 after prepare_model_for_kbit_training).")
    if skipped:
        notes.append(
            f"QLoRA: transformers' replace_with_bnb_linear converts only exact nn.Linear modules, so this "
            f"model's {', '.join(skipped)} layers stay unquantized (and become fp32 in prepare_model_for_kbit_training)."
        )
    if kept_vision:
        notes.append(f"QLoRA: the {len(kept_vision)} vision tower and projector linears stay 16-bit "
                     "(quantize_vision; as a llm_int8_skip_modules entry for them does).")
    return notes + [
        _storage_note(quant_type, double_quant, compute_dtype),
        "QLoRA: peft.prepare_model_for_kbit_training casts every other fp16/bf16 parameter (embeddings, "
        "norms, lm_head) to fp32" + (" and enables gradient checkpointing." if gc else "."),
        _MATMUL_NOTE,
    ]


def _unprepared_notes(model: Any, quant_type: str, double_quant: bool, compute_dtype: torch.dtype,
                      storage: torch.dtype) -> list[str]:
    """The QLoRA base without prepare_model_for_kbit_training (``kbit_prepare`` no): every parameter frozen, as
    get_peft_model leaves the base, and the unquantized ones in the model's own dtype."""
    for p in model.parameters():
        p.requires_grad_(False)
    return [
        _storage_note(quant_type, double_quant, compute_dtype, storage),
        "QLoRA without prepare_model_for_kbit_training (kbit_prepare no): embeddings, norms and lm_head stay in the "
        "model's dtype; outside -mixed no autocast (bf16-true: the whole model in the 16-bit dtype, as Answer.AI's "
        "train.py precision bf16 runs it), so PEFT casts each input to the fp32 adapters' dtype.",
        _MATMUL_NOTE,
    ]


def _trl_embeddings_to_bf16(model: Any, scenario: Scenario) -> list[str]:
    """TRL v0.7.6-v0.21.x SFTTrainer's ``peft_module_casting_to_bf16`` after prepare_model_for_kbit_training (profile
    ``qlora_16bit_embeddings``; trl v0.21.0 trainer/utils.py l. 582-589): the fp32 embedding and head modules back
    to bf16, the norms left fp32. TRL picks them by module name (embed_tokens, lm_head, wte, wpe); the model's own
    accessors name the same modules here."""
    from vramfit.estimate.core import qlora_embeddings_bf16
    from vramfit.estimate.framework import scenario_profile

    if not qlora_embeddings_bf16(scenario, scenario_profile(scenario)):
        return []
    for module in {id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
        if module.weight.dtype == torch.float32:
            module.to(torch.bfloat16)
    return ["QLoRA: TRL's SFTTrainer (framework_version trl-0.21) casts the embeddings and lm_head back to bf16 "
            "after prepare_model_for_kbit_training (peft_module_casting_to_bf16); the norms stay fp32."]


#: bitsandbytes 0.50 CUDA ``gemm_4bit`` runs its own kernel only for few rows, else it dequantizes the
#: weight and calls F.linear (bitsandbytes@0.50.1 backends/cuda/ops.py ``_gemm_4bit_use_custom_cuda``):
#: weights of >= 4 Mi elements fall back above 512 rows ("custom wins up to M=512; dequant+F.linear wins
#: above that"); smaller weights above 320 rows (the sm90/sm86 caps; A100 allows up to 1536).
BNB_CUSTOM_MAX_M_LARGE = 512
BNB_CUSTOM_MAX_M_SMALL = 320
BNB_SMALL_WEIGHT = 4 * 1024 * 1024


def bnb_gemm_4bit_transient(args: tuple, kwargs: dict) -> list[tuple[int, str, tuple[int, ...], str]]:
    """Scratch of ``bitsandbytes::gemm_4bit`` on CUDA that its fake kernel hides.

    When it falls back (see the constants above), ``_dequant_linear_fallback`` makes ``absmax_dq`` and
    ``absmax = absmax_dq + offset`` (fp32, one per 64-block, double quant only) and
    ``B_dq = torch.empty(shapeB, dtype=A.dtype)``, all live while ``F.linear`` writes the output.
    The custom kernel needs no weight-sized scratch.
    """
    a, _b, shape_b, absmax = args[0], args[1], args[2], args[3]
    m = a.numel() // a.shape[-1]
    small = int(shape_b[0]) * int(shape_b[1]) < BNB_SMALL_WEIGHT
    if m <= (BNB_CUSTOM_MAX_M_SMALL if small else BNB_CUSTOM_MAX_M_LARGE):
        return []
    out = []
    absmax_8bit = kwargs.get("absmax_8bit", args[7] if len(args) > 7 else None)
    if absmax_8bit is not None:
        blocks = absmax_8bit.numel()
        out.append((4 * blocks, "absmax_dq", (blocks,), "float32"))
        out.append((4 * blocks, "absmax + offset", (blocks,), "float32"))
    del absmax
    n, k = int(shape_b[0]), int(shape_b[1])
    out.append((n * k * a.element_size(), "dequantized weight", (n, k), str(a.dtype).replace("torch.", "")))
    return out
