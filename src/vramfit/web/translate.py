"""Portuguese for the sentences the library writes in English (assumptions, planner changes, reasons, notes,
API errors), for the PT pages only: the JSON API stays English.

``RULES`` are ``(regex, replacement)`` pairs applied in order as global substitutions; a replacement names
groups as ``$1``. The same rules run here (the guide, rendered on the server) and in the browser (the
calculator: ``translate.js``-free, the rules travel in the page's config as JSON), so they are written in
the regex subset both Python ``re`` and JavaScript share. A number the library printed in English style
(``3,689.6``) is wrapped as ``⟨3,689.6⟩`` by a rule and re-printed in the page's style (``3689,6``).
A sentence no rule matches stays English; ``untranslated()`` lists such sentences (a test keeps it empty
for the scenarios the page is tested with).
"""

from __future__ import annotations

import re

from vramfit.web.translate_errors import ERROR_RULES
from vramfit.web.translate_estimate import ESTIMATE_RULES
from vramfit.web.translate_import import IMPORT_RULES
from vramfit.web.translate_notes import NOTE_RULES
from vramfit.web.translate_plan import PLAN_RULES

_N = r"([\d,]+(?:\.\d+)?)"  # a number as the library prints it (1,234.5)

#: Whole sentences and phrases, most specific first.
RULES: list[tuple[str, str]] = [
    *ESTIMATE_RULES,
    *NOTE_RULES,
    *IMPORT_RULES,
    # ---- the reserved figure's spread over a dataset's lengths (vramfit.dataset.spread.spread_line)
    (r"^reserved " + _N + r" GiB at fixed length; with this dataset's lengths in random order, \+" + _N + r"…\+"
     + _N + r" GiB \(median \+" + _N + r"; 10th–90th percentile of (\d+) epoch orders\) ",
     "reservada ⟨$1⟩ GiB com comprimento fixo; com os comprimentos deste conjunto de dados em ordem aleatória, "
     "+⟨$2⟩…+⟨$3⟩ GiB (mediana +⟨$4⟩; percentis 10–90 de $5 ordens de época) "),
    (r"up to the (.+?)'s free memory \(near its capacity", "até à memória livre da $1 (perto da capacidade"),
    (r"on a card with room \(near its capacity", "numa placa com folga (perto da capacidade"),
    (r" PyTorch frees wholly free cached segments and retries\); the fit verdict uses the fixed-length figure$",
     ", o PyTorch liberta os segmentos em cache totalmente livres e tenta de novo); o veredicto de caber usa o valor "
     "de comprimento fixo"),
    # ---- how the model was resolved (vramfit.estimate.resolve_spec, vramfit.models, web.service)
    (r"^params=([\d,]+): a generic Llama-style dense decoder of that size \(hidden (\d+), (\d+) layers, vocab (\d+)\); "
     r"give a model id or config\.json for an exact figure$",
     "params=⟨$1⟩: um descodificador denso genérico, ao estilo Llama, desse tamanho (hidden $2, $3 camadas, "
     "vocabulário $4); indica um id de modelo ou um config.json para um valor exato."),
    (r"^(.+) is not in the catalog; using (\S+), the same model name without release suffixes "
     r"\(instruct/chat/quantized releases share the architecture\)$",
     "$1 não está no catálogo; usa-se $2, o mesmo nome de modelo sem sufixos de versão (as versões "
     "instruct/chat/quantizadas partilham a arquitetura)."),
    (r"^(.+) is a (GPTQ|AWQ) checkpoint by its name: a run that loads it trains on its quantized weights, which "
     r"this estimate counts only as method and quantize say \(4-bit GPTQ: method qlora, quantize gptq-int4; "
     r"AWQ and 8-bit GPTQ are not modelled\)$",
     "$1 é um checkpoint $2 pelo nome: uma execução que o carrega treina sobre os pesos quantizados, que esta "
     "estimativa só conta como dizem method e quantize (GPTQ de 4 bits: method qlora, quantize gptq-int4; AWQ e "
     "GPTQ de 8 bits não estão modelados)."),
    (r"^(\S+) uses the architecture of catalog model (\S+)$", "$1 usa a arquitetura do modelo $2 do catálogo."),
    (r"^(\S+): generic Llama-style architecture \((\d+) layers, hidden (\d+)\) with ([\d,]+) parameters, not a real model$",
     "$1: arquitetura genérica ao estilo Llama ($2 camadas, hidden $3) com ⟨$4⟩ parâmetros, não um modelo real."),
    (r"^(config\.json \(.+\)): a pasted config\.json, read as data \((\d+) layers, hidden (\d+), vocab (\d+)\)$",
     "$1: um config.json colado, lido como dados ($2 camadas, hidden $3, vocabulário $4)."),
    # ---- planner: changes that make a scenario fit (vramfit.plan.changes)
    (r"^(\d+) x (\S+) in one node with (ZeRO-3|FSDP)$", "$1 × $2 num nó com $3"),
    (r"^(\d+) x (\S+) in one node with (ZeRO-3|FSDP) \(effective batch (\d+): the nearest multiple of (\d+) ranks at "
     r"or above (\d+)\)$", "$1 × $2 num nó com $3 (batch efetivo $4: o múltiplo de $5 ranks mais próximo, igual ou acima de $6)"),
    (r"^8-bit AdamW \(bitsandbytes\)$", "AdamW de 8 bits (bitsandbytes)"),
    (r"^CPU Adam step and PCIe traffic each step; needs host RAM$",
     "passo do Adam no CPU e tráfego PCIe a cada passo; precisa de RAM do host"),
    (r"^activation checkpointing: selective$", "checkpointing de ativações seletivo"),
    (r"^activation checkpointing: full$", "checkpointing de ativações completo"),
    (r"^activation checkpointing: offload$", "checkpointing de ativações com descarga para o host"),
    (r"^as full, and keeps block inputs in pinned host RAM$",
     "como o completo, e guarda as entradas dos blocos na RAM fixada do host"),
    (r"^bf16 updates lose small steps; use Kahan summation or a stochastic-rounding optimizer$",
     "as atualizações em bf16 perdem passos pequenos; usa soma de Kahan ou um otimizador com arredondamento estocástico"),
    (r"^block-wise 8-bit states; matches 32-bit AdamW in the bitsandbytes paper's tests$",
     "estados de 8 bits por blocos; iguala o AdamW de 32 bits nos testes do artigo do bitsandbytes"),
    (r"^cross-entropy over the sequence in chunks$", "entropia cruzada por blocos da sequência"),
    (r"^torch\.compile \(its partition keeps fewer tensors for backward\)$",
     "torch.compile (a sua partição guarda menos tensores para o backward)"),
    (r"^compiles before the first step \(minutes\); a graph break or a shape change recompiles$",
     "compila antes do primeiro passo (minutos); uma quebra do grafo ou uma mudança de forma recompila"),
    (r"^fused linear \+ cross-entropy loss \(no full logits\)$", "linear e entropia cruzada fundidos (sem logits completos)"),
    (r"^more cards to rent; GPU-to-GPU traffic every micro-batch$", "mais placas a alugar; tráfego entre GPUs em cada micro-batch"),
    (r"needs Liger Kernel \(use_liger_kernel=True\) or Cut Cross-Entropy",
     "precisa do Liger Kernel (use_liger_kernel=True) ou do Cut Cross-Entropy"),
    (r"^optimizer state in host RAM \(ZeRO-Offload\)$", "estado do otimizador na RAM do host (ZeRO-Offload)"),
    (r"^pure bf16 weights \(no fp32 master copy\)$", "pesos bf16 puros (sem cópia mestre fp32)"),
    (r"^recomputes attention in backward \(not in the HF Trainer\)$", "recalcula a atenção no backward (não existe no HF Trainer)"),
    (r"^recomputes every block's forward in backward$", "recalcula o forward de cada bloco no backward"),
    (r"^sequences of (\d+) tokens instead of (\d+)$", "sequências de $1 tokens em vez de $2"),
    (r"^torchtune CEWithChunkedOutputLoss; not in the HF Trainer$", "CEWithChunkedOutputLoss do torchtune; não existe no HF Trainer"),
    (r"^truncates or re-packs the data; long-context skills may suffer$",
     "trunca ou reempacota os dados; as capacidades de contexto longo podem sofrer"),
    (r"^weights and optimizer state in host RAM \(ZeRO-Infinity / FSDP CPU offload\)$",
     "pesos e estado do otimizador na RAM do host (ZeRO-Infinity / FSDP CPU offload)"),
    (r"^weights stream over PCIe every micro-batch: much slower$", "os pesos passam pelo PCIe em cada micro-batch: muito mais lento"),
    (r"^QLoRA: 4-bit NF4 base instead of 16-bit$", "QLoRA: base NF4 de 4 bits em vez de 16 bits"),
    (r"^quality loss depends on the task: measure it \(the guide, sec\. 03\)$",
     "a perda de qualidade depende da tarefa: mede-a (o guia, secção 03)"),
    (r"^micro-batch (\d+) with (\d+) accumulation steps \(effective batch (\d+)\)$",
     "micro-batch $1 com $2 passos de acumulação (batch efetivo $3)"),
    (r"^same effective batch, more optimizer micro-steps$", "o mesmo batch efetivo, mais micro-passos"),
    (r"^quantize the MoE experts too \(4-bit like the other linears\)$",
     "quantizar também os especialistas MoE (4 bits como os outros lineares)"),
    (r"^together: ", "em conjunto: "),
    (r"^all the trade-offs of its parts$", "todos os custos das partes"),
    *PLAN_RULES, *ERROR_RULES,
    # ---- the guide's "why they differ" (vramfit.plan.guide)
    (r"^Section (\d+) says (\d+) x (\d+) GB; we estimate " + _N + r" GB per GPU there, so it needs more than (\d+) x (\d+) GB\.$",
     "A secção $1 diz $2 × $3 GB; estimamos ⟨$4⟩ GB por GPU nesse caso, por isso são precisas mais de $5 × $6 GB."),
    (r"^Section (\d+) says (\d+) x (\d+) GB; we estimate " + _N + r" GB per GPU there, so it needs (\d+) x (\d+) GB\.$",
     "A secção $1 diz $2 × $3 GB; estimamos ⟨$4⟩ GB por GPU nesse caso, por isso são precisas $5 × $6 GB."),
    (r"^Section (\d+) puts (\S+) full fine-tuning in the (\d+) GB class, but the guide's own total \((\d+) GB\) "
     r"already exceeds (\d+) GB\.$",
     "A secção $1 põe o ajuste fino completo de $2 na classe de $3 GB, mas o próprio total do guia ($4 GB) já "
     "passa dos $5 GB."),
    (r"^The frozen base alone is " + _N + r" GB in bf16 \(2 bytes per parameter\); LoRA removes gradients and "
     r"optimizer state, not the weights\.$",
     "Só a base congelada ocupa ⟨$1⟩ GB em bf16 (2 bytes por parâmetro); o LoRA elimina os gradientes e o estado "
     "do otimizador, não os pesos."),
    (r"^The guide counts bf16 weights \+ Adam \+ bf16 gradients = 2 \+ 8 \+ 2 = 12 bytes per parameter ",
     "O guia conta pesos bf16 + Adam + gradientes bf16 = 2 + 8 + 2 = 12 bytes por parâmetro "),
    (r"\(by the same count " + _N + r" GB for (\S+)\)", "(pela mesma conta, ⟨$1⟩ GB para $2)"),
    (r"\(for (\S+): ([\d+ ]+) = (\d+) GB, section (\d+)\)", "(para $1: $2 = $3 GB, secção $4)"),
    (r" and no fp32 master weights or activations\. Mixed-precision AdamW \(PyTorch AMP, bf16-mixed\) keeps fp32 "
     r"weights that are the master copy \(" + _N + r" GB\), fp32 gradients \(" + _N + r" GB\), Adam's two fp32 "
     r"moments \(" + _N + r" GB\) and bf16 autocast copies of the weights \(" + _N + r" GB\): " + _N
     + r" bytes per parameter before activations \(" + _N + r" GB at seq (\d+) with checkpointing\), logits \("
     + _N + r" GB\) and the CUDA context\.$",
     " e nenhuns pesos mestre fp32 nem ativações. O AdamW em precisão mista (PyTorch AMP, bf16-mixed) guarda pesos "
     "fp32 que são a cópia mestre (⟨$1⟩ GB), gradientes fp32 (⟨$2⟩ GB), os dois momentos fp32 do Adam (⟨$3⟩ GB) e "
     "cópias bf16 dos pesos feitas pelo autocast (⟨$4⟩ GB): ⟨$5⟩ bytes por parâmetro antes das ativações (⟨$6⟩ GB "
     "com sequência $7 e checkpointing), dos logits (⟨$8⟩ GB) e do contexto CUDA."),
    # ---- notes of the exported configs (vramfit.plan.export)
    (r"^offload runs DeepSpeed's CPU Adam: the optimizer section replaces the Trainer's optim$",
     "a descarga usa o CPU Adam do DeepSpeed: a secção optimizer substitui o optim do Trainer"),
    (r"^(\S+) is created by the Trainer \(optim=(.+)\) and wrapped by ZeRO$", "$1 é criado pelo Trainer (optim=$2) e envolvido pelo ZeRO"),
    (r"^FSDP offloads parameters together with the optimizer state \(CPUOffload\(offload_params=True\)\)$",
     "o FSDP descarrega os parâmetros juntamente com o estado do otimizador (CPUOffload(offload_params=True))"),
    (r"^quantize (\S+) is not a bitsandbytes 4-bit type: nf4 written instead$",
     "quantize $1 não é um tipo de 4 bits do bitsandbytes: escreve-se nf4"),
    (r"^selective recompute is not in transformers: full gradient checkpointing is written$",
     "o recálculo seletivo não existe no transformers: escreve-se checkpointing completo"),
    (r"^chunked cross-entropy is torchtune's; with TRL use use_liger_kernel=True \(fused\) instead$",
     "a entropia cruzada por blocos é do torchtune; com o TRL usa use_liger_kernel=True (fundida)"),
    (r"^chunked cross-entropy is torchtune's: use_liger_kernel: true \(TRL's fused cross-entropy, which holds less\) is "
     r"written instead; it needs `pip install liger-kernel`$",
     "a entropia cruzada por blocos é do torchtune: escreve-se use_liger_kernel: true (a entropia cruzada fundida do "
     "TRL, que ocupa menos); precisa de `pip install liger-kernel`"),
    (r"^the plan holds an evaluation pass at micro-batch (\d+); train\.py passes no eval_dataset: add one, with "
     r"eval_strategy and per_device_eval_batch_size, for that peak$",
     "o plano inclui uma passagem de avaliação com micro-batch $1; o train.py não passa eval_dataset: acrescenta um, "
     "com eval_strategy e per_device_eval_batch_size, para esse pico"),
    (r"^model\.hf_assets_path: the folder of the Hugging Face checkpoint and tokenizer torchtitan loads$",
     "model.hf_assets_path: a pasta do checkpoint Hugging Face e do tokenizer que o torchtitan carrega"),
    (r"^torchtitan 0\.3 reads no TOML: run (.*)$", "o torchtitan 0.3 não lê TOML: corre $1"),
    (r"^train\.py is your training script; --export trl writes one that runs these settings$",
     "train.py é o teu script de treino; --export trl escreve um que corre estas definições"),
    (r"^the plan was sized for (\S+); written as the matching (ZeRO stage|FSDP sharding), whose (?:buffers|memory) "
     r"differ(?:s)? \(estimate again with parallelism (\S+) for its figure\)$",
     "o plano foi dimensionado para $1; escrito como o equivalente ($2), com outra memória (estima de novo com "
     "parallelism $3 para o valor dele)"),
    (r"^the plan was sized for (\S+); this script runs transformers \+ PEFT \+ TRL, whose memory differs \(estimate "
     r"again with framework hf\)$",
     "o plano foi dimensionado para $1; este script corre transformers + PEFT + TRL, com outra memória (estima de "
     "novo com framework hf)"),
    (r"^the plan was sized for (\S+); these files launch your script under (DeepSpeed|accelerate), whose memory "
     r"differs \(estimate again with framework hf\)$",
     "o plano foi dimensionado para $1; estes ficheiros lançam o teu script com $2, com outra memória (estima de "
     "novo com framework hf)"),
    (r"^the plan was sized for (\S+); torchtitan's memory differs \(estimate again with --framework torchtitan\)$",
     "o plano foi dimensionado para $1; a memória do torchtitan é outra (estima de novo com --framework torchtitan)"),
    (r"^at data_parallel_shard_degree x context_parallel_degree = 1, torchtitan before 0\.3 \(the releases that read "
     r"this TOML\) applies no FSDP, so enable_cpu_offload offloads nothing there and the run holds its whole state on "
     r"the GPU: the plan's offload holds under torchtitan 0\.3 only \(the command line above\)$",
     "com data_parallel_shard_degree x context_parallel_degree = 1, o torchtitan antes do 0.3 (as versões que leem "
     "este TOML) não aplica FSDP, por isso enable_cpu_offload não descarrega nada e a execução guarda todo o estado "
     "na GPU: o descarregamento do plano só vale no torchtitan 0.3 (a linha de comando acima)"),
    (r"^at data_parallel_shard_degree x context_parallel_degree = 1, torchtitan before 0\.3 \(the releases that read "
     r"this TOML\) applies no FSDP, so no bf16 parameter cast: autocast, or fp32 under tensor or pipeline parallelism; "
     r"the plan, sized as torchtitan 0\.3 runs it, holds under 0\.3's command line$",
     "com data_parallel_shard_degree x context_parallel_degree = 1, o torchtitan antes do 0.3 (as versões que leem "
     "este TOML) não aplica FSDP, por isso não há conversão bf16 dos parâmetros: autocast, ou fp32 com paralelismo de "
     "tensor ou de pipeline; o plano, dimensionado como o torchtitan 0.3 o corre, vale com a linha de comando do 0.3"),
    (r"^the plan was sized with optimizer (\S+), which torchtitan does not build: it runs AdamW \(fp32 states\), "
     r"which holds more; estimate again with --framework torchtitan$",
     "o plano foi dimensionado com o otimizador $1, que o torchtitan não constrói: corre o AdamW (estados fp32), que "
     "ocupa mais; estima de novo com --framework torchtitan"),
    (r"^the plan was sized with the (\S+) loss; torchtitan computes its own cross-entropy, which holds more; estimate "
     r"again with --framework torchtitan$",
     "o plano foi dimensionado com a perda $1; o torchtitan calcula a sua própria entropia cruzada, que ocupa mais; "
     "estima de novo com --framework torchtitan"),
    (r"^the plan needs no sharding: ZeRO stage 0 is plain data parallelism$",
     "o plano não precisa de repartição: o ZeRO stage 0 é paralelismo de dados simples"),
    (r"^the plan needs no sharding: FULL_SHARD written anyway \(uses less memory, more traffic\)$",
     "o plano não precisa de repartição: escreve-se FULL_SHARD na mesma (menos memória, mais tráfego)"),
    (r"^the plan is sized for stage (\S+), but these files run the supervised step \(SFTTrainer\): write the (\S+) "
     r"yourself with the same batch, length and sharding$",
     "o plano foi dimensionado para a etapa $1, mas estes ficheiros correm o passo supervisionado (SFTTrainer): "
     "escreve tu o $2 com o mesmo lote, comprimento e repartição"),
    # ---- preference and RL stages (vramfit.plan.export_stages, vramfit.plan.vllm_split)
    (r"^(\w+): TRL scores log-probs with its own fused LM head; use_liger_kernel is not written$",
     "$1: o TRL calcula as log-probabilidades com a sua própria camada de saída fundida; use_liger_kernel não se escreve"),
    (r"^reference copy beside LoRA: train\.py passes ref_model=None, so TRL disables the adapters instead "
     r"\(less memory than planned\)$",
     "cópia de referência ao lado do LoRA: o train.py passa ref_model=None, e o TRL desliga antes os adaptadores "
     "(menos memória do que a planeada)"),
    (r"^vllm-server: start `trl vllm-serve --model <model>` on GPUs of its own first \(CUDA_VISIBLE_DEVICES set "
     r"apart from the training GPUs\)$",
     "vllm-server: arranca primeiro `trl vllm-serve --model <model>` em GPUs próprias (CUDA_VISIBLE_DEVICES "
     "separado das GPUs de treino)"),
    (r"^grpo: train\.py needs --reward_model \(a sequence-classification model path or id\) to score the completions; "
     r"TRL loads it on every training GPU beside the policy, which the plan's figures do not count: add its weights "
     r"\(2 bytes per parameter in bf16\) to each GPU's$",
     "grpo: o train.py precisa de --reward_model (caminho ou id de um modelo de classificação de sequências) para "
     "pontuar as completações; o TRL carrega-o em cada GPU de treino ao lado da política, o que os valores do plano não "
     "contam: soma os seus pesos (2 bytes por parâmetro em bf16) aos de cada GPU"),
    (r"^\+ (\d+) GPUs? of the node for the vLLM server \(trl vllm-serve, tensor parallel (\d+)\); the time counts "
     r"training only, the cost all the cards$",
     "+ $1 GPU(s) do nó para o servidor vLLM (trl vllm-serve, paralelismo de tensores $2); o tempo conta só o "
     "treino, o custo todas as placas"),
    (r"^the vLLM server does not hold the model on (\d+) x (\S+) \(16-bit weights in (\S+) of each\)$",
     "o servidor vLLM não comporta o modelo em $1 × $2 (pesos de 16 bits em ⟨$3⟩ de cada uma)"),
    (r"^effective_batch: grpo needs the completions per step to be a multiple of num_generations \((\d+)\), as TRL "
     r"requires; got (\d+)$",
     "effective_batch: o grpo precisa de que as completações por passo sejam um múltiplo de num_generations ($1), "
     "como o TRL exige; recebido: $2"),
    (r"^micro_batch_size: with optimizer_in_backward nothing accumulates, so micro_batch_size × num_gpus \((\d+)\) "
     r"must hold whole groups of num_generations \((\d+)\) completions: use a multiple of (\d+)$",
     "micro_batch_size: com optimizer_in_backward nada se acumula, por isso micro_batch_size × num_gpus ($1) tem "
     "de conter grupos inteiros de num_generations ($2) completações: usa um múltiplo de $3"),
    (r"^num_generations: must divide the completions per step \(micro_batch_size × num_gpus × grad_accum = (\d+)\), "
     r"as TRL requires; got (\d+)",
     "num_generations: tem de dividir as completações por passo (micro_batch_size × num_gpus × grad_accum = $1), "
     "como o TRL exige; recebido: $2"),
    (r"^generation: vllm-server runs vLLM on GPUs of its own beside the training ones: max_gpus (\d+) leaves none "
     r"for it; raise max_gpus or colocate",
     "generation: o vllm-server corre o vLLM em GPUs próprias, ao lado das de treino: max_gpus $1 não lhe deixa "
     "nenhuma; aumenta max_gpus ou partilha a placa (vllm-colocate)"),
    # ---- how far to trust the figure (vramfit.estimate.accuracy: result.accuracy.note)
    (r"^(\d+) published measurement\(s\) on this path \(([^)]*)\): our error ([+-]?)([\d.]+) % to ([+-]?)([\d.]+) %, "
     r"median \|error\| ([\d.]+) %(?=;|$)",
     "$1 medição(ões) publicada(s) neste caminho ($2): o nosso erro vai de $3⟨$4⟩ % a $5⟨$6⟩ %, mediana do |erro| "
     "⟨$7⟩ %"),
    (r"^no measurement behind this path \(([^)]*)\); the nearest (\d+) share (.+): our error ([+-]?)([\d.]+) % to "
     r"([+-]?)([\d.]+) %(?=;|$)",
     "nenhuma medição por trás deste caminho ($1); as $2 mais próximas partilham $3: o nosso erro vai de $4⟨$5⟩ % a "
     "$6⟨$7⟩ %"),
    (r"^no measurement behind this path \(([^)]*)\)$", "nenhuma medição por trás deste caminho ($1)"),
    (r"\bno field: o nosso", "nenhum campo: o nosso"),
    (r"· none\b", "· nenhum"), (r"· full\b", "· completo"),
    (r"(· \w+(?:\+\w+)?)\+images ·", "$1+imagens ·"),  # a path's method with images (estimate/accuracy.py path_of)
    # ---- API errors (vramfit.scenario.parse_scenario and the web service)
    # ---- the config importer and the dataset upload (vramfit.config_import, web.dataset_upload, vramfit.dataset)
    (r"an integer of about " + _N + r" digits", "um inteiro de cerca de ⟨$1⟩ algarismos"),
    (r"^(\w+): must be a whole number from (\d+) to (\d+), got (.+)$",
     "$1: tem de ser um número inteiro entre $2 e $3 (recebido: $4)"),
    (r"^(\w+): must be from ([\d,]+) to ([\d,]+), got (.+)$", "$1: tem de estar entre ⟨$2⟩ e ⟨$3⟩ (recebido: $4)"),
    (r"^(\w+): must be a non-empty list$", "$1: tem de ser uma lista não vazia"),
    (r"^completion_len: must be shorter than seq_len \((\d+)\), which holds the prompt and the completion$",
     "completion_len: tem de ser menor do que seq_len ($1), que contém o prompt e a completação"),
    (r"an adapter needs lora_r \(Axolotl has no default rank\)$",
     "um adaptador precisa de lora_r (o Axolotl não tem rank predefinido)"),
    (r"an adapter needs lora_target_modules or lora_target_linear: true$",
     "um adaptador precisa de lora_target_modules ou de lora_target_linear: true"),
    (r"load_in_4bit and load_in_8bit are both true; choose one$", "load_in_4bit e load_in_8bit estão ambos a true; escolhe um"),
    (r"bf16 and fp16 are both on; choose one$", "bf16 e fp16 estão ambos ligados; escolhe um"),
    (r"base_model is required$", "base_model é obrigatório"),
    (r"(\w+) must be one value \(a model id or a path\), got a mapping$",
     "$1 tem de ser um só valor (um id de modelo ou um caminho), não um mapeamento"),
    (r"^dataset: (\S+) holds no rows$", "dataset: $1 não tem linhas"),
    *[(r"^field: (.+): expected a list of messages \(\{role, content\} objects\), got " + en + "$",
       "field: $1: esperava-se uma lista de mensagens (objetos {role, content}), recebeu-se " + pt)
      for en, pt in (("an empty list", "uma lista vazia"), ("a list of other values", "uma lista de outros valores"),
                     (r"(\w+)", "$2"))],
    (r"^dataset: no non-empty rows to train on$", "dataset: nenhuma linha não vazia para treinar"),
    (r"^dataset: row (\d+) of (\S+) has no column ('.*') \(the dataset's (\S+) column, found in the first row\)$",
     "dataset: a linha $1 de $2 não tem a coluna $3 (a coluna de $4 do dataset, encontrada na primeira linha)"),
    (r"^dataset: (\S+) has no tokens: the text in (.+) is empty in every row$",
     "dataset: $1 não tem tokens: o texto em $2 está vazio em todas as linhas"),
    (r"^dataset: (\S+) has no tokens: the text in (.+) is empty in every sampled row$",
     "dataset: $1 não tem tokens: o texto em $2 está vazio em todas as linhas da amostra"),
    (r"^dataset: line (\d+) of (\S+) is not JSON: (.*)$", "dataset: a linha $1 de $2 não é JSON: $3"),
    (r"^dataset: line (\d+) of (\S+) is a JSON (\w+), not an object$",
     "dataset: a linha $1 de $2 é um $3 JSON, não um objeto"),
    (r"^dataset: (\S+) is not JSON: (.*)$", "dataset: $1 não é JSON: $2"),
    (r"^dataset: (\S+) must be a JSON array of objects \(or JSON Lines\)$",
     "dataset: $1 tem de ser um array JSON de objetos (ou JSON Lines)"),
    (r"^dataset: (\S+) is not readable CSV: (.*)$", "dataset: $1 não é um CSV legível: $2"),
    (r"^field: no text field found \(looked for messages, conversations, prompt\+completion, text\); rename the "
     r"column that holds the text to one of those and upload the file again",
     "field: nenhum campo de texto encontrado (procurou-se messages, conversations, prompt+completion, text); muda o "
     "nome da coluna com o texto para um destes e envia de novo o ficheiro"),
    *[(r"^field: column '(\w+)' holds (\w+), not " + en + r"; give that column what it names \(or put the text in a "
       r"'text' column as a string\) and upload the file again",
       "field: a coluna '$1' contém $2, não " + pt + "; dá a essa coluna o que o nome diz (ou põe o texto numa coluna "
       "'text' como string) e envia de novo o ficheiro")
      for en, pt in (("text", "texto"), (r"a list of messages \(\{role, content\} objects\)",
                                         "uma lista de mensagens (objetos {role, content})"))],
    (r"^file: unknown dataset format (.+)$", "file: formato de dataset desconhecido $1"),
    (r"^file: is larger than (\d+) MiB; use `vramfit plan --dataset`$",
     "file: tem mais de $1 MiB; usa `vramfit plan --dataset`"),
    (r"^token counts approximate \(approximation: (\S+) characters per token\); this page loads no tokenizer: "
     r"`vramfit plan --dataset FILE --tokenizer MODEL` counts exactly$",
     "contagens de tokens aproximadas (aproximação: $1 caracteres por token); esta página não carrega nenhum "
     "tokenizador: `vramfit plan --dataset FILE --tokenizer MODEL` conta-os exatamente"),
    (r"^no chat template found: messages rendered in the ChatML layout$",
     "nenhum chat template encontrado: mensagens compostas no formato ChatML"),
    (r"^(\w+): must be from (\d+) to (\d+), got (.+)$", "$1: tem de estar entre $2 e $3 (recebido: $4)"),
    (r"^(\w+): must be an integer from (\d+) to (\d+), got (.+)$", "$1: tem de ser um número inteiro entre $2 e $3 (recebido: $4)"),
    (r"^(\w+): must be a positive number up to (\d+), got (.+)$", "$1: tem de ser um número positivo até $2 (recebido: $3)"),
    (r"^(\w+): must be a positive number, got (.+)$", "$1: tem de ser um número positivo (recebido: $2)"),
    (r"^(\w+): must be a fraction from 0 up to \(not including\) 1, got (.+)$",
     "$1: tem de ser uma fração de 0 até 1, sem incluir o 1 (recebido: $2)"),
    (r"^(\w+): must be a number like 50000000, 5e7 or '50M' \(suffixes K, M, B, T\), got (.+)$",
     "$1: tem de ser um número como 50000000, 5e7 ou '50M' (sufixos K, M, B, T); recebido: $2"),
    (r"^parallelism: (\S+) does not run (\S+)", "parallelism: o $1 não corre $2"),
    (r"^num_gpus: (\S+) trains a quantized base on one GPU only \(its scripts refuse --quantize on more devices\)",
     "num_gpus: o $1 só treina uma base quantizada numa GPU (os seus scripts recusam --quantize com mais dispositivos)"),
    (r"^shard_scope: (\S+) shards over every rank \(its fine-tuning scripts have no hybrid sharding\)",
     "shard_scope: o $1 reparte por todas as GPUs (os seus scripts de fine-tuning não têm sharding híbrido)"),
    (r"^scenario: is empty: give a mapping of scenario keys such as model: (\S+)$",
     "scenario: está vazio: dá um mapeamento de chaves do cenário, por exemplo model: $1"),
    (r"^parallelism: (\d+) GPUs need a way to split the work", "parallelism: $1 GPUs precisam de uma forma de repartir o trabalho"),
    (r"^lora_targets: (.+?) is not a linear layer of this model", "lora_targets: $1 não é uma camada linear deste modelo"),
    (r"^params: not a parameter count: (.+?) \(examples: ", "params: não é um número de parâmetros: $1 (exemplos: "),
    (r"^model: give either model or params, not both$", "model: indica o modelo ou os parâmetros, não ambos"),
    (r"^model: is required \(a catalog/Hub id or a config\.json path\), or give params$",
     "model: é obrigatório (um modelo do catálogo), ou indica o número de parâmetros"),
    (r"^model: is required: a catalog id or alias, a parameter count \(params\) or a pasted config\.json \(config_json\)",
     "model: é obrigatório: um modelo do catálogo, um número de parâmetros (params) ou um config.json colado "
     "(config_json)"),
    (r"^quantize: qlora needs a quantized base", "quantize: o qlora precisa de uma base quantizada"),
    (r"^offload: CPU offload of model state is done by ZeRO or FSDP; set parallelism to one of them",
     "offload: a descarga do estado do modelo para o CPU é feita pelo ZeRO ou pelo FSDP; escolhe um deles em parallelism"),
    (r"^config_json: must be a JSON object \(the content of config\.json\), got (\w+)$",
     "config_json: tem de ser um objeto JSON (o conteúdo do config.json); recebido: $1"),
    (r"^config_json: config\.json of model_type '(.+?)' is missing the required field '(.+?)'$",
     "config_json: falta ao config.json de model_type '$1' o campo obrigatório '$2'"),
    (r"^config_json: config\.json field '(.+?)' \((\d+)\) must be at most '(.+?)' \((\d+)\): a token is routed to "
     r"that many of the experts$", "config_json: o campo '$1' do config.json ($2) não pode ser maior do que '$3' ($4): "
     "cada token é encaminhado para esse número de especialistas"),
    (r"^config_json: cannot be read as a Hugging Face config\.json ", "config_json: não se consegue ler como config.json do Hugging Face "),
    (r"^(\w+): unknown GPU '(.+?)'; did you mean: (.+?)\? \(`vramfit gpus` lists all (\d+)\)$",
     "$1: GPU desconhecida '$2'; querias dizer: $3? (o `vramfit gpus` lista as $4)"),
    (r"^(\w+): unknown GPU '(.+?)' \(`vramfit gpus` lists all (\d+)\)$",
     "$1: GPU desconhecida '$2' (o `vramfit gpus` lista as $3)"),
    (r"^(\w+): unknown software stack '(.*)'", "$1: stack de software desconhecida '$2'"),
    (r"^(\w+): unknown value '(.*)' \(valid values: ", "$1: valor desconhecido '$2' (valores válidos: "),
    (r"^(\w+): must be an integer, got (.+)$", "$1: tem de ser um número inteiro (recebido: $2)"),
    (r"^(\w+): is required(.*)$", "$1: é obrigatório$2"),
    (r"^num_gpus: no plan of (\S+) x (\S+) fits(.*)$", "num_gpus: nenhum plano de $1 × $2 cabe$3"),
    (r"^(\w+): unknown engine '(.*)'", "$1: motor desconhecido '$2'"),
    (r"torchtitan's files run full fine-tuning only and the plan is (\w+): torchtitan has no 4-bit path, and its 0\.3 "
     r"LoRAConverter is set in a config_registry function",
     "os ficheiros do torchtitan só correm afinação completa e o plano é $1: o torchtitan não tem caminho de 4 bits, e o "
     "LoRAConverter da versão 0.3 define-se numa função config_registry"),
    (r"torchtitan builds its own model definitions and has none for (.+?) \(it has ([^)]*)\)",
     "o torchtitan constrói as suas próprias definições de modelo e não tem nenhuma para $1 (tem $2)"),
    (r"^(\w+): is required: the card of the plan to export$", "$1: é obrigatório: a placa do plano a exportar"),
    (r"^gpu_id: must be a GPU id \(GET /api/gpus\), got (.+)$", "gpu_id: tem de ser o id de uma GPU (GET /api/gpus); recebido: $1"),
    (r"^num_gpus: must be a whole number of GPUs, got (.+)$", "num_gpus: tem de ser um número inteiro de GPUs; recebido: $1"),
    (r"^model: '(.+?)' is not in the bundled catalog\b.*$", "model: '$1' não está no catálogo incluído."),
    (r" \(valid values: ", " (valores válidos: "),
]

