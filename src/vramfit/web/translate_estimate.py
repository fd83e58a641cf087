"""Portuguese for the estimator's assumptions (``vramfit.estimate._assumptions``): the first and most specific
part of :data:`vramfit.web.translate.RULES` (that module's docstring says how the rules are written and applied)."""

from __future__ import annotations

_N = r"([\d,]+(?:\.\d+)?)"  # a number as the library prints it (1,234.5)

#: ``(regex, replacement)`` pairs, most specific first.
ESTIMATE_RULES: list[tuple[str, str]] = [
    # ---- estimator assumptions (vramfit.estimate._assumptions)
    (r"^Framework: (.+?) \(scenario key 'framework'\); its layout of adapters, norms and loss is used\.$",
     "Framework: $1 (chave 'framework' do cenário); usa-se a sua disposição de adaptadores, normalizações e perda."),
    (r"fp32 weights \(the master copy\), gradients and optimizer states; (\w+) autocast compute "
     r"\(full fine-tuning with AdamW: 16 B per parameter\)",
     "pesos fp32 (a cópia mestre), gradientes e estados do otimizador; cálculo em $1 com autocast "
     "(ajuste fino completo com AdamW: 16 B por parâmetro)"),
    (r"(\w+) weights, gradients and optimizer states, no fp32 master copy \(full fine-tuning with AdamW: 8 B per parameter\)",
     "pesos, gradientes e estados do otimizador em $1, sem cópia mestre fp32 (ajuste fino completo com AdamW: 8 B por parâmetro)"),
    (r"fp32 weights, gradients, optimizer states and activations", "pesos, gradientes, estados do otimizador e ativações em fp32"),
    (r"^Precision (\S+): ", "Precisão $1: "),
    (r" \(set; ([^()]+?)'s default for (\w+) is (\S+)\)\.$", " (escolhida; a predefinição de $1 para $2 é $3)."),
    (r" \(([^()]+?)'s default for (\w+)\)\.$", " (predefinição de $1 para $2)."),
    (r"^Activations are counted tensor by tensor from what autograd saves in a (\S+) block \(" + _N
     + r" MiB per block per micro-batch without checkpointing\)\.$",
     "As ativações contam-se tensor a tensor, a partir do que o autograd guarda num bloco $1 (⟨$2⟩ MiB por bloco "
     "e por micro-batch, sem checkpointing)."),
    (r"^Loss: ", "Perda: "),
    (r"model-dtype logits, fp32 upcast in ForCausalLMLoss", "logits no dtype do modelo, convertidos para fp32 em ForCausalLMLoss"),
    (r"fp32 logits from the model, CrossEntropyLoss", "logits fp32 do modelo, CrossEntropyLoss"),
    (r"^Gradients are freed with zero_grad\(set_to_none=True\) after each optimizer step\.$",
     "Os gradientes são libertados com zero_grad(set_to_none=True) depois de cada passo do otimizador."),
    (r"^CUDA context assumed " + _N + r" MiB per GPU \(lazy module loading\); `vramfit measure` records yours and "
     r"`vramfit calibrate` reports the overhead your runs imply\.$",
     "Contexto CUDA assumido: ⟨$1⟩ MiB por GPU (carregamento preguiçoso de módulos); o `vramfit measure` regista o teu "
     "e o `vramfit calibrate` indica o custo fixo que as tuas execuções implicam."),
    (r"^LoRA rank (\d+) on (.+?); dropout ([\d.]+); adapters in fp32\.$", "LoRA de rank $1 em $2; dropout ⟨$3⟩; adaptadores em fp32."),
    (r"^LoRA rank (\d+) on (.+?); dropout ([\d.]+); adapters in the parameter dtype\.$",
     "LoRA de rank $1 em $2; dropout ⟨$3⟩; adaptadores no dtype dos parâmetros."),
    (r"^Quantized base (\S+): block linears 4-bit, ", "Base quantizada $1: lineares dos blocos em 4 bits, "),
    (r"embeddings, norms and lm_head unquantized", "embeddings, normalizações e lm_head sem quantização"),
    (r"lm_head too", "lm_head também"),
    (r" \(cast to fp32 by prepare_model_for_kbit_training\)", " (convertidos para fp32 por prepare_model_for_kbit_training)"),
    (r"; the de-quantized copy of the largest layer \(" + _N + r" MiB\) is a transient\.$",
     "; a cópia desquantizada da maior camada (⟨$1⟩ MiB) é transitória."),
    (r"^Mixture-of-experts weights ", "Pesos dos especialistas (MoE) "),
    (r"quantized like the other block linears", "quantizados como os outros lineares do bloco"),
    (r"NOT quantized: fp32 \(prepare_model_for_kbit_training casts them\)",
     "NÃO quantizados: fp32 (o prepare_model_for_kbit_training converte-os)"),
    (r"NOT quantized: 16-bit", "NÃO quantizados: 16 bits"),
    (r"transformers 5 stores experts as fused 3-D parameters, which bitsandbytes leaves unquantized "
     r"\(transformers 4 quantized them\)",
     "o transformers 5 guarda os especialistas como parâmetros 3-D fundidos, que o bitsandbytes não quantiza "
     "(o transformers 4 quantizava-os)"),
    (r"(\S+) quantizes each expert's linear", "o $1 quantiza o linear de cada especialista"),
    (r"; set quantize_experts=yes or no to choose\.$", "; define quantize_experts=yes ou no para escolher."),
    # choices with nothing to act on (estimate/__init__.py inert_key_notes)
    (r"^kbit_prepare=(\w+) is ignored: only a quantized base \(method qlora\) is prepared for k-bit training, and "
     r"this run is (\S+)\.$",
     "kbit_prepare=$1 é ignorado: só uma base quantizada (method qlora) é preparada para treino em k bits, e esta "
     "corrida é $2."),
    (r"^kbit_prepare=yes casts nothing here: peft's prepare_model_for_kbit_training skips the fp32 cast for a GPTQ "
     r"model \(is_gptq_quantized\), so norms, embeddings and head stay 16-bit\.$",
     "kbit_prepare=yes aqui não converte nada: o prepare_model_for_kbit_training do peft salta a conversão para fp32 "
     "num modelo GPTQ (is_gptq_quantized), e normalizações, embeddings e cabeça ficam em 16 bits."),
    (r"^use_reentrant=(\w+) is ignored: gradient checkpointing is off\.$",
     "use_reentrant=$1 é ignorado: o gradient checkpointing está desligado."),
    (r"^quantize_experts=(\w+) is ignored: the model has no experts\.$",
     "quantize_experts=$1 é ignorado: o modelo não tem especialistas."),
    (r"^quantize_vision=(\w+) is ignored: the model has no vision tower\.$",
     "quantize_vision=$1 é ignorado: o modelo não tem torre de visão."),
    (r"^(quantize_experts|quantize_vision)=(\w+) is ignored: this run is (\S+), not qlora\.$",
     "$1=$2 é ignorado: esta corrida é $3, não qlora."),
    (r"^images_per_sample / frames_per_sample are ignored: the model has no vision tower, so its sequences hold text "
     r"tokens only\.$",
     "images_per_sample / frames_per_sample são ignorados: o modelo não tem torre de visão, as sequências só têm "
     "tokens de texto."),
    (r"^DeepSpeed config keys not modelled, their effect \(if any\) not in this estimate: (.*)$",
     "Chaves da configuração DeepSpeed não modeladas, o efeito delas (se o houver) não entra nesta estimativa: $1"),
    (r"not read by vramfit \(it models the stage, offload and the buffer sizes in estimate/deepspeed\.py\)",
     "não lidas pelo vramfit (modela o estágio, o descarregamento e os tamanhos dos buffers em estimate/deepspeed.py)"),
    (r"unknown to vramfit, check the spelling", "desconhecidas do vramfit, confirma a ortografia"),
    (r"parameter-only offload: counted as no offload \(an upper bound\)",
     "descarregamento só dos parâmetros: contado como sem descarregamento (um limite superior)"),
    (r"NVMe offload: counted as CPU offload", "descarregamento para NVMe: contado como descarregamento para a CPU"),
    (r"the scenario's optimizer key sets the optimizer", "a chave optimizer do cenário define o otimizador"),
    (r"DeepSpeed AutoTP tensor parallelism", "paralelismo de tensor AutoTP do DeepSpeed"),
    (r"NVMe offload I/O", "E/S do descarregamento para NVMe"),
    (r"^Vision tower and projector ", "Torre de visão e projetor "),
    (r"quantized like the language model's linears", "quantizados como os lineares do modelo de linguagem"),
    (r"\bkept 16-bit \(", "mantidos em 16 bits ("),
    (r": bitsandbytes replaces every linear but the head", ": o bitsandbytes substitui todos os lineares menos a cabeça"),
    (r": (\S+)'s dynamic 4-bit checkpoints keep the vision layers 16-bit",
     ": os checkpoints dinâmicos de 4 bits do $1 mantêm as camadas de visão em 16 bits"),
    (r"; set quantize_vision=yes or no to choose\.$", "; define quantize_vision=yes ou no para escolher."),
    (r"^QLoRA as the HF recipe runs it \(Trainer bf16=True\): attention and 4-bit matmuls in 16 bits under autocast; "
     r"without autocast, fp32 activations and SDPA's math kernel would need more\.$",
     "QLoRA como a receita HF o corre (Trainer bf16=True): atenção e produtos de matrizes de 4 bits em 16 bits com "
     "autocast; sem autocast, as ativações fp32 e o kernel math do SDPA precisariam de mais."),
    (r"^Paged optimizer: states of tensors >= 1e5 elements live in CUDA managed memory, outside PyTorch's counters "
     r"\(allocated/reserved\); counted in the device figure only\.$",
     "Otimizador paginado: os estados de tensores com ≥ 1e5 elementos vivem em memória gerida CUDA, fora dos "
     "contadores do PyTorch (alocado/reservado); contam só no valor da placa."),
    (r"^Assumes every micro-batch is (\d+) tokens long\. This recipe puts its longest sample in the first "
     r"micro-batch, before any gradient is held; the later ones carry every block's unsharded gradient \(FSDP "
     r"no_sync\)\. If they are shorter, the peak lies between " + _N + r" GiB and this figure, depending on their "
     r"lengths\.$",
     "Supõe micro-lotes de $1 tokens. Esta receita põe a sua amostra mais longa no primeiro micro-lote, antes de "
     "haver gradientes guardados; os seguintes levam o gradiente não fragmentado de cada bloco (no_sync do FSDP). "
     "Se forem mais curtos, o pico fica entre ⟨$2⟩ GiB e este valor, conforme os seus comprimentos."),
    (r"^Reserved memory assumes every micro-batch is (\d+) tokens long: the loss's tensors \(" + _N
     + r" GiB of allocator segments, sized by tokens x vocabulary\) hold most of what the caching allocator keeps, "
     r"so variable-length batches change it: each batch longer than all before it opens new segments and the old ones "
     r"stay reserved \(no empty_cache\), up to that much again per new longest length, most for lengths close to the "
     r"longest; a shuffled epoch of n batches has about ln n \+ 0\.6 of them, and batches after the longest add "
     r"nothing; pack or pad to a fixed length to keep this figure\.$",
     "A memória reservada supõe micro-lotes de $1 tokens: os tensores da perda (⟨$2⟩ GiB de segmentos do alocador, "
     "medidos por tokens x vocabulário) são a maior parte do que o alocador guarda em cache, por isso lotes de "
     "comprimento variável mudam-na: um lote mais longo que todos os anteriores abre segmentos novos e os antigos "
     "continuam reservados (sem empty_cache), até outro tanto por cada novo comprimento máximo, sobretudo para "
     "comprimentos próximos do máximo; uma época baralhada de n lotes tem cerca de ln n + 0,6 destes, e os lotes "
     "depois do mais longo não acrescentam nada; agrupe ou preencha até um comprimento fixo para manter este valor."),
    (r"^Reserved includes " + _N + r" GiB of sharded gradients cached on FSDP's reduce-scatter stream: after "
     r"zero_grad their blocks serve only later reduce-scatters, not the forward\.$",
     "A memória reservada inclui ⟨$1⟩ GiB de gradientes particionados em cache na stream de reduce-scatter do FSDP: "
     "depois do zero_grad os seus blocos só servem reduce-scatters seguintes, não o forward."),
    (r"^Reserved \(" + _N + r" GiB\) is what FSDP1 leaves wrapping a model loaded on the CPU \(each unit's moved and "
     r"flattened parameters stay cached\) plus the all-gather segments of its unshard stream; "
     r"torch\.cuda\.empty_cache\(\) after wrapping releases the first part\.$",
     "A memória reservada (⟨$1⟩ GiB) é o que o FSDP1 deixa ao envolver um modelo carregado na CPU (os parâmetros "
     "movidos e achatados de cada unidade ficam em cache) mais os segmentos de all-gather da sua stream de "
     "unshard; torch.cuda.empty_cache() depois de envolver liberta a primeira parte."),
    (r"^Activation offload: checkpointed block inputs in pinned host memory, prefetched one block ahead\.$",
     "Descarga de ativações: as entradas dos blocos guardadas ficam em memória fixada do host, pré-carregadas um "
     "bloco à frente."),
    (r"^Activation offload: checkpointed block inputs in pinned host memory, brought back when its block's backward "
     r"runs\.$",
     "Descarga de ativações: as entradas dos blocos guardadas ficam em memória fixada do host e voltam quando corre o "
     "backward do seu bloco."),
    (r"^MoE experts: transformers 4's training loop indexes each expert's weights out of the 3-D banks, a copy per "
     r"expert kept for backward \(moe_kernel=none; megablocks = the kernels hub's MegaBlocksMoeMLP\)\.$",
     "Especialistas MoE: o ciclo de treino do transformers 4 indexa os pesos de cada especialista nos bancos 3-D, uma "
     "cópia por especialista guardada para o backward (moe_kernel=none; megablocks = o MegaBlocksMoeMLP do hub de "
     "kernels)."),
    (r"^MoE experts: the kernels hub's MegaBlocksMoeMLP \(tokens binned per expert, batched matmuls on the banks\)\.$",
     "Especialistas MoE: o MegaBlocksMoeMLP do hub de kernels (tokens agrupados por especialista, produtos de matrizes "
     "em lote sobre os bancos)."),
    (r"^Mixed precision: the engine holds the weights in 16 bits \(fp32 master copy in the optimizer's partitions\), "
     r"no autocast: 16-bit activations\.$",
     "Precisão mista: o motor guarda os pesos em 16 bits (cópia mestre fp32 nas partições do otimizador), "
     "sem autocast: ativações de 16 bits."),
    (r"^torchtitan with one rank per shard: counted with FSDP2's bf16 cast, as torchtitan 0\.3 runs it \(FSDP2 at "
     r"every degree; its gathered copies counted under parallelism fsdp only\)\. Releases before 0\.3 \(those that "
     r"read a TOML\) apply no FSDP there: fp32 throughout at 9dec370, autocast in v0\.1-v0\.2\.2 \(none under "
     r"tensor or pipeline parallelism\), and no CPU offload\.$",
     "torchtitan com um só rank por fragmento: contado com a conversão bf16 do FSDP2, como o torchtitan 0.3 o corre "
     "(FSDP2 em qualquer grau; as suas cópias reunidas contadas só com parallelism fsdp). As versões antes do 0.3 (as "
     "que leem um TOML) não aplicam FSDP aí: fp32 em tudo no 9dec370, autocast nas v0.1-v0.2.2 (nenhum com "
     "paralelismo de tensor ou de pipeline), e nenhum descarregamento para a CPU."),
    (r"^Mixed precision: FSDP's policy casts the weights to 16 bits as it gathers them, no autocast: 16-bit "
     r"activations; fp32 only in the kept weights, gradients and optimizer states\.$",
     "Precisão mista: a política do FSDP converte os pesos para 16 bits ao reuni-los, sem autocast: ativações de 16 "
     "bits; fp32 só nos pesos guardados, nos gradientes e nos estados do otimizador."),
    (r"^Mixed precision: fp32 weights with 16-bit autocast copies kept for backward\.$",
     "Precisão mista: pesos fp32, com cópias de 16 bits do autocast guardadas para o backward."),
    (r"^(\d+) GPUs in one node with (\S+); NCCL buffers counted in the device figure\.$",
     "$1 GPUs num nó com $2; buffers NCCL contados no valor da placa."),
    # evaluation passes (vramfit.estimate.evaluation.evaluation_notes)
    (r"^Evaluation between optimizer steps: (\d+) x (\d+) tokens under no_grad, no saved activations or gradients; ",
     "Avaliação entre passos do otimizador: $1 × $2 tokens sob no_grad, sem ativações guardadas nem gradientes; "),
    (r"the whole logits and the loss's fp32 tensors", "os logits inteiros e os tensores fp32 da perda"),
    (r"the logits of " + _N + r" label positions and the loss's fp32 tensors",
     "os logits de ⟨$1⟩ posições com rótulo e os tensores fp32 da perda"),
    (r" \(the fused loss runs in training only: the pass makes whole logits\)",
     " (a perda fundida só corre no treino: a passagem cria os logits inteiros)"),
    (r" \(the fused loss runs in training only: the pass makes their logits\)",
     " (a perda fundida só corre no treino: a passagem cria os seus logits)"),
    (r", " + _N + r" GiB; its tensors reuse cached loss segments of the same size or open their own, which stay reserved\.$",
     ", ⟨$1⟩ GiB; os seus tensores reutilizam segmentos da perda em cache do mesmo tamanho ou abrem os seus, "
     "que ficam reservados."),
    (r"^eval_batch_size (\d+): evaluation passes are modelled for the sft stage only; none counted for (\w+)\.$",
     "eval_batch_size $1: as passagens de avaliação só se modelam na etapa sft; nenhuma contada para $2."),
]

