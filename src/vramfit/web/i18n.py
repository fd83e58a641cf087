"""Interface strings in English and (European) Portuguese.

``STRINGS[key] = (english, portuguese)``. The page templates use them server-side, and the
calculator's JavaScript gets the chosen language's table as a JSON data block. The estimator's
assumption sentences stay in English (they come from the library); the guide's prose lives in
its own templates (``guide_en.html``, ``guide_pt.html``). The labels of scenario keys (``k.<key>``)
come from the scenario's field table, so a key and its label are defined once.
"""

from __future__ import annotations

from vramfit.scenario import FIELDS

LANGS = ("en", "pt")
HTML_LANG = {"en": "en", "pt": "pt-PT"}

STRINGS: dict[str, tuple[str, str]] = {
    # navigation and page
    "nav.calculator": ("Calculator", "Calculadora"),
    "nav.guide": ("Guide", "Guia"),
    "nav.api": ("API", "API"),
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
    "imp.title": ("Paste your training config (Axolotl, LLaMA-Factory, TRL, torchtune, litgpt)",
                  "Cola a tua configuração de treino (Axolotl, LLaMA-Factory, TRL, torchtune, litgpt)"),
    "imp.dialect": ("Format", "Formato"),
    "imp.detect": ("detect from the keys", "detetar pelas chaves"),
    "imp.go": ("Fill the form", "Preencher o formulário"),
    "imp.note": ("Read as data only; files it names (DeepSpeed, datasets) are never opened.",
                 "Lida apenas como dados; os ficheiros que nomeia (DeepSpeed, datasets) nunca são abertos."),
    "imp.busy": ("Reading…", "A ler…"),
    "imp.done": ("{dialect} config: {read} keys read, {default} defaults filled, {ignored} ignored, "
                 "{nm} not modelled yet.",
                 "Configuração {dialect}: {read} chaves lidas, {default} predefinições, {ignored} ignoradas, "
                 "{nm} ainda não modeladas."),
    "ds.title": ("Your dataset's lengths (upload a small sample)", "Os comprimentos do teu dataset (envia uma amostra pequena)"),
    "ds.choose": ("JSON Lines, JSON or CSV, at most 4 MiB", "JSON Lines, JSON ou CSV, até 4 MiB"),
    "ds.note": ("Tokens are approximate (4 characters per token, no tokenizer); `vramfit plan --dataset "
                "--tokenizer` counts them exactly.",
                "Os tokens são aproximados (4 caracteres por token, sem tokenizador); `vramfit plan --dataset "
                "--tokenizer` conta-os exatamente."),
    "ds.busy": ("Reading…", "A ler…"),
    # the server's refusal (web.dataset_upload) and its Portuguese rule's words, said before the upload
    "ds.big": ("file: is larger than {mib} MiB; use `vramfit plan --dataset`",
               "file: tem mais de {mib} MiB; usa `vramfit plan --dataset`"),
    "ds.done": ("{rows} samples; p50 {p50}, p99 {p99}, longest {max} tokens (approximate).",
                "{rows} amostras; p50 {p50}, p99 {p99}, a maior {max} tokens (aproximado)."),
    "ds.samples": ("samples", "amostras"),
    "ds.tokens": ("tokens per sample (approximate)", "tokens por amostra (aproximado)"),
    "ds.card": ("{card} fits up to {n} tokens", "{card} cabe até {n} tokens"),
    "imp.kind.read": ("read", "lida"),
    "imp.kind.default": ("default", "predefinição"),
    "imp.kind.ignored": ("ignored", "ignorada"),
    "imp.kind.not modelled yet": ("not modelled yet", "ainda não modelada"),
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
    # scenario keys: their labels come from the scenario field table (vramfit.scenario.FIELDS), below
    "k.dataset_tokens": ("Dataset size", "Tamanho do conjunto de dados"),
    "k.epochs": ("Epochs", "Épocas"),
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
    "r.nofit": ("Does not fit {card}: {over} over", "Não cabe na {card}: faltam {over}"),
    "r.paging": ("Fits {card} with paging of {paged} optimizer state to host RAM (slower)",
                 "Cabe na {card} com paginação de {paged} do estado do otimizador para a RAM do host (mais lento)"),
    "r.margin": ("fits = needed {need} (the peak less the cache PyTorch frees before an out-of-memory error) ≤ limit "
                 "{limit} ({usable} usable less a {margin} safety margin)",
                 "cabe = necessário {need} (o pico menos a cache que o PyTorch liberta antes de um erro de falta de "
                 "memória) ≤ limite {limit} ({usable} utilizáveis menos {margin} de margem de segurança)"),
    "r.nocard": ("Choose a target card to check the fit.", "Escolhe uma placa alvo para verificar."),
    "r.host": ("Host RAM for offloaded state: {v}", "RAM do host para estado descarregado: {v}"),
    "r.accuracy": ("How far to trust it:", "Quanto confiar:"),
    "r.loading": ("Computing…", "A calcular…"),
    "r.fix": ("Out of date: fix the highlighted field to see results for these inputs.",
              "Desatualizado: corrige o campo assinalado para ver os resultados destas entradas."),
    "r.share": ("Copy link", "Copiar ligação"),
    "r.copyself": ("Copy this link (the browser does not allow it here):",
                   "Copia esta ligação (o navegador não o permite aqui):"),
    "r.offline": ("No answer from the vramfit server (offline?): the result shown is for the previous inputs.",
                  "Sem resposta do servidor do vramfit (sem rede?): o resultado mostrado é o das entradas anteriores."),
    "r.server": ("The server could not compute this scenario; the result shown is for the previous inputs.",
                 "O servidor não conseguiu calcular este cenário; o resultado mostrado é o das entradas anteriores."),
    "r.verdicts": ("Fit on common cards", "Encaixe nas placas comuns"),
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
    "ch.need": ("GiB needed per GPU", "GiB necessários por GPU"),  # the figure "fits" holds to the limit
    "ch.limit": ("{card} · limit {limit} GiB ({usable} usable − {margin} %)",
                 "{card} · limite {limit} GiB ({usable} utilizáveis − {margin} %)"),
    "ch.current": ("this scenario", "este cenário"),
    "ch.cannot": ("{card} · {why}", "{card} · {why}"),
    "ch.paging": ("fits {card} only by paging {paged} GiB of optimizer state to host RAM (slower)",
                  "cabe na {card} só paginando {paged} GiB do estado do otimizador para a RAM do host (mais lento)"),
    "ch.ckpt": ("checkpointing: {v}", "checkpointing: {v}"),
    "ch.host": ("needs {gb} GB of host RAM per GPU for offloaded state, over the 256 GB per GPU plans assume",
                "precisa de {gb} GB de RAM do host por GPU para o estado descarregado, acima dos 256 GB por GPU que os "
                "planos supõem"),
    "fit.title": ("Cards that fit", "Placas onde cabe"),
    "fit.card": ("Card", "Placa"),
    "fit.gpus": ("GPUs", "GPUs"),
    "fit.peak": ("GiB / GPU", "GiB / GPU"),
    "fit.time": ("Time", "Tempo"),
    "fit.cost": ("Cost", "Custo"),
    "fit.count": ("{n} of {m} cards", "{n} de {m} placas"),
    "fit.none": ("No card in the catalog gets a plan, even sharded; each card's reason is listed below.", "Nenhuma placa do catálogo recebe um plano, nem repartindo o modelo por várias GPUs; o motivo de cada placa está abaixo."),
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
    "c.rope_cache": ("RoPE caches, one per layer", "caches RoPE, um por camada"),
    "c.allocator_overhead": ("allocator slack", "folga do alocador"),
    "c.cuda_context": ("CUDA context", "contexto CUDA"),
    "c.nccl": ("NCCL buffers", "buffers NCCL"),
    # training stages (issue 15)
    "c.reference_model": ("reference model (frozen copy)", "modelo de referência (cópia congelada)"),
    "c.score_logits": ("reference / old-policy pass", "passagem de referência / política antiga"),
    "c.kv_cache": ("KV cache of the rollouts", "cache KV das gerações"),
    "c.generation_transient": ("generation step", "passo de geração"),
    "c.gathered_weights": ("weights gathered for generation", "pesos reunidos para a geração"),
    "c.vllm": ("vLLM (colocated)", "vLLM (no mesmo processo)"),
    "c.value_model": ("PPO value model", "modelo de valor do PPO"),
    "c.value_gradients": ("PPO value gradients", "gradientes do modelo de valor"),
    "c.value_activations": ("PPO value activations", "ativações do modelo de valor"),
    "c.reward_model": ("PPO reward model", "modelo de recompensa do PPO"),
    "c.rollout_scores": ("PPO generation scores", "pontuações da geração do PPO"),
}

