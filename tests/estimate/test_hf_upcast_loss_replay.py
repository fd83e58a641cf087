"""The loss of transformers < 4.45 (``logits.float()`` in the model) replayed tensor by tensor through the
caching-allocator model (estimate/hf_upcast_loss.py ``_hf_upcast_in_model_loss``), checked against the tensors torch's
own autograd makes for the same code."""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vramfit.estimate import resolve_spec
from vramfit.estimate.allocator import transient_reserved
from vramfit.estimate.step import compute
from vramfit.estimate.transients import step_transients
from vramfit.scenario import parse_scenario

MiB = 1024**2
V = 32000  # Llama-2's vocabulary


def _step(**keys):
    sc = parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "gradient_checkpointing": "full",
                         "framework_version": "transformers-4.44+peft-0.11", **keys})
    _, spec, _, _ = resolve_spec(sc)
    return compute(spec, sc)


def _signed(events: list[int]) -> list[int]:
    """Allocator events as +bytes (allocation) / -bytes (free)."""
    sizes: list[int] = []
    out = []
    for ev in events:
        if ev >= 0:
            sizes.append(ev)
            out.append(ev)
        else:
            out.append(-sizes[-ev - 1])
    return out


class _Storages(TorchDispatchMode):
    """Every new storage of at least ``floor`` bytes an op makes, and its release, as +bytes / -bytes."""

    def __init__(self, floor: int) -> None:
        super().__init__()
        self.floor, self.log, self.seen = floor, [], set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() >= self.floor:
                st = t.untyped_storage()
                if st.data_ptr() not in self.seen:
                    self.seen.add(st.data_ptr())
                    self.log.append(st.nbytes())
                    weakref.finalize(st, self._freed, st.data_ptr(), st.nbytes())
        return out

    def _freed(self, ptr: int, nbytes: int) -> None:
        self.seen.discard(ptr)  # the host allocator may hand the address to a later tensor
        self.log.append(-nbytes)


def _torch_loss(batch: int, seq: int) -> list[int]:
    """transformers v4.39.3 LlamaForCausalLM.forward's loss on CPU (bf16 lm_head output), the outputs dropped before
    backward as the Trainer does; the logits-sized storages it makes and frees."""
    hidden = torch.randn(batch, seq, 8, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(V, 8, dtype=torch.bfloat16)
    labels = torch.randint(0, V, (batch, seq))
    mode = _Storages(2 * batch * (seq - 1) * V)
    with mode:
        logits = torch.nn.functional.linear(hidden, weight).float()
        shift_logits = logits[..., :-1, :].contiguous()
        loss = torch.nn.CrossEntropyLoss()(shift_logits.view(-1, V), labels[..., 1:].contiguous().view(-1))
        del shift_logits, logits
        loss.backward()
    return mode.log


def test_the_replay_is_the_tensor_sequence_autograd_makes():
    # forward: 16-bit logits, their fp32 copy (the 16-bit ones die), the shifted copy, log_softmax's output;
    # backward: nll_loss's and log_softmax's gradients, slice_backward's zeros of the unshifted size, the 16-bit
    # gradient. The replay counts the shifted tensors (the copy, log_softmax's output, its gradients) at the logits'
    # size: one token row (4 x batch x vocab bytes) more than torch's
    # (+1 below: one row more; at one sequence there is no shifted copy, so two events fewer)
    shifted = {1: [0, 0, 0, 1, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0],
               2: [0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0]}
    for batch, rows in shifted.items():
        replay = _signed(step_transients(_step(micro_batch_size=batch, seq_len=16), loss_only=True))
        real = _torch_loss(batch, 16)
        assert [x > 0 for x in replay] == [x > 0 for x in real]
        assert [abs(a) - abs(b) for a, b in zip(replay, real, strict=True)] == [4 * batch * V * n for n in rows]


def test_the_16_bit_logits_and_their_gradient_keep_a_half_size_segment():
    # 6 x 2048 tokens: the fp32 logits are 1500 MiB (the shifted tensors counted at that size); the 750 MiB 16-bit
    # logits open a segment no fp32 tensor fits, which their gradient reuses. High point: the kept fp32 logits, log_softmax's output and its two gradients
    r = _step(micro_batch_size=6, seq_len=2048, keeps_outputs=True)
    assert transient_reserved(step_transients(r, loss_only=True)) == (4 * 1500 * MiB, 4 * 1500 * MiB + 750 * MiB)