_GIB = _N + r" GiB"
#: Loss details (``Loss: ...``, vramfit.estimate.loss and stages/preference.py), translated inside the sentence.
_LOSS_RULES: list[tuple[str, str]] = [
    (r"fused linear\+CE, chunks of (\d+) tokens", "linear e entropia cruzada fundidos, em blocos de $1 tokens"),
    (r"compiled cross-entropy over (\d+) chunk\(s\)", "entropia cruzada compilada em $1 bloco(s)"),
    (r"chunked CE over (\d+) chunks \(torchtune CEWithChunkedOutputLoss\)",
     "entropia cruzada em $1 blocos (CEWithChunkedOutputLoss do torchtune)"),
    (r", tanh logit soft-capping", ", limitação suave (soft-capping) dos logits com tanh"),
    (r"Unsloth fused CE \(no logits, chunk sized to free VRAM\)",
     "entropia cruzada fundida do Unsloth (sem logits, blocos à medida da VRAM livre)"),
    (r"fp32 logits from the model \(transformers < 4\.45\), shifted copy, CrossEntropyLoss",
     "logits fp32 do modelo (transformers < 4.45), cópia deslocada, CrossEntropyLoss"),
    (r"fp32 logits from the model \(transformers < 4\.45\), no shifted copy at micro-batch 1, CrossEntropyLoss",
     "logits fp32 do modelo (transformers < 4.45), sem cópia deslocada com micro-batch 1, CrossEntropyLoss"),
    (r"fp32 logits from the model, shifted copy kept by the loop \(torchtune 0\.1\), CrossEntropyLoss",
     "logits fp32 do modelo, cópia deslocada guardada pelo ciclo (torchtune 0.1), CrossEntropyLoss"),
    (r"model-dtype logits, fp32 upcast and shifted fp32 copy in ForCausalLMLoss \(transformers 4\.46-4\.48\)",
     "logits no dtype do modelo, convertidos para fp32, com cópia deslocada em fp32, em ForCausalLMLoss "
     "(transformers 4.46-4.48)"),
    (r"model-dtype logits, fp32 upcast and no shifted copy at micro-batch 1 in ForCausalLMLoss \(transformers "
     r"4\.46-4\.48\)",
     "logits no dtype do modelo, convertidos para fp32, sem cópia deslocada com micro-batch 1, em ForCausalLMLoss "
     "(transformers 4.46-4.48)"),
    (r"litgpt full\.py: unchunked logits, fp32 from Fabric, chunked_cross_entropy",
     "full.py do litgpt: logits inteiros (sem blocos), em fp32 vindos do Fabric, chunked_cross_entropy"),
    (r"lit-gpt chunked lm_head, fp32 outputs from Fabric, chunked_cross_entropy",
     "lm_head por blocos do lit-gpt, saídas em fp32 vindas do Fabric, chunked_cross_entropy"),
    (r"Apple Cut Cross-Entropy \(no logits; its backward allocates the lm_head-sized dc\)",
     "Cut Cross-Entropy da Apple (sem logits; o seu backward aloca o dc do tamanho do lm_head)"),
    (r"none on this pipeline stage \(the last stage computes the logits and loss\)",
     "nenhuma neste estágio do pipeline (o último estágio calcula os logits e a perda)"),
    (r"; the returned KV cache is alive until the forward returns",
     "; a cache KV devolvida fica viva até o forward terminar"),
    (r"; the loop keeps the returned logits and KV cache until after the optimizer step",
     "; o ciclo guarda os logits e a cache KV devolvidos até depois do passo do otimizador"),
    (r"; the loop keeps the returned logits until after the optimizer step",
     "; o ciclo guarda os logits devolvidos até depois do passo do otimizador"),
    (r"(\w+) log-probs: TRL fused LM head over " + _N + r" tokens",
     "log-probs de $1: cabeça LM fundida do TRL sobre ⟨$2⟩ tokens"),
    (r"(\w+) log-probs: full logits, ", "log-probs de $1: logits completos, "),
    (r"TRL's Triton log-prob kernel", "kernel Triton de log-probs do TRL"),
    (r"log_softmax of all of them", "log_softmax de todos eles"),
    (r" and the chosen half's cross-entropy over " + _N + r" tokens \(TRL\)",
     " e entropia cruzada da metade escolhida, sobre ⟨$1⟩ tokens (TRL)"),
    (r" over " + _N + r" tokens \(TRL\)", ", sobre ⟨$1⟩ tokens (TRL)"),
]