#: Texts of the calculator page that are not scenario fields: results, the cards table, the changes,
#: phases, option values, charts. (Field labels come with the scenario's fields.)
_PAGE: dict[str, tuple[str, str]] = {
    "docs.title": ("vramfit API", "API do vramfit"),
    "docs.lead": ("The JSON API the calculator uses (answers in English), read from its OpenAPI schema:",
                  "A API JSON que a calculadora usa (responde em inglês), lida do seu esquema OpenAPI:"),
    "docs.field": ("Field", "Campo"),
    "docs.type": ("Type", "Tipo"),
    "docs.about": ("Meaning", "Significado"),
    "docs.body": ("Request body", "Corpo do pedido"),
    "docs.responses": ("Answers with HTTP", "Responde com HTTP"),
    "ex.engine": ("Configs for", "Configurações para"),
    "ex.button": ("configs", "configurações"),
    "ex.tip": ("Ready configuration files for this plan (vramfit plan --export)",
               "Ficheiros de configuração prontos para este plano (vramfit plan --export)"),
    "ex.title": ("Configuration for", "Configuração para"),
    "default.v": ("{v} (default)", "{v} (predefinição)"),
    "eff.label": ("Effective batch (sequences per optimizer step)", "Batch efetivo (sequências por passo do otimizador)"),
    "efm.label": ("Evaluation batch follows the micro-batch", "O batch de avaliação segue o micro-batch"),
    "efm.hint": ("As a config that leaves its evaluation batch to the default (Axolotl, torchtune, litgpt): the "
                 "planner evaluates each micro-batch it tries at that micro-batch. Set by a pasted config.",
                 "Como uma configuração que deixa o batch de avaliação na predefinição (Axolotl, torchtune, litgpt): o "
                 "planeador avalia cada micro-batch que experimenta com esse micro-batch. Marcado por uma configuração colada."),
    "eff.auto": ("{v} = micro-batch × accumulation × GPUs", "{v} = micro-batch × acumulação × GPUs"),
    "eff.grpo": ("{v} = micro-batch × accumulation {ga} (derived: whole groups of {n}) × GPUs",
                 "{v} = micro-batch × acumulação {ga} (derivada: grupos inteiros de {n}) × GPUs"),
    "eff.kto": ("{v} = micro-batch {mb} (derived: KTO's least) × accumulation × GPUs",
                "{v} = micro-batch {mb} (derivado: o mínimo do KTO) × acumulação × GPUs"),
    "eff.hint": ("The planner keeps it fixed: GPUs beyond it are not considered. Raise it to let more GPUs share the work.",
                 "O planeador mantém-no fixo: não considera mais GPUs do que ele. Aumenta-o para deixar mais GPUs "
                 "repartirem o trabalho."),
    "chip.attention": ("attention", "atenção"),
    "model.try": ("Did you mean:", "Querias dizer:"),
    "model.paste": ("Paste its config.json instead", "Colar antes o config.json dele"),
    # the cards table
    "fit.tps": ("Tokens/s", "Tokens/s"),
    "fit.tps.tip": ("training tokens per second, all GPUs of the plan", "tokens de treino por segundo, todas as GPUs do plano"),
    "fit.hour": ("Price/h", "Preço/h"),
    "fit.hour.tip": ("rental price per hour at the lowest listed price, every GPU of the plan",
                     "preço de aluguer por hora ao preço mínimo listado, todas as GPUs do plano"),
    "fit.disk": ("Disk", "Disco"),
    "fit.disk.tip": ("base model, dataset (raw and tokenized), checkpoints and final adapters or model",
                     "modelo base, conjunto de dados (bruto e tokenizado), checkpoints e adaptadores ou modelo final"),
    "fit.disk.parts": ("base model {base}, dataset {data}, checkpoints {ckpt} while one is saved, final {out} (after "
                       "the last save): the peak",
                       "modelo base {base}, dados {data}, checkpoints {ckpt} enquanto um se grava, final {out} (depois "
                       "da última gravação): o pico"),
    "fit.host": ("Host RAM", "RAM do host"),
    "fit.paging": ("paging", "paginação"),
    "fit.paging.tip": ("fits only by paging optimizer state to host RAM (slower)",
                       "cabe só paginando o estado do otimizador para a RAM do host (mais lento)"),
    "fit.host.tip": ("host RAM per GPU for offloaded state", "RAM do host por GPU para o estado descarregado"),
    "fit.yours": ("your card", "a tua placa"),
    "fit.yours.no": ("Your card ({card}) is not in the list: {why}", "A tua placa ({card}) não está na lista: {why}"),
    "fit.sort": ("Sort by", "Ordenar por"),
    "sort.hour": ("price per hour", "preço por hora"),
    "sort.cost": ("cost per token", "custo por token"),
    "sort.time": ("speed (tokens/s)", "velocidade (tokens/s)"),
    "sort.memory": ("smallest card", "placa mais pequena"),
    "fit.order.hour": ("Cheapest to rent per hour first.", "Primeiro as mais baratas de alugar por hora."),
    "fit.order.cost": ("Lowest cost per training token first.", "Primeiro o menor custo por token de treino."),
    "fit.order.time": ("Fastest first.", "Primeiro as mais rápidas."),
    "fit.order.memory": ("Smallest card first.", "Primeiro as placas mais pequenas."),
    "fit.batch": ("micro-batch {mb} × accumulation {ga}", "micro-batch {mb} × acumulação {ga}"),
    "fit.excluded": ("Why {n} cards are not listed", "Porque não aparecem {n} placas"),
    # the changes that make it fit
    "ch.change": ("Change", "Alteração"),
    "ch.after": ("GiB after", "GiB depois"),
    "ch.saving": ("Saves", "Poupa"),
    "ch.time": ("Time", "Tempo"),
    "ch.same.time": ("same", "igual"),
    "ch.time.note": ("Time: GPU-hours per training token after the change, relative to now (× 2 = twice as long "
                     "or twice the cost). Ranked: what fits first, changes to the training itself (shorter sequences, "
                     "pure bf16, QLoRA) last, the smallest time cost first otherwise; then, the largest saving first.",
                     "Tempo: horas de GPU por token de treino depois da alteração, face ao atual (× 2 = o dobro do "
                     "tempo ou do custo). Ordem: primeiro o que cabe; as alterações ao próprio treino (sequências mais "
                     "curtas, bf16 puro, QLoRA) no fim; de resto, primeiro o menor custo em tempo; depois, a maior "
                     "poupança primeiro."),
    "ch.same": ("(≈ {v}: within 3 %)", "(≈ {v}: a menos de 3 %)"),
    # methods in chart legends
    "m.full": ("full fine-tuning", "ajuste fino completo"),
    "m.lora": ("LoRA", "LoRA"),
    "m.qlora": ("QLoRA", "QLoRA"),
    # the parts table
    "p.part": ("Part", "Parte"),
    "p.peak": ("GiB at the peak", "GiB no pico"),
    "p.max": ("GiB (component)", "GiB (componente)"),
    "p.phase": ("Live during", "Vivo durante"),
    "p.counted": ("Counted in", "Contado em"),
    "p.total": ("Peak on the card (phase: {phase})", "Pico na placa (fase: {phase})"),
    "in.allocated": ("allocated (PyTorch)", "alocado (PyTorch)"),
    "in.reserved": ("reserved (allocator)", "reservado (alocador)"),
    "in.device": ("device only (nvidia-smi)", "só na placa (nvidia-smi)"),
    # phases of a training step
    "ph.persistent": ("the whole run", "toda a execução"),
    "ph.process": ("the whole process", "todo o processo"),
    "ph.forward": ("forward", "forward (passagem direta)"),
    "ph.forward-attention": ("forward, at a block's attention softmax", "forward, no softmax da atenção de um bloco"),
    "ph.backward": ("backward", "backward (retropropagação)"),
    "ph.forward-backward": ("forward and backward", "forward e backward"),
    "ph.backward-loss": ("backward, at the loss", "backward, na perda"),
    "ph.backward-block": ("backward, inside a block", "backward, dentro de um bloco"),
    "ph.optimizer-step": ("optimizer step", "passo do otimizador"),
    "ph.generate": ("rollout generation", "geração das respostas"),
    "ph.score": ("reference / scoring pass", "passagem de referência"),
    "ph.after-first-step": ("after the first optimizer step", "depois do primeiro passo do otimizador"),
    "ph.accumulation": ("gradient accumulation", "acumulação de gradientes"),
    "ph.transient": ("moments (transient)", "momentos (transitório)"),
    "ph.load": ("model load", "carga do modelo"),
    "ph.backward-vision": ("backward, in the vision tower", "backward, na torre de visão"),
    "ph.backward-end": ("end of backward", "fim do backward"),
    "ph.backward-end-tied": ("end of backward, the tied embedding's gradients summed",
                             "fim do backward, com os gradientes do embedding partilhado somados"),
    "ph.backward-end-step": ("end of backward, the optimizer stepping in it", "fim do backward, com o otimizador a dar o passo nele"),
    "ph.zero_grad": ("zero_grad", "zero_grad"),
    "ph.evaluate": ("evaluation pass", "passagem de avaliação"),
    # option values, as read in running text (the API keeps its tokens)
    "v.none": ("none", "nenhum"),
    "v.full": ("full", "completo"),
    "v.selective": ("selective", "seletivo"),
    "v.selective-op": ("selective, op policy (torchtitan)", "seletivo, política por operação (torchtitan)"),
    "v.offload": ("offload", "descarga"),
    "v.standard": ("standard", "padrão"),
    "v.chunked": ("chunked", "por blocos"),
    "v.fused": ("fused", "fundida"),
    "v.optimizer": ("optimizer", "otimizador"),
    "v.optimizer+params": ("optimizer and weights", "otimizador e pesos"),
    "v.auto": ("auto", "auto"),
    "v.yes": ("yes", "sim"),
    "v.no": ("no", "não"),
    "v.eager": ("eager", "eager"),
}
STRINGS.update(_PAGE)
STRINGS.update({f"k.{f.name}": f.label for f in FIELDS})


def strings(lang: str) -> dict[str, str]:
    """The table of one language (``en`` or ``pt``)."""
    i = LANGS.index(lang) if lang in LANGS else 0
    return {k: v[i] for k, v in STRINGS.items()}


def fmt_number(value: float | int, lang: str = "en", digits: int | None = None) -> str:
    """A number as the page's language writes it: ``1,234.5`` (en), ``1234,5`` (pt: decimal comma,
    a space between thousands from 10 000, as the browser's ``pt-PT`` format does)."""
    text = f"{value:,.{digits}f}" if digits is not None else f"{value:,}"
    if lang != "pt":
        return text
    whole, _, frac = text.partition(".")
    plain = whole.replace(",", "")
    whole = whole.replace(",", " ") if len(plain.lstrip("-")) > 4 else plain
    return whole + ("," + frac if frac else "")


def pick_lang(value: str | None) -> str:
    """``en`` or ``pt`` (anything else falls back to ``en``)."""
    v = (value or "").strip().lower()[:5]
    return "pt" if v.startswith("pt") else "en"
