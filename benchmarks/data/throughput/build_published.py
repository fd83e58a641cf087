"""Writes published.jsonl from the published tables transcribed below (run: python build_published.py).

Each value is copied from the cited table cell; tokens/s is derived as each row's notes say. The
torchtune rows reuse the scenarios of ../measured/public.jsonl (same README rows, memory columns).
"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "published.jsonl"
mem = {json.loads(line)["id"]: json.loads(line) for line in open(HERE.parent / "measured" / "public.jsonl")}
rows = []

def add(id, source_id, source, sc, tps, design=False, notes=""):
    rows.append({"id": id, "source_id": source_id, "source": source, "scenario": sc,
                 "tokens_per_s": round(tps, 1), "design": design, "notes": notes})

# --- Qwen-1 README: A100-SXM4-80G, bs 1, GA 8, FA2, s/it per optimizer step (HF Trainer)
QC = "github.com/QwenLM/Qwen README.md @2df8e8ac450fa185c421a08b0090ef81826caa6e, section 'Profiling of Memory and Speed', table row '{m} | {meth}', column seq {s}: '{cell}'"
SEQ = [256, 512, 1024, 2048, 4096, 8192]
Q = {  # (model, method label, num_gpus, cells)
 ("1.8B", "LoRA"): (1, [1.0, 1.0, 1.1, 1.7, 3.3, 6.8]),
 ("1.8B", "Q-LoRA"): (1, [1.4, 1.4, 1.4, 2.0, 3.4, 6.5]),
 ("1.8B", "Full-parameter"): (1, [2.1, 2.2, 2.2, 2.3, 2.8, 5.6]),
 ("7B", "LoRA"): (1, [1.2, 1.5, 2.8, 5.2, 10.1, 21.3]),
 ("7B", "Q-LoRA"): (1, [3.0, 3.0, 3.5, 7.0, 11.6, 22.3]),
 ("7B", "Full-parameter"): (2, [4.0, 4.0, 4.5]),
 ("14B", "LoRA"): (1, [1.6, 2.4, 4.4, 8.4, 17.0, 36.0]),
 ("14B", "Q-LoRA"): (1, [5.3, 6.3, 8.2, 11.8, 20.1, 38.3]),
 ("72B", "LoRA + Deepspeed Zero3"): (4, [17.6, 20.5, 29.4, 45.7, 83.4, 161.5]),
 ("72B", "Q-LoRA"): (1, [27.4, 31.5, 41.4, 59.5, 97.7, 179.8]),
}
QID = {"1.8B": "Qwen/Qwen-1_8B", "7B": "Qwen/Qwen-7B", "14B": "Qwen/Qwen-14B", "72B": "Qwen/Qwen-72B"}
for (m, meth), (n, cells) in Q.items():
    for s, t in zip(SEQ[: len(cells)], cells, strict=True):
        sc = {"model": QID[m], "framework": "hf", "micro_batch_size": 1, "seq_len": s, "grad_accum": 8,
              "gradient_checkpointing": "full", "attention": "flash", "num_gpus": n, "gpu": "a100-80gb-sxm"}
        if meth.startswith("LoRA"):
            sc.update(method="lora", precision="bf16-true", lora_rank=64, lora_targets=["c_attn", "c_proj", "w1", "w2"],
                      lora_dropout=0.05)
        elif meth == "Q-LoRA":
            sc.update(method="qlora", quantize="gptq-int4", precision="fp16-true", lora_rank=64,
                      lora_targets=["c_attn", "c_proj", "w1", "w2"], lora_dropout=0.05)
        else:
            sc.update(method="full", precision="bf16-mixed", optimizer="adamw")
        sc["parallelism"] = "zero3" if ("Zero3" in meth or meth == "Full-parameter") else "none"
        cell = f"... / {t}s/it"
        add(f"QWEN1-{m}-{meth.split()[0]}-{s}", "QWEN1_README", QC.format(m=m, meth=meth, s=s, cell=cell), sc,
            n * 8 * s / t, design=(m == "1.8B"),
            notes="finetune.py LoraArguments: r 64, dropout 0.05, targets c_attn/c_proj/w1/w2. tokens/s = GPUs x batch 1 x GA 8 x seq / (s/it); finetune.py pads every sample to model_max_length. "
                  + ("Qwen-*-Chat-Int4 (GPTQ, auto-gptq kernels). " if meth == "Q-LoRA" else "")
                  + ("finetune_ds.sh: DeepSpeed ds_config_zero3.json, no offload. " if sc["parallelism"] == "zero3" else ""))

# --- torchtune README tables (totals over all GPUs; rows' scenarios from benchmarks/data/measured/public.jsonl)
TT = {
 "TT_README_2409": ("github.com/pytorch/torchtune README.md @30b8519e8, 'Memory and training speed', column 'Tokens/sec', row ", False,
   {1: 1650, 2: 2579, 3: 3083, 4: 4699, 5: 2413, 6: 1568, 7: 3497, 8: 653}),
 "TT_README_2405": ("github.com/pytorch/torchtune README.md @0217d44c2, table 'Peak Memory per GPU / Training Speed (tokens/sec)', row ", False,
   {19: 3155, 20: 2582, 21: 2768, 22: 702, 23: 1388, 24: 3384, 25: 2032}),
 "TT_README_OPT": ("github.com/pytorch/torchtune README.md @1814feb17, 'Optimization flags' table, column 'Tokens Per Second', row ", False,
   {10: 7075, 11: 8998, 12: 9174, 13: 7210, 14: 7309, 15: 7301, 16: 6960, 17: 8210, 18: 8035}),
}
compiled_2409 = True  # README note: "torch compile enabled"
# torchtune @0217d44c2 distributed recipes log rank 0's own count: recipes/full_finetune_distributed.py:475
# ``num_tokens += input_ids.numel()`` (that rank's micro-batches only, no all-reduce) and :506-513
# ``tokens_per_second = num_tokens / time_per_step`` logged ``if ... self._is_rank_zero``; the same in
# recipes/lora_finetune_distributed.py:550, :585-589. The 2 x and 4 x RTX 4090 cells are therefore per GPU.
# The 8 x A100 70B cells cannot be: 3,384 and 2,032 tokens/s per GPU would take 9.3e14 and 1.1e15 FLOP/s
# per GPU (LoRA 4 N, full 6 N x 4/3 recompute, N = 69e9), 3-4x the A100's 312 TFLOPS dense peak, so
# those are read as totals over the 8 GPUs.
PER_RANK_2405 = {21, 23}
# The @30b8519e8 "1x A6000" cells cannot have run on the Ampere RTX A6000 (gpus.csv rtxa6000: GA102, 154.8 TFLOPS
# dense BF16 with FP32 accumulate = its FP16-accumulate rate, GA102 whitepaper appendix; measured best matmul 123.3,
# plan/kernels.py GEMM_EFFICIENCY): the LoRA row's 4,699 tokens/s x 4 N (N = 8.03e9 matmul weights, frozen weights
# need only input gradients) = 1.51e14 FLOP/s of matmuls alone, 98 % of that peak and 1.22 x its measured best; the
# full row's 2,579 x 6 N = 1.24e14, above the measured best too. Both run 1.52-1.56 x the same table's RTX 4090 cells
# (4699/3083, 2579/1650) where an RTX A6000 has 0.74 x the 4090's matmul rate and 0.76 x its memory bandwidth. A 48 GB
# card of the Ada generation fits the memory column (37.4 / 30.3 GiB) and the speed: "A6000 Ada" is how the RTX 6000
# Ada is named beside it in the same months (AnswerDotAI/fsdp_qlora benchmarks_03_2024.md, "A6000 Ada 48GB"), so
# those two rows are scored on rtx6000ada (the memory dataset, ../measured/public.jsonl, keeps the README's name).
CARD_AS_RUN = {"TT_README_2409-2": "rtx6000ada", "TT_README_2409-4": "rtx6000ada"}
CARD_NOTE = ("Card: the README says '1x A6000'; scored as rtx6000ada (build_published.py CARD_AS_RUN: the cell's "
             "matmul FLOP/s exceed the Ampere RTX A6000's measured best). ")
for sid, (src, design, vals) in TT.items():
    for k, tps in vals.items():
        r = mem[f"{sid}-{k}"]
        sc = dict(r["scenario"])
        sc["framework"] = "torchtune"
        sc["model"] = sc["model"].replace("-Instruct", "")
        row = r["source"].split("row", 1)[1].strip()
        if sid == "TT_README_2409":
            sc["compile"] = True
        elif sid == "TT_README_2405":
            sc["compile"] = k == 19  # footnote ** 'Uses torch compile' on the QLoRA row only
        else:
            sc["compile"] = k >= 11  # '+ Compile' and every later row keep compile on
        if sid == "TT_README_2405" and k in PER_RANK_2405:
            add(f"{sid}-{k}", sid, src + row, sc, tps * sc["num_gpus"], design=design,
                notes=f"tokens/s = {sc['num_gpus']} GPUs x the cell: torchtune @0217d44c2's distributed recipes log rank 0's "
                      "tokens/s (num_tokens += input_ids.numel() on that rank, logged if _is_rank_zero). " + r["notes"][:200])
            continue
        fixed = CARD_AS_RUN.get(f"{sid}-{k}")
        if fixed:
            sc["gpu"] = fixed
        add(f"{sid}-{k}", sid, src + row, sc, tps, design=design,
            notes=(CARD_NOTE if fixed else "") + "tokens/s over all GPUs (the table's 8x A100 70B rows cannot be per GPU: "
                  "that would exceed the peak). " + r["notes"][:200])

# --- torchtitan docs/performance.md (H100 96GB HBM2e at 500 W on Grand Teton; TPS per GPU)
TTN = "github.com/pytorch/torchtitan docs/performance.md @d4c86e375 (removed in 820504e20), "
for tab, n, rowname, tps, comp in [(1, 8, "FSDP", 5762, False), (1, 8, "FSDP + torch.compile", 6667, True),
                                   (3, 128, "FSDP", 5605, False), (3, 128, "FSDP + torch.compile", 6514, True)]:
    sc = {"model": "meta-llama/Llama-3.1-8B", "framework": "torchtune", "method": "full", "precision": "bf16-mixed",
          "optimizer": "adamw", "micro_batch_size": 2, "seq_len": 8192, "grad_accum": 1,
          "gradient_checkpointing": "selective-op", "attention": "sdpa", "num_gpus": n, "parallelism": "fsdp",
          "gpu": "h100-96gb-hbm2e-500w", "compile": comp}
    if n > 8:  # the doc: 8 GPUs per host, hosts on an RDMA network of 400 Gb/s per GPU (8 x 400 Gb/s = ib-3200's rate)
        sc.update(num_nodes=n // 8, interconnect="ib-3200")
    add(f"TITAN-T{tab}-{n}-{'compile' if comp else 'eager'}", "TORCHTITAN_PERF", TTN + f"Table {tab}, row '{rowname}', TPS/GPU {tps}",
        sc, tps * n, notes="Llama 3.1 8B pre-training step (same computation as full fine-tuning), seq 8192 (torchtitan llama3_8b.toml), "
        "FSDP2 mixed precision bf16 params / fp32 reduce. Its 'selective' AC is op-level (torchtitan@9dec370 "
        "llama3_8b.toml mode 'selective', selective_ac_option 'op'; parallelize_llama.py _save_list: saves mm, sdpa, "
        "reduce_scatter outputs except every second mm, recomputes the rest): scenario 'selective-op'. "
        "Card: H100 96 GB HBM2e 2.4 TB/s at 500 W, 'peak between SXM and NVL' (the doc): benchmark card "
        "h100-96gb-hbm2e-500w in cards.csv (was h100-sxm and 'selective' before 2026-12-01). 128-GPU rows: 16 hosts of 8 "
        "(num_nodes 16), 400 Gb/s RDMA per GPU between hosts (interconnect ib-3200: 8 x 400 Gb/s RDMA per node; Grand "
        "Teton's backend network, same rate; the rows said one node before this correction).")

# --- Answer.AI fsdp_qlora benchmarks_03_2024.md (1024 dummy samples at context length; time = whole run)
AA = "github.com/AnswerDotAI/fsdp_qlora benchmarks_03_2024.md @05ed9f2a60f96a0795cb082bceab70a9b19fd213, "
def aa(id, where, model, method, n, gpu, mb, ctx, secs, parallelism, offload, design=False, notes="", ga=1, ckpt="full"):
    # train.py @4cd6923 (the code the memory rows of this write-up cite, found.jsonl AAI_FSDPQLORA_2403):
    # lora_target_modules "all" = k, q, v, up, down, gate (l. 1054-1055; no o_proj at any commit), lora_alpha 16,
    # replace_linear(..., Linear4bit, quant_type='nf4') with bnb's default compress_statistics=True (nf4-dq)
    sc = {"model": model, "framework": "hf", "method": method, "precision": "bf16-true", "lora_rank": 64,
          "lora_alpha": 16, "lora_targets": ["k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"],
          "lora_dropout": 0.1, "micro_batch_size": mb, "seq_len": ctx, "grad_accum": ga, "gradient_checkpointing": ckpt,
          "attention": "sdpa", "num_gpus": n, "parallelism": parallelism, "offload": offload, "gpu": gpu,
          "framework_version": "fsdp-qlora"}  # train.py's mp.spawn launcher (framework.py)
    if method == "qlora":
        sc["quantize"] = "nf4-dq"
    add(id, "ANSWERAI_FSDP_QLORA", AA + where, sc, 1024 * ctx / secs, design=design,
        notes="tokens/s = 1024 samples x context length / Time (s) (the Mistral rows' text confirms: 2,200 tokens/s per GPU at 483 s). "
              "train.py @4cd6923 defaults: lora_rank 64, lora_alpha 16, lora_target_modules 'all' = k, q, v, up, down, gate "
              "(no o_proj, l. 1054-1055), FSDP activation checkpointing, bnb NF4 with compress_statistics (double quantization) "
              "and quant_storage bf16 (l. 586-587). " + notes)
L7, Y34, L70, M7 = "meta-llama/Llama-2-7b-hf", "01-ai/Yi-34B", "meta-llama/Llama-2-70b-hf", "mistral-community/Mistral-7B-v0.2"
w4 = "'Case Study: A Dual 4090' / 'Llama-2 7B' table, row "
for i, (meth, off, ddp, bs, t) in enumerate([("lora", False, True, 4, 437), ("lora", False, False, 6, 481), ("lora", True, False, 10, 482),
                                             ("qlora", False, True, 8, 450), ("qlora", False, False, 10, 466), ("qlora", True, False, 12, 464)]):
    aa(f"AA-4090-7B-{i+1}", w4 + f"'{meth.upper() if meth=='lora' else 'QLoRA'} | CPU Offload {off} | DDP {ddp} | {bs}', Time {t}",
       L7, meth, 2, "rtx4090", bs, 2048, t, "fsdp-no-shard" if ddp else "fsdp", "optimizer+params" if off else "none",
       notes="2x RTX 4090 without NVLink, full PCIe 4.0 x16 each; 'DDP' = FSDP NO_SHARD.")
aa("AA-4090-34B-1", "'Dual 4090' / 'Yi 34B' table, row 'QLoRA | False | 2', Time 2,072", Y34, "qlora", 2, "rtx4090", 2, 2048, 2072, "fsdp", "none")
aa("AA-4090-34B-2", "'Dual 4090' / 'Yi 34B' table, row 'QLoRA | True | 4', Time 2,061", Y34, "qlora", 2, "rtx4090", 4, 2048, 2061, "fsdp", "optimizer+params")
aa("AA-4090-70B-1", "'Dual 4090' / 'Llama-2 70B' table, row 'QLoRA | True | 2', Time 4,399", L70, "qlora", 2, "rtx4090", 2, 2048, 4399, "fsdp", "optimizer+params")
aa("AA-4090-M7-1", "'Bonus: Mistral 7B' table, row 'QLoRA | True | 12 | 2,048', Time 483", M7, "qlora", 2, "rtx4090", 12, 2048, 483, "fsdp", "optimizer+params")
aa("AA-4090-M7-2", "'Bonus: Mistral 7B' table, row 'QLoRA | True | 1 | 24,576', Time 7,809", M7, "qlora", 2, "rtx4090", 1, 24576, 7809, "fsdp", "optimizer+params")
HW = [("A5000 24GB", "rtxa5000", 2, True, 2, 9688), ("A5000 24GB", "rtxa5000", 4, False, 1, 4829), ("A5000 24GB", "rtxa5000", 8, False, 1, 2613),
      ("A6000 Ada 48GB", "rtx6000ada", 2, False, 2, 5867), ("A6000 Ada 48GB", "rtx6000ada", 4, False, 3, 2904),
      ("A100 40GB SMX", "a100-40gb-sxm", 2, False, 1, 3277), ("A100 40GB SMX", "a100-40gb-sxm", 4, False, 4, 1266),
      ("A100 40GB SMX", "a100-40gb-sxm", 8, False, 4, 672), ("H100 80GB SXM", "h100-sxm", 4, False, 8, 667)]
for name, gid, n, off, bs, t in HW:
    aa(f"AA-HW-{gid}-{n}", f"'Recommendations for Different Hardware Configurations' table, row '{name} | {n} | {off} | {bs}', Time {t}",
       L70, "qlora", n, gid, bs, 2048, t, "fsdp", "optimizer+params" if off else "none",
       ga=max(1, round(32 / (bs * n))), ckpt="offload" if off else "full",
       notes="Llama-2 70B QLoRA. The section: 'effective batch size of 32 (or the closest we could get)': grad_accum = "
             "the nearest whole number of micro-batches to 32 samples (train.py gradient_accumulation_steps; no_sync False, "
             "so gradients are still reduced every micro-batch). " + (
             "'CPU+Activation Offload' True = --use_cpu_offload (FSDP CPUOffload(offload_params=True)) plus "
             "--use_activation_cpu_offload: train.py @4cd6923 l. 765-768 offload_wrapper(model) (torch save_on_cpu over the "
             "whole forward): the checkpointed layers' saved inputs in pinned host memory (scenario gradient_checkpointing offload)." if off else ""))
# --- this project's own runs (../measured/vramfit_h200.jsonl and vramfit_h100.jsonl: benchmarks/gpu_grid.py, torch
# 2.11.0+cu130, transformers 5.17.0): tokens/s = micro-batch x seq_len / the median optimizer-step time after the first
# step; H200 on 2026-12-04 (4 steps), H100 80GB HBM3 on 2026-12-05 (5 steps)
SC_KEYS = ("model", "method", "precision", "quantize", "lora_rank", "lora_alpha", "lora_targets", "optimizer",
           "micro_batch_size", "seq_len", "grad_accum", "gradient_checkpointing", "attention", "num_gpus", "parallelism",
           "gpu", "framework")
for card, steps in (("H200", 4), ("H100", 5)):
    seen = set()
    for line in open(HERE.parent / "measured" / f"vramfit_{card.lower()}.jsonl"):
        run = json.loads(line)["vramfit_run"]
        if run["id"] in seen:  # one line per counter, one throughput per run
            continue
        seen.add(run["id"])
        entry = run["notes"].split()[-1]
        sc = {k: run["scenario"][k] for k in SC_KEYS}
        sc.update({k: run["scenario"][k] for k in ("dora", "modules_to_save") if run["scenario"].get(k)})
        times = ", ".join(f"{t:.3f}" for t in run["details"]["step_times_s"])
        add(f"VRAMFIT-{card}-{entry}", f"VRAMFIT_{card}", f"benchmarks/data/measured/vramfit_{card.lower()}.jsonl run "
            f"{run['id']} (benchmarks/gpu_grid.py entry {entry}): step times {times} s", sc, run["tokens_per_s"],
            notes=f"vramfit measure on one {card} (torch 2.11.0+cu130, transformers 5.17.0, bitsandbytes 0.50.2): random "
                  f"token ids of exactly seq_len, AdamW, {steps} steps, the first (warm-up) left out of the median; short "
                  "steps (60-470 ms) include the Python and launch overheads of a plain training loop.")
with open(OUT, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(len(rows), sum(r["design"] for r in rows))