#: Preference and RL stages (vramfit.estimate.stages: preference.describe, rl.describe_rl).
_STAGE_RULES: list[tuple[str, str]] = [
    (r"^Stage (\w+) as TRL (\S+) runs it; micro_batch_size counts pairs: chosen and rejected run as one concatenated "
     r"forward of 2 × micro_batch_size sequences\.$",
     "Etapa $1 como o TRL $2 a corre; micro_batch_size conta pares: a resposta escolhida e a rejeitada correm num só "
     "forward concatenado de 2 × micro_batch_size sequências."),
    (r"^Stage (\w+) as TRL (\S+) runs it; micro_batch_size counts completions\.$",
     "Etapa $1 como o TRL $2 a corre; micro_batch_size conta completações."),
    (r"^Stage (\w+) as TRL (\S+) runs it; micro_batch_size counts examples \(one completion each\)\.$",
     "Etapa $1 como o TRL $2 a corre; micro_batch_size conta exemplos (uma completação cada)."),
    (r"^Log-probs as framework_version (\S+) takes them \(TRL before 1\.0 or its own trainer\): from the full logits",
     "Log-probs como a framework_version $1 as calcula (TRL antes do 1.0 ou o seu próprio trainer): a partir dos "
     "logits completos"),
    (r"(a partir dos logits completos) cast to fp32", "$1 convertidos para fp32"),
    (r"(a partir dos logits completos(?: convertidos para fp32)?), and the chosen half's cross-entropy\.$",
     "$1, e entropia cruzada da metade escolhida."),
    (r"^rpo_alpha (\S+): TRL 1\.16's RPO term \(loss_type sft\) reads the fused head's per-token log-probs of the "
     r"chosen half: no tensor of its own\.$",
     "rpo_alpha $1: o termo RPO do TRL 1.16 (loss_type sft) lê as log-probs por token da metade escolhida na cabeça "
     "fundida: nenhum tensor próprio."),
    (r"^Reference \((auto → )?([\w-]+)\): ", "Referência ($1$2): "),
    (r"^(Referência \([^)]*\)): a frozen copy of the model \(" + _GIB + r" per GPU, sharded\) and a no_grad pass "
     r"through it\.$",
     "$1: uma cópia congelada do modelo (⟨$2⟩ GiB por GPU, repartida) e uma passagem no_grad por ela."),
    (r"^(Referência \([^)]*\)): a frozen copy of the model \(" + _GIB + r" per GPU\) and a no_grad pass through it\.$",
     "$1: uma cópia congelada do modelo (⟨$2⟩ GiB por GPU) e uma passagem no_grad por ela."),
    (r"^(Referência \([^)]*\)): the policy with its adapters disabled \(no copy\), a no_grad pass\.$",
     "$1: a política com os adaptadores desligados (sem cópia), uma passagem no_grad."),
    (r"^(Referência \([^)]*\)): log-probs precomputed before training \(precompute_ref_log_probs\): no model, no "
     r"pass\.$",
     "$1: log-probs calculadas antes do treino (precompute_ref_log_probs): sem modelo, sem passagem."),
    (r"^(Referência \([^)]*\)): none \(reference-free loss\)\.$", "$1: nenhuma (perda sem referência)."),
    (r"^(Referência \([^)]*\)): none \(GRPO beta = 0, TRL's default\)\.$",
     "$1: nenhuma (GRPO beta = 0, a predefinição do TRL)."),
    (r"^(Referência \([^)]*\)): none\.$", "$1: nenhuma."),
    (r"^Rollouts: (\d+) completions per GPU generated at once, (\d+) prompt \+ (\d+) completion tokens, (\d+) per "
     r"prompt\.$",
     "Rollouts: $1 completações por GPU geradas de uma vez, $2 tokens de prompt + $3 de completação, $4 por prompt."),
    (r"^Rollouts: (\d+) completions per GPU generated at once, (\d+) prompt \+ (\d+) completion tokens\.$",
     "Rollouts: $1 completações por GPU geradas de uma vez, $2 tokens de prompt + $3 de completação."),
    (r"^Per optimizer step: (\d+) completions = (\d+) prompts × (\d+) generations \(the effective batch counts "
     r"completions, as TRL's does\)\.$",
     "Por passo do otimizador: $1 completações = $2 prompts × $3 gerações (o batch efetivo conta completações, como "
     "o do TRL)."),
    (r"^Generation with transformers generate: KV cache " + _GIB + r" \(2 × layers × kv_heads × head_dim × tokens × "
     r"dtype, every layer full length\)\.$",
     "Geração com o generate do transformers: cache KV de ⟨$1⟩ GiB (2 × camadas × kv_heads × head_dim × tokens × "
     "dtype, todas as camadas com o comprimento completo)."),
    (r"^vLLM colocated: " + _N + r" × (.+?) = " + _GIB + r" while generating only \(sleep mode level 2\); on another "
     r"card it takes that card's fraction \(estimate with its gpu\)\.$",
     "vLLM na mesma placa: ⟨$1⟩ × $2 = ⟨$3⟩ GiB só durante a geração (modo de suspensão nível 2); noutra placa ocupa "
     "a mesma fração dessa placa (estima com a gpu dela)."),
    (r"^vLLM colocated: " + _N + r" × (.+?) = " + _GIB + r" held through training too \(no sleep mode\); on another "
     r"card it takes that card's fraction \(estimate with its gpu\)\.$",
     "vLLM na mesma placa: ⟨$1⟩ × $2 = ⟨$3⟩ GiB ocupados também durante o treino (sem modo de suspensão); noutra "
     "placa ocupa a mesma fração dessa placa (estima com a gpu dela)."),
    (r"^vLLM server on GPUs of its own \(trl vllm-serve\): none of its memory is on these GPUs; count those GPUs "
     r"separately\.$",
     "Servidor vLLM em GPUs próprias (trl vllm-serve): nada da sua memória fica nestas GPUs; conta essas GPUs à "
     "parte."),
    (r"^PPO value model: the policy's architecture trained in full \(not PEFT\), lm_head counted in place of its "
     r"1-wide score head; reward model: a frozen copy of the same architecture\.$",
     "Modelo de valor do PPO: a arquitetura da política, treinada por completo (sem PEFT), com o lm_head contado em "
     "vez da sua cabeça de pontuação de largura 1; modelo de recompensa: uma cópia congelada da mesma arquitetura."),
]

