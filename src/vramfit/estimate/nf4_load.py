"""What torchtune 0.1's single-device QLoRA recipe leaves cached in the allocator while it builds and loads the model.

The recipe builds the model on the GPU and quantizes every LoRA linear's base weight there, twice, with
torchao 0.1's un-chunked NF4 quantizer; it never calls ``torch.cuda.empty_cache()``, so the segments those
transients opened stay reserved through training (profile field ``nf4_load_on_gpu``):

1. Build (pytorch/torchtune@0914d5cfb recipes/lora_finetune_single_device.py ``_setup_model``: ``with
   utils.set_default_dtype(self._dtype), self._device: model = config.instantiate(cfg_model)``).
   torchtune/models/llama2/_component_builders.py ``lora_llama2`` builds ONE decoder layer, then
   modules/transformer.py ``TransformerDecoder.__init__`` deep-copies it per layer (``_get_clones``:
   ``copy.deepcopy(module)``); the first layer is freed when the builder returns. Each quantized linear:
   modules/peft/lora.py ``LoRALinear._create_weight_and_bias``: a bf16 ``nn.Linear`` weight, then
   ``to_nf4(linear.weight)``; a deep copy of an NF4 parameter runs ``aten.clone``, which torchtune
   overrides as ``to_nf4(get_original_weight())`` (torchtune/utils/_register_nf4_dispatch_ops.py ``clone``).
2. Load: ``model.load_state_dict(base_model_state_dict)`` from the host (FullModelHFCheckpointer,
   ``safe_torch_load`` on the CPU); each NF4 parameter's ``copy_`` is torchtune's ``inplace_copy``:
   ``to_nf4(src.to(dest_tensor.device))``, the fp16 checkpoint tensor moved to the GPU and converted to
   bf16 there, and the new NF4 pieces replace the old ones (same file).
3. The quantizer: pytorch/ao@v0.1 (torchtune 0.1 pins ``torchao==0.1``, pyproject.toml)
   torchao/dtypes/nf4tensor.py ``NF4Tensor.from_tensor``: ``double_quantize_scalers`` then
   ``convert_to_norm_float_weight``, whose ``quantize_tensor_nearest`` computes ``(value.unsqueeze(-1) -
   nf4).abs()`` over all ``numel`` elements at once: two ``numel x 16`` bf16 tensors (32 B per weight
   each), then ``.min(dim=-1)`` (bf16 values, int64 indices) and the int64 ``<< 4 |`` packing. ao PR #196
   (6081796bc, 2024-05-01, torchao v0.2.0) chunked it: "This can cause a large memory spike". The
   ``quantization_factor`` kept is a column view of an ``n_blocks``-element bf16 tensor (fixed by ao #298).
   ``get_original_weight`` (the clone) unpacks to int64 codes, bf16 values and materialised scales.

The build and load are replayed through the simulator's caching-allocator model
(:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`); small-pool tensors (norms, LoRA matrices) are
left out (they never share the large pool's segments). Consistency check, not a fit: for Llama-2-7B the
replay leaves 9.10 GB reserved after load; the QLoRA tutorial (pytorch/torchtune@0914d5cfb
docs/source/tutorials/qlora_finetune.rst) logged "Peak memory reserved, model init" 9.13 GB.
The step then runs in that residue: its tensors split the cached blocks where they fit (:func:`load_reserved`).
"""

from __future__ import annotations

from functools import lru_cache

from vramfit.scenario import Method, Parallelism, Quantize

_NF4 = (Quantize.NF4, Quantize.NF4_DQ)
NF4_BLOCK = 64  # torchao v0.1 nf4tensor.py to_nf4(block_size=64, ...)
NF4_SCALER_BLOCK = 256  # to_nf4(..., scaler_block_size=256)
NF4_LEVELS = 16  # the 16-entry nf4 lookup table quantize_tensor_nearest broadcasts against


def loads_nf4_on_gpu(r) -> bool:
    """Whether the step's engine builds and loads a QLoRA model as this module replays (one GPU, NF4)."""
    sc = r.sc
    return (r.profile.nf4_load_on_gpu and sc.method is Method.QLORA and sc.quantize in _NF4
            and sc.parallelism is Parallelism.NONE and sc.num_gpus == 1)