_COMPILED = [(re.compile(p), re.sub(r"\$(\d)", r"\\\1", r)) for p, r in RULES]
_NUM = re.compile(r"⟨([\d,]+(?:\.\d+)?)⟩")


def pt_number(text: str) -> str:
    """``3,689.6`` -> ``3689,6`` (the PT style: decimal comma, no group separator under 10 000)."""
    plain = text.replace(",", "")
    whole, _, frac = plain.partition(".")
    if len(whole) > 4:
        whole = f"{int(whole):,}".replace(",", " ")
    return whole + ("," + frac if frac else "")


def to_pt(text: str) -> str:
    """``text`` in Portuguese where the rules know it (else unchanged)."""
    out = text
    for rx, repl in _COMPILED:
        out = rx.sub(lambda m, r=repl: m.expand(r), out)
    return _NUM.sub(lambda m: pt_number(m.group(1)), out)


#: English words that no Portuguese rendering contains (outside code names, which have no spaces).
ENGLISH_WORDS = re.compile(r"\b(the|of|with|and|is|are|per|not|only|needs|must|got|from|instead|every|each|"
                           r"without|which|when|its)\b")


def untranslated(sentences: list[str]) -> list[str]:
    """The sentences no rule changed, or whose Portuguese still has English words in it."""
    return [s for s in sentences if to_pt(s) == s or ENGLISH_WORDS.search(to_pt(s))]


def rules_for_js() -> list[list[str]]:
    """The rules as ``[pattern, replacement]`` for the page's config (JavaScript ``RegExp``)."""
    return [[p, r] for p, r in RULES]