#: Reserved-memory notes (fsdp_reserved, nf4_load, reentrant_fsdp1) and the QLoRA cast note of TRL's recipe.
_RESERVED_RULES: list[tuple[str, str]] = [
    (r"^Reserved includes " + _GIB + r" that FSDP1 leaves cached wrapping a model loaded on the CPU and the step's "
     r"tensors are too large to reuse \(they open segments beside it\); worked out for micro-batches of (\d+) tokens "
     r"\(how much of it the step reuses depends on its tensors' sizes, so variable-length batches change it\); ",
     "A memória reservada inclui ⟨$1⟩ GiB que o FSDP1 deixa em cache ao envolver um modelo carregado na CPU e que os "
     "tensores do passo, grandes demais, não reutilizam (abrem segmentos ao lado); calculado para micro-batches de $2 "
     "tokens (quanto o passo reutiliza depende dos tamanhos dos seus tensores, por isso lotes de comprimento "
     "variável mudam-no); "),
    (r"^Reserved \(" + _GIB + r"\) is what FSDP1 leaves wrapping a model loaded on the CPU \(each unit's moved and "
     r"flattened parameters stay cached\)",
     "A memória reservada (⟨$1⟩ GiB) é o que o FSDP1 deixa ao envolver um modelo carregado na CPU (os parâmetros "
     "movidos e achatados de cada unidade ficam em cache)"),
    (r"(\(os parâmetros movidos e achatados de cada unidade ficam em cache\)) plus the all-gather segments of its "
     r"unshard stream;", "$1 mais os segmentos de all-gather da sua stream de unshard;"),
    (r"; torch\.cuda\.empty_cache\(\) after wrapping releases it\.$",
     "; torch.cuda.empty_cache() depois de envolver liberta-os."),
    (r"; torch\.cuda\.empty_cache\(\) after wrapping releases the first part\.$",
     "; torch.cuda.empty_cache() depois de envolver liberta a primeira parte."),
    (r"; the loop's torch\.cuda\.empty_cache\(\) after wrapping has returned the segments left wholly free\.$",
     "; o torch.cuda.empty_cache() do ciclo depois de envolver já devolveu os segmentos que ficaram totalmente livres."),
    (r"^Reserved includes " + _GIB + r" of segments the end of backward opens: the input embedding's gradient and the "
     r"last FSDP2 unit's flat reduce-scatter input are larger than any block the step freed before them\.$",
     "A memória reservada inclui ⟨$1⟩ GiB de segmentos que o fim do backward abre: o gradiente do embedding de "
     "entrada e a entrada plana de reduce-scatter da última unidade FSDP2 são maiores do que qualquer bloco que o "
     "passo libertou antes deles."),
    (r"^Reserved includes " + _GIB + r" of FSDP2 reduce-scatter outputs cached on its reduce-scatter stream \(each "
     r"dropped once copied to the host or added into the held shard\)\.$",
     "A memória reservada inclui ⟨$1⟩ GiB de saídas de reduce-scatter do FSDP2 em cache na sua stream de "
     "reduce-scatter (cada uma largada depois de copiada para o host ou somada ao fragmento guardado)."),
    (r"^Reserved includes " + _GIB + r" that building and quantizing the model on the GPU leaves cached \(torchao "
     r"(\S+)'s un-chunked to_nf4 per linear, at build and again in load_state_dict; the recipe calls no "
     r"torch\.cuda\.empty_cache\(\)\); the step's tensors reuse those blocks where they fit, worked out for "
     r"micro-batches of (\d+) tokens\.$",
     "A memória reservada inclui ⟨$1⟩ GiB que construir e quantizar o modelo na GPU deixa em cache (o to_nf4 sem "
     "blocos do torchao $2, por linear, na construção e de novo no load_state_dict; a receita não chama "
     "torch.cuda.empty_cache()); os tensores do passo reutilizam esses blocos onde cabem, calculado para "
     "micro-batches de $3 tokens."),
    (r"^Reentrant gradient checkpointing under FSDP1 \(use_reentrant: (\w+)\): torch's reshard-only hook on each "
     r"frozen block unit keeps every block's input and its gradient to the end of backward, " + _GIB + r" more in "
     r"the lowest block's backward; use_reentrant=False \(gradient_checkpointing_kwargs\) avoids it\.$",
     "Gradient checkpointing reentrante com FSDP1 (use_reentrant: $1): o hook só de reshard do torch em cada unidade "
     "de bloco congelada guarda a entrada de cada bloco e o seu gradiente até ao fim do backward, mais ⟨$2⟩ GiB no "
     "backward do bloco mais baixo; use_reentrant=False (gradient_checkpointing_kwargs) evita-o."),
    (r" \(cast to fp32 by prepare_model_for_kbit_training; embeddings and lm_head back to bf16 by TRL's "
     r"peft_module_casting_to_bf16\)",
     " (convertidos para fp32 por prepare_model_for_kbit_training; embeddings e lm_head de volta a bf16 pelo "
     "peft_module_casting_to_bf16 do TRL)"),
]

