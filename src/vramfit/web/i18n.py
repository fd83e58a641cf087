"""Interface strings in English and (European) Portuguese.

``STRINGS[key] = (english, portuguese)``. The page templates use them server-side, and the
calculator's JavaScript gets the chosen language's table as a JSON data block. The estimator's
assumption sentences stay in English (they come from the library); the guide's prose lives in
its own templates (``guide_en.html``, ``guide_pt.html``).
"""

from __future__ import annotations

LANGS = ("en", "pt")
HTML_LANG = {"en": "en", "pt": "pt-PT"}

STRINGS: dict[str, tuple[str, str]] = {
    # navigation and page
    "nav.calculator": ("Calculator", "Calculadora"),
    "nav.guide": ("Guide", "Guia"),
    "nav.api": ("API schema", "Esquema da API"),
    "lang.switch": ("Português", "English"),
    "calc.title": ("GPU memory for fine-tuning", "Memória de GPU para ajuste fino"),
    "calc.lead": ("Per-GPU peak memory of one training step, by component, and the cards it fits.",
                  "Pico de memória por GPU de um passo de treino, por componente, e as placas onde cabe."),
    "footer": ("vramfit estimates; measure a short run before renting for long.",
               "O vramfit estima; mede uma execução curta antes de alugar por muito tempo."),
    # form sections
    "sec.model": ("Model", "Modelo"),
    "sec.training": ("Training", "Treino"),
    "sec.lora": ("LoRA adapters", "Adaptadores LoRA"),
    "sec.savers": ("Memory savers", "Poupança de memória"),
    "sec.gpus": ("GPUs", "GPUs"),
    "sec.planner": ("Dataset (for time and cost)", "Conjunto de dados (para tempo e custo)"),
    "src.catalog": ("Catalog", "Catálogo"),
    "src.config": ("config.json", "config.json"),
    "src.params": ("Parameter count", "Número de parâmetros"),
    "model.search": ("Search the catalog (e.g. llama 8b, qwen, gemma)",
                     "Pesquisar no catálogo (ex.: llama 8b, qwen, gemma)"),
    "model.none": ("No catalog model matches.", "Nenhum modelo do catálogo corresponde."),
    "config.paste": ("Paste a Hugging Face config.json, or choose the file",
                     "Cola um config.json do Hugging Face, ou escolhe o ficheiro"),
    "config.note": ("Read as data only, never executed.", "Lido apenas como dados, nunca executado."),
    "params.hint": ("e.g. 7B, 1.5b, 7e9 (a generic dense decoder of that size)",
                    "ex.: 7B, 1.5b, 7e9 (um descodificador denso genérico desse tamanho)"),
    "auto": ("auto (default)", "auto (predefinição)"),
    "none": ("none", "nenhuma"),
    "alpha.hint": ("default 2 × rank", "predefinição 2 × rank"),
    "dropout.hint": ("framework default", "predefinição da framework"),
    "targets.hint": ("all-linear, or module names separated by commas",
                     "all-linear, ou nomes de módulos separados por vírgulas"),
    "dataset.hint": ("tokens, e.g. 50M or 2e9", "tokens, ex.: 50M ou 2e9"),
    # scenario keys
    "k.method": ("Method", "Método"),
    "k.precision": ("Precision", "Precisão"),
    "k.quantize": ("Base quantization", "Quantização da base"),
    "k.framework": ("Framework", "Framework"),
    "k.lora_rank": ("Rank r", "Rank r"),
    "k.lora_alpha": ("Alpha", "Alpha"),
    "k.lora_targets": ("Target modules", "Módulos alvo"),
    "k.lora_dropout": ("Dropout", "Dropout"),
    "k.optimizer": ("Optimizer", "Otimizador"),
    "k.optimizer_in_backward": ("Optimizer step inside backward", "Passo do otimizador dentro do backward"),
    "k.compile": ("torch.compile (model and loss)", "torch.compile (modelo e perda)"),
    "k.quantize_experts": ("Quantize MoE experts", "Quantizar os especialistas MoE"),
    "k.micro_batch_size": ("Micro-batch per GPU", "Micro-batch por GPU"),
    "k.seq_len": ("Sequence length", "Comprimento de sequência"),
    "k.grad_accum": ("Gradient accumulation", "Acumulação de gradientes"),
    "k.gradient_checkpointing": ("Gradient checkpointing", "Checkpointing de gradientes"),
    "k.attention": ("Attention kernel", "Kernel de atenção"),
    "k.loss": ("Loss", "Perda"),
    "k.num_gpus": ("GPUs", "GPUs"),
    "k.parallelism": ("Sharding", "Fragmentação (sharding)"),
    "k.offload": ("CPU offload", "Descarga para CPU"),
    "k.gpu": ("Target card", "Placa alvo"),
    "k.dataset_tokens": ("Dataset size", "Tamanho do conjunto de dados"),
    "k.epochs": ("Epochs", "Épocas"),
    "k.model": ("Model", "Modelo"),
    "k.params": ("Parameters", "Parâmetros"),
    "k.config_json": ("config.json", "config.json"),
    # choices with a plain-words gloss
    "o.method.full": ("full — every weight", "full — todos os pesos"),
    "o.method.lora": ("lora — adapters, 16-bit base", "lora — adaptadores, base 16 bits"),
    "o.method.qlora": ("qlora — adapters, 4-bit base", "qlora — adaptadores, base 4 bits"),
    "o.gradient_checkpointing.none": ("none — keep all activations", "none — guardar todas as ativações"),
    "o.gradient_checkpointing.full": ("full — recompute every block", "full — recalcular cada bloco"),
    "o.gradient_checkpointing.selective": ("selective — recompute attention", "selective — recalcular a atenção"),
    "o.gradient_checkpointing.offload": ("offload — block inputs in host RAM", "offload — entradas na RAM do host"),
    "o.attention.sdpa": ("sdpa — memory-efficient", "sdpa — eficiente em memória"),
    "o.attention.flash": ("flash — FlashAttention", "flash — FlashAttention"),
    "o.attention.eager": ("eager — seq_len² scores", "eager — scores seq_len²"),
    "o.loss.standard": ("standard — full fp32 logits", "standard — logits fp32 completos"),
    "o.loss.chunked": ("chunked — over the sequence", "chunked — por blocos da sequência"),
    "o.loss.fused": ("fused — no logits (Liger, CCE)", "fused — sem logits (Liger, CCE)"),
    # results
    "r.peak": ("Per-GPU peak", "Pico por GPU"),
    "r.device": ("on the card (nvidia-smi)", "na placa (nvidia-smi)"),
    "r.allocated": ("allocated", "alocado"),
    "r.reserved": ("reserved", "reservado"),
    "r.params": ("parameters", "parâmetros"),
    "r.trainable": ("trainable", "treináveis"),
    "r.fits": ("Fits {card}: {free} free", "Cabe na {card}: {free} livres"),
    "r.nofit": ("Does not fit {card}: {over} over", "Não cabe na {card}: excede {over}"),
    "r.nocard": ("Choose a target card to check the fit.", "Escolhe uma placa alvo para verificar."),
    "r.host": ("Host RAM for offloaded state: {v}", "RAM do host para estado descarregado: {v}"),
    "r.loading": ("Computing…", "A calcular…"),
    "r.fix": ("Fix the highlighted field to see results.", "Corrige o campo assinalado para ver resultados."),
    "r.share": ("Copy link", "Copiar ligação"),
    "r.copied": ("Link copied", "Ligação copiada"),
    "ch.breakdown": ("Where the memory goes", "Para onde vai a memória"),
    "ch.breakdown.note": ("Parts are live in different phases of the step, so their sum can exceed the peak.",
                          "As partes vivem em fases diferentes do passo; a soma pode exceder o pico."),
    "ch.breakdown.peak": ("What is alive at the peak (phase: {phase}), CUDA context and allocator slack included: "
                          "the parts add up to the peak.",
                          "O que está vivo no pico (fase: {phase}), com o contexto CUDA e a folga do alocador: "
                          "as partes somam o pico."),
    "ch.seq": ("Memory against sequence length", "Memória em função do comprimento de sequência"),
    "ch.batch": ("Memory against micro-batch", "Memória em função do micro-batch"),
    "ch.peak": ("peak", "pico"),
    "ch.capacity": ("usable memory", "memória utilizável"),
    "ch.gib": ("GiB per GPU", "GiB por GPU"),
    "ch.current": ("this scenario", "este cenário"),
    "ch.ckpt": ("checkpointing: {v}", "checkpointing: {v}"),
    "fit.title": ("Cards that fit", "Placas onde cabe"),
    "fit.card": ("Card", "Placa"),
    "fit.gpus": ("GPUs", "GPUs"),
    "fit.peak": ("GiB / GPU", "GiB / GPU"),
    "fit.time": ("Time", "Tempo"),
    "fit.cost": ("Cost", "Custo"),
    "fit.count": ("{n} of {m} cards", "{n} de {m} placas"),
    "fit.none": ("No card in the catalog fits, even sharded.", "Nenhuma placa do catálogo serve, mesmo com sharding."),
    "fit.nodata": ("Give a dataset size to see time and cost.", "Indica o tamanho do conjunto de dados para ver tempo e custo."),
    "fit.more": ("Show all", "Mostrar todas"),
    "fit.asgiven": ("as given", "como indicado"),
    "fit.basis": ("Time and cost for {tokens} tokens, effective batch {eff}, at the low and high listed prices.",
                  "Tempo e custo para {tokens} tokens, batch efetivo {eff}, aos preços mínimo e máximo listados."),
    "fit.pasted": ("The planner takes catalog models and parameter counts; for a pasted config.json, "
                   "the fit of common cards is shown.",
                   "O planeador aceita modelos do catálogo e números de parâmetros; para um config.json colado, "
                   "mostra-se o encaixe nas placas comuns."),
    "fit.tofit": ("Changes that make it fit:", "Alterações para caber:"),
    "assumptions": ("Assumptions", "Pressupostos"),
    "assumptions.en": ("", "As frases vêm do estimador, em inglês."),
    "valid": ("valid values", "valores válidos"),
    # guide figures
    "g.full-mixed": ("Full, bf16 mixed", "Completo, bf16 misto"),
    "g.full-bf16": ("Full, pure bf16", "Completo, bf16 puro"),
    "g.lora": ("LoRA", "LoRA"),
    "g.qlora": ("QLoRA", "QLoRA"),
    "g.none-sdpa": ("no checkpointing, SDPA", "sem checkpointing, SDPA"),
    "g.full-sdpa": ("full checkpointing, SDPA", "checkpointing completo, SDPA"),
    "g.none-eager": ("no checkpointing, eager attention", "sem checkpointing, atenção eager"),
    # component names
    "c.weights": ("weights", "pesos"),
    "c.quantized_base": ("quantized base", "base quantizada"),
    "c.adapters": ("adapters", "adaptadores"),
    "c.master_weights": ("fp32 master weights", "pesos mestre fp32"),
    "c.gradients": ("gradients", "gradientes"),
    "c.optimizer_state": ("optimizer state", "estado do otimizador"),
    "c.paged_optimizer_state": ("paged optimizer state", "estado paginado do otimizador"),
    "c.activations": ("activations", "ativações"),
    "c.autocast_copies": ("autocast copies", "cópias de autocast"),
    "c.logits_loss": ("logits and loss", "logits e perda"),
    "c.temporaries": ("temporaries", "temporários"),
    "c.comm_buffers": ("communication buffers", "buffers de comunicação"),
    "c.workspaces": ("cuBLAS workspaces", "workspaces cuBLAS"),
    "c.allocator_overhead": ("allocator slack", "folga do alocador"),
    "c.cuda_context": ("CUDA context", "contexto CUDA"),
    "c.nccl": ("NCCL buffers", "buffers NCCL"),
}


def strings(lang: str) -> dict[str, str]:
    """The table of one language (``en`` or ``pt``)."""
    i = LANGS.index(lang) if lang in LANGS else 0
    return {k: v[i] for k, v in STRINGS.items()}


def pick_lang(value: str | None) -> str:
    """``en`` or ``pt`` (anything else falls back to ``en``)."""
    v = (value or "").strip().lower()[:5]
    return "pt" if v.startswith("pt") else "en"