def block_weights(spec, adapters) -> tuple[tuple[int, bool], ...]:
    """One decoder block's linear weights in torchtune's module order, as (elements, quantized): attention
    q, k, v, output, then FeedForward w1 (gate), w2 (down), w3 (up) (torchtune@0914d5cfb modules/feed_forward.py
    ``FeedForward(w1, w2, w3)``); only LoRA linears are NF4 (``LoRALinear(quantize_base=True)``), the others
    stay bf16 ``nn.Linear``."""
    adapted = {a.target for a in adapters if a.per_layer}
    attn = [x for x in spec.block_linears if x.group == "attn"]
    mlp = [x for x in spec.block_linears if x.group == "mlp"]
    widen = [x for x in mlp if x.out_features == spec.intermediate_size]  # gate, up
    narrow = [x for x in mlp if x not in widen]  # down
    order = attn + widen[:1] + narrow + widen[1:]
    return tuple((x.in_features * x.out_features * x.count, x.name in adapted) for x in order)


class _Replay:
    """An allocator and its ``malloc``/``free``, with the quantizer's tensors (module docstring, 3)."""

    def __init__(self) -> None:
        from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

        self.a = CachingAllocatorModel()

    def m(self, n: int):
        return self.a.malloc(n)

    def f(self, *blocks) -> None:
        for b in blocks:
            self.a.free(b)

    def to_nf4(self, n: int) -> list:
        """``NF4Tensor.from_tensor`` on ``n`` bf16 elements; the pieces it keeps."""
        m, f, s = self.m, self.f, n // NF4_BLOCK * 2  # s: one bf16 per 64-block
        t, v, i = m(2 * n), m(s), m(4 * s)  # get_block_absmax: abs, max values, int64 indices
        f(t, i)
        s1 = m(s)  # scalers - mean
        f(v)
        t, t2 = m(s), m(s)  # abs of the scalers; 2 * expanded scaler_absmax (n_blocks elements)
        f(t)
        qf = m(s)  # 256 / (...): kept whole behind the [:, 0] view
        f(t2)
        q1, q2 = m(s), m(s)  # * factor, .round()
        f(q1)
        q3 = m(s)  # .clamp()
        f(q2)
        qs = m(s // 2)  # .to(int8)
        f(q3, s1)
        t, sc, i = m(2 * n), m(s), m(4 * s)  # convert_to_norm_float_weight: get_block_absmax again
        f(t, i)
        blocks = m(2 * n)  # scaled_blocks
        d, d2 = m(2 * NF4_LEVELS * n), m(2 * NF4_LEVELS * n)  # value - nf4, .abs()
        f(d)
        mv, mi = m(2 * n), m(8 * n)  # .min(dim=-1): bf16 values, int64 indices
        f(mv, d2)
        sh, o = m(4 * n), m(4 * n)  # int64 [::2] << 4, | [1::2]
        f(sh)
        qd = m(n // 2)  # .to(torch.uint8)
        f(o, mi, blocks, sc)
        return [qf, qs, qd]

    def original_weight(self, n: int):
        """``get_original_weight``: the bf16 weight it returns (its temporaries freed)."""
        m, f = self.m, self.f
        t = m(n // 2)
        first = m(4 * n)  # (quantized_data >> 4).to(torch.long)
        f(t)
        t = m(n // 2)
        second = m(4 * n)
        f(t)
        kept = [first, second, m(n), m(n)]  # nf4[first], nf4[second]: bf16, n / 2 elements each
        t = m(n // NF4_BLOCK * 2)
        kept.append(m(n // NF4_BLOCK * 2))  # dequantize_scalers
        f(t)
        for _ in range(2):  # repeated.flatten() materialised, times each half
            rep = m(n)
            kept.append(m(n))
            f(rep)
        w = m(2 * n)  # torch.stack(...).reshape(shape)
        f(*kept)
        return w


@lru_cache(maxsize=64)
def _loaded(block: tuple[tuple[int, bool], ...], layers: int, embed: int, head: int):
    """The allocator after build and load (module docstring, 1-2); callers replay on a copy."""
    p = _Replay()
    first = []
    for n, nf4 in block:  # the layer the builder makes
        if nf4:
            w = p.m(2 * n)
            first.append(p.to_nf4(n))
            p.f(w)
        else:
            first.append([p.m(2 * n)])
    p.m(embed)
    p.m(head)
    model = []
    for _ in range(layers):  # _get_clones: deepcopy per layer
        for n, nf4 in block:
            if nf4:
                w = p.original_weight(n)
                model.append((n, p.to_nf4(n)))
                p.f(w)
            else:
                model.append((n, None))
                p.m(2 * n)
    for pieces in first:
        p.f(*pieces)
    for k, (n, pieces) in enumerate(model):  # load_state_dict, in module order
        if pieces is None:
            continue  # a bf16 copy_ from the host converts on the CPU: no GPU tensor
        src, bf16 = p.m(2 * n), p.m(2 * n)
        model[k] = (n, p.to_nf4(n))
        p.f(*pieces, bf16, src)
    return p.a


def load_state(r):
    """The allocator as the build and load leave it (None where :func:`loads_nf4_on_gpu` is false)."""
    if not loads_nf4_on_gpu(r):
        return None
    spec, b = r.spec, r.sc.precision.param_bytes
    return _loaded(block_weights(spec, r.adapters), spec.num_hidden_layers, spec.embedding_params * b,
                   spec.lm_head_params * b)


def load_floor(r) -> int:
    """Reserved bytes after the build and load, plus the persistent bytes the replay leaves out (small-pool
    norms and LoRA matrices); 0 where nothing is replayed."""
    a = load_state(r)
    if a is None:
        return 0
    persistent = r.parts.weights + r.parts.quantized_base + r.parts.adapters
    return a.stats.reserved + max(0, persistent - a.stats.allocated)


def step_on_load(r) -> tuple[int, int, int]:
    """(segments the step opens on top of the load's cached blocks, the step's allocated high point, bytes of the
    load's segments wholly free through the whole step): the step's default-stream tensors (estimate/wrap_step.py
    ``step_program``) replayed on a copy of :func:`load_state`. The last is what a card without room gets back: a
    failed ``cudaMalloc`` releases every wholly free cached segment and retries (pytorch/pytorch@eb42ad6e
    c10/cuda/CUDACachingAllocator.cpp ``malloc``: ``release_cached_blocks``). Kept per architecture, scenario, card
    and profile (an estimate asks for the figure and for its note)."""
    key = (r.spec, r.sc, r.card, r.profile)
    found = _OPENED.get(key)  # read once: the web server's worker threads share this cache
    if found is None:
        from vramfit.estimate.allocator import run_events
        from vramfit.estimate.wrap_step import allocated_peak, step_program

        if len(_OPENED) >= _OPENED_KEPT:
            _OPENED.clear()
        a = load_state(r).clone()
        before, segs = a.stats.reserved, a.segments()
        free = [a.wholly_free_bytes(segs)]
        program = step_program(r)
        run_events(a, program, lambda: free.append(min(free[-1], a.wholly_free_bytes(segs))))
        found = _OPENED[key] = (a.stats.peak_reserved - before, allocated_peak(program), free[-1])
    return found


_OPENED: dict = {}
_OPENED_KEPT = 256  # a bound on the cache, not a memory figure


def load_reserved(r, allocated: int, reserved: int, required: bool = False) -> int:
    """``reserved`` raised to what the step reserves after the build and load: the load's reserved bytes
    (:func:`load_floor`), the segments the step's tensors open beyond its cached blocks, and the step's other
    tensors (gradients, optimizer states, workspaces: ``allocated`` less the persistent bytes and the step's
    replayed tensors). The persistent tensors' and the activations' segment rounding that ``reserved`` adds
    (reserved.reserved_bytes) is in the replay already, where the step's tensors split the load's cached blocks.
    ``required``: less the load's segments the step leaves wholly free (:func:`step_on_load`), but never below what
    the build and load themselves need (the replay's peak of segments holding a live block)."""
    floor = load_floor(r)
    if not floor:
        return reserved
    opened, program_peak, released = step_on_load(r)
    persistent = r.parts.weights + r.parts.quantized_base + r.parts.adapters
    step = floor + opened + max(0, allocated - persistent - program_peak)
    if not required:
        return max(reserved, step)
    a = load_state(r)
    return max(reserved, step - released, a.stats.peak_required + max(0, persistent - a.stats.allocated))


def step_fits_in_load(r) -> bool:
    """Whether the step's tensors all fit in the load's cached blocks (it opens no segment of its own)."""
    return bool(load_floor(r)) and step_on_load(r)[0] == 0


def load_notes(r, reserved: int) -> list[str]:
    """The assumption behind the load term, where it sets ``reserved`` (module docstring)."""
    floor = load_floor(r)
    if not floor:
        return []
    cached = floor - (r.parts.weights + r.parts.quantized_base + r.parts.adapters)
    if 100 * cached < reserved:
        return []
    return [f"Reserved includes {cached / 2**30:,.2f} GiB that building and quantizing the model on the GPU leaves "
            "cached (torchao 0.1's un-chunked to_nf4 per linear, at build and again in load_state_dict; the recipe "
            "calls no torch.cuda.empty_cache()); the step's tensors reuse those blocks where they fit, worked out for "
            f"micro-batches of {r.sc.seq_len} tokens."]


__all__ = ["block_weights", "load_floor", "load_notes", "load_reserved", "load_state", "loads_nf4_on_gpu",
           "step_fits_in_load", "step_on_load"]