#: GPU layout, model parallelism, reserved-memory and allocator notes (vramfit.estimate: _gpus_note, ranks,
#: fsdp_reserved, fsdp2, nf4_load, reentrant_fsdp1, on_card, _upcast_note).
_LAYOUT_RULES: list[tuple[str, str]] = [
    (r"^(\d+) nodes of (\d+) GPUs\.$", "$1 nós de $2 GPUs."),
    (r"^(\d+) nodes of (\d+) GPUs; ", "$1 nós de $2 GPUs; "),
    (r"(GPUs; )HSDP: model state sharded over the (\d+) GPUs of a node, replicated on each node\. ",
     "$1HSDP: o estado do modelo repartido pelas $2 GPUs de um nó, replicado em cada nó. "),
    (r"(GPUs; )ZeRO-3 shards over all (\d+) ranks, plus ZeRO\+\+ hpZ's second 16-bit copy of the weights sharded "
     r"over the (\d+) GPUs of a node\. ",
     "$1o ZeRO-3 reparte por todos os $2 ranks, mais a segunda cópia de 16 bits dos pesos do hpZ do ZeRO++, "
     "repartida pelas $3 GPUs de um nó. "),
    (r"(GPUs; )(\S+): every rank holds the whole model state\. ", "$1$2: cada rank guarda todo o estado do modelo. "),
    (r"(GPUs; )(\S+) over all (\d+) ranks\. ", "$1$2 em todos os $3 ranks. "),
    (r"Per rank, every rank alike; NCCL's network transport buffers \(host memory, proxy\) are not counted in the "
     r"device figure\.$",
     "Por rank, todos iguais; os buffers de transporte de rede do NCCL (memória do host, proxy) não contam no valor "
     "da placa."),
    (r"^(\d+) GPUs is more than one node holds \((\d+)\): modelled as (\d+) GPUs sharing the work with (\S+) as if in "
     r"one node \(intra-node NCCL buffers\); multi-node effects \(network transport buffers, hierarchical sharding\) "
     r"are not modelled yet\.$",
     "$1 GPUs são mais do que um nó comporta ($2): modeladas como $3 GPUs a repartir o trabalho com $4 como num só "
     "nó (buffers NCCL dentro do nó); os efeitos de vários nós (buffers de transporte de rede, repartição "
     "hierárquica) ainda não são modelados."),
    (r" It includes (\d+) x " + _N + r" MiB of NVLS buffers \((.+?) makes them with each of the (\d+) "
     r"communicators? on an NVSwitch node of (\d+) GPUs\)\.$",
     " Inclui $1 × ⟨$2⟩ MiB de buffers NVLS (o $3 cria-os com cada um dos $4 comunicador(es) num nó NVSwitch de $5 "
     "GPUs)."),
    (r"^(\d+) GPUs in one node with (\S+); NCCL buffers counted in the device figure\. ",
     "$1 GPUs num nó com $2; buffers NCCL contados no valor da placa. "),
    (r"^Model parallel as torchtitan (\S+) shards it: tensor (\d+) \(sequence parallel on\), ",
     "Paralelismo de modelo como o torchtitan $1 o reparte: tensor $2 (paralelismo de sequência ligado), "),
    (r"(\d+) pipeline stages \(([\w-]+), (\d+) chunks per GPU, (\d+) micro-batches per step\), context (\d+)",
     "$1 estágios de pipeline ($2, $3 blocos por GPU, $4 micro-batches por passo), contexto $5"),
    (r"(\d+) pipeline stages \(([\w-]+), (\d+) micro-batches per step\), context (\d+)",
     "$1 estágios de pipeline ($2, $3 micro-batches por passo), contexto $4"),
    (r"(ligado\)), no pipeline, context (\d+)", "$1, sem pipeline, contexto $2"),
    (r"; expert parallel (\d+) \(each rank holds 1/(\d+) of the routed experts, tokens exchanged by all-to-all\)",
     "; paralelismo de especialistas $1 (cada rank guarda 1/$2 dos especialistas encaminhados, tokens trocados por "
     "all-to-all)"),
    (r"; HSDP: FSDP over the (\d+) data-parallel ranks of a node \(dp_shard × cp\), replicated (\d+) times "
     r"\(dp_replicate\)\. ",
     "; HSDP: FSDP sobre os $1 ranks de paralelismo de dados de um nó (dp_shard × cp), replicado $2 vezes "
     "(dp_replicate). "),
    (r"; FSDP over the remaining (\d+) ranks \(dp_shard × cp\)\. ", "; FSDP sobre os $1 ranks restantes (dp_shard × cp). "),
    (r"Per rank; the peak is the every rank \((\d+) layers, " + _N + r" micro-batches in flight\); see 'ranks' for "
     r"each\.$",
     "Por rank; o pico é igual em todos os ranks ($1 camadas, ⟨$2⟩ micro-batches em curso); vê 'ranks' para cada um."),
    (r"Per rank; the peak is the first stage \((\d+) layers, " + _N + r" micro-batches in flight\); see 'ranks' for "
     r"each\.$",
     "Por rank; o pico está no primeiro estágio ($1 camadas, ⟨$2⟩ micro-batches em curso); vê 'ranks' para cada um."),
    (r"Per rank; the peak is the last stage \((\d+) layers, " + _N + r" micro-batches in flight\); see 'ranks' for "
     r"each\.$",
     "Por rank; o pico está no último estágio ($1 camadas, ⟨$2⟩ micro-batches em curso); vê 'ranks' para cada um."),
    (r"^FSDP2 \(fsdp_version 2\) as (\S+(?: [\d.]+)?)'s (\S+) wraps it; ", "FSDP2 (fsdp_version 2) como o $2 do $1 o aplica; "),
    (r"^FSDP2 \(fsdp_version 2\) as (.+?) wraps it; ", "FSDP2 (fsdp_version 2) como o $1 o aplica; "),
    (r"the transients of loading and sharding the model \(each full tensor on the GPU before its shard\) are not "
     r"counted in the reserved figure\.$",
     "os transitórios de carregar e repartir o modelo (cada tensor completo na GPU antes do seu fragmento) não "
     "contam no valor reservado."),
    (r"^On the (.+?) \(" + _GIB + r" usable\) the allocator releases its free cached segments and retries before an "
     r"allocation fails: reserved stops at " + _GIB + r", the card full \(without that limit it would reach "
     + _GIB + r"\)\.$",
     "Na $1 (⟨$2⟩ GiB utilizáveis) o alocador liberta os segmentos livres em cache e tenta de novo antes de uma "
     "alocação falhar: a memória reservada fica em ⟨$3⟩ GiB, com a placa cheia (sem esse limite chegaria a ⟨$4⟩ GiB)."),
    *_RESERVED_RULES,
]

ESTIMATE_RULES += _LOSS_RULES + _STAGE_RULES + _LAYOUT_RULES
