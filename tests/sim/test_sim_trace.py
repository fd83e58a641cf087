"""The live-bytes tracker: allocations, frees, views, scratch rules, gradient-merge folding."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from vramfit.sim.analyze import summarize
from vramfit.sim.cuda_emulation import flash_backward_scratch
from vramfit.sim.inplace import fold_accumulations
from vramfit.sim.qlora import bnb_gemm_4bit_transient
from vramfit.sim.trace import LiveTracker

MiB = 2**20


def _live(trace) -> set[int]:
    live: set[int] = set()
    for ev in trace.events:
        if ev >= 0:
            live.add(ev)
        else:
            live.discard(~ev)
    return live


def test_allocation_free_and_views():
    with FakeTensorMode():
        tr = LiveTracker()
        with tr:
            a = torch.empty(1024, 1024)  # 4 MiB
            b = a.view(-1)[:10]  # a view: no allocation
            c = a * 2  # 4 MiB
            a.mul_(3)  # in place: no allocation
            del c
        assert len(tr.trace.nbytes) == 2
        assert tr.trace.nbytes[0] == 4 * MiB
        assert _live(tr.trace) == {0}  # c was freed, a is alive
        del a, b


def test_marks_label_phases_and_existing_tensors_can_be_registered():
    with FakeTensorMode():
        w = torch.empty(256, 256)
        tr = LiveTracker()
        tr.mark("load")
        tr.track(w, "param")
        with tr:
            tr.mark("it1.mb1.forward")
            y = w @ w
        assert tr.trace.kinds[0] == "param"
        assert tr.trace.phases[1] == "it1.mb1.forward"
        assert [label for _, label in tr.trace.marks] == ["load", "it1.mb1.forward"]
        del y


def test_bnb_gemm_4bit_dequant_scratch_only_above_512_rows():
    with FakeTensorMode():
        small = torch.empty(1, 512, 4096, dtype=torch.bfloat16)
        big = torch.empty(1, 513, 4096, dtype=torch.bfloat16)
        b = torch.empty(4096 * 4096 // 2, 1, dtype=torch.uint8)
        absmax = torch.empty(4096 * 4096 // 64 // 256)
        nested = torch.empty(4096 * 4096 // 64, dtype=torch.uint8)
        assert bnb_gemm_4bit_transient((small, b, [4096, 4096], absmax), {}) == []
        scratch = bnb_gemm_4bit_transient((big, b, [4096, 4096], absmax), {"absmax_8bit": nested})
    sizes = {what: n for n, what, _, _ in scratch}
    assert sizes["dequantized weight"] == 4096 * 4096 * 2
    assert sizes["absmax_dq"] == 4 * nested.numel()


def test_flash_backward_scratch_has_dq_accumulator_and_gqa_expansion():
    with FakeTensorMode():
        q = torch.empty(1, 32, 1000, 128, dtype=torch.bfloat16)
        k = torch.empty(1, 8, 1000, 128, dtype=torch.bfloat16)
        scratch = flash_backward_scratch((None, q, k, k), {})
    names = [w for _, w, _, _ in scratch]
    assert names == ["softmax_d", "dq_accum", "dk_expanded", "dv_expanded"]
    assert scratch[1][0] == 4 * 1 * 1024 * 32 * 128  # fp32, seqlen rounded to 128


def test_gradient_merge_is_folded_into_the_first_gradient():
    # x feeds two branches: autograd adds their gradients (out of place for fake tensors)
    with FakeTensorMode():
        w1 = torch.empty(64, 64, requires_grad=True)
        w2 = torch.empty(64, 64, requires_grad=True)
        x = torch.empty(4096, 64, requires_grad=True)
        tr = LiveTracker()
        with tr:
            tr.mark("it1.mb1.forward")
            h = x * 2
            loss = (h @ w1).sum() + (h @ w2).sum()
            tr.mark("it1.mb1.backward")
            tr.in_backward = True
            loss.backward()
            tr.in_backward = False
            tr.mark("end")
    assert tr.trace.accum, "the input-buffer merge of h's two gradients was not seen"
    folded = fold_accumulations(tr.trace)
    assert len(folded.events) == len(tr.trace.events) - 2
    assert summarize(folded, True).peak_allocated <= summarize(tr.trace, True).peak_allocated


def test_a_merge_into_a_view_stays_out_of_place():
    # a tied weight: the output layer's gradient (TBackward of mm_mat2_backward's transposed product) is a view, whose
    # storage has two users, so CUDA adds the embedding's gradient out of place too (sim/inplace.py)
    with FakeTensorMode():
        w = torch.empty(512, 64, requires_grad=True)
        ids = torch.randint(0, 512, (2, 32))
        tr = LiveTracker()
        with tr:
            tr.mark("it1.mb1.forward")
            h = torch.nn.functional.embedding(ids, w) * 2
            loss = torch.nn.functional.linear(h, w).float().sum()
            tr.mark("it1.mb1.backward")
            tr.in_backward = True
            loss.backward()
            tr.in_backward = False
            tr.mark("end")
    assert not tr.trace.accum
    weight_sized = [n for n in tr.trace.nbytes if n == 512 * 64 * 4]
    assert len(weight_sized) >= 3  # the head's gradient, the embedding's and their sum


def test_autocast_query_answers_as_on_cuda_under_cpu_autocast():
    # PEFT's bitsandbytes LoRA layers cast their input to the adapter dtype only when the no-argument
    # (CUDA) query says autocast is off (peft v0.21.2 tuners/lora/bnb.py); a CUDA run under autocast says on
    from vramfit.sim.cuda_emulation import cuda_autocast_query, patched

    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled() is False  # what the unpatched fake CPU run answered
        with patched(cuda_autocast_query()):
            assert torch.is_autocast_enabled() is True
            assert torch.is_autocast_enabled("cuda") is True
            assert torch.is_autocast_enabled("cpu") is True
    with patched(cuda_autocast_query()):
        assert torch.is_autocast_enabled() is False
    assert torch.is_autocast_enabled() is False
