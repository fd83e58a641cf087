"""Portuguese for the estimator's stage, loss, layout and allocator lines: the rest of
:data:`vramfit.web.translate_estimate.ESTIMATE_RULES` (split off to keep each file short; same rule style)."""

from __future__ import annotations

_N = r"([\d,]+(?:\.\d+)?)"  # a number as the library prints it (1,234.5), as translate_estimate._N

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
    (r"model-dtype logits, Unsloth's Triton cross-entropy \(gradient written over the logits\)",
     "logits no dtype do modelo, entropia cruzada Triton do Unsloth (gradiente escrito sobre os logits)"),
    (r"Apple Cut Cross-Entropy \(no logits; its backward allocates the lm_head-sized dc\)",
     "Cut Cross-Entropy da Apple (sem logits; o seu backward aloca o dc do tamanho do lm_head)"),
    (r"torchtitan's chunked loss: lm_head and (eager|compiled) cross-entropy over (\d+) chunks of ([\d,]+) tokens, each "
     r"chunk's backward in the loss \(high point: ",
     "perda por blocos do torchtitan: lm_head e entropia cruzada $1 em $2 blocos de $3 tokens, o backward de cada "
     "bloco dentro da perda (ponto alto: "),
    (r"entropia cruzada compiled em", "entropia cruzada compilada em"),
    (r"\(ponto alto: cross-entropy\)", "(ponto alto: entropia cruzada)"),
    (r"\(ponto alto: output-layer backward\)", "(ponto alto: backward da camada de saída)"),
    (r"\(ponto alto: reduce-scatter\)", "(ponto alto: reduce-scatter)"),
    (r"\(ponto alto: 16-bit hidden-state gradient\)", "(ponto alto: gradiente de 16 bits dos estados ocultos)"),
    (r"\(ponto alto: first fp32 copy\)", "(ponto alto: primeira cópia fp32)"),
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
    (r" and the chosen half's cross-entropy over " + _N + r" tokens \((TRL|torchtune)\)",
     " e entropia cruzada da metade escolhida, sobre ⟨$1⟩ tokens ($2)"),
    (r" over " + _N + r" tokens \((TRL|torchtune)\)", ", sobre ⟨$1⟩ tokens ($2)"),
]

#: the Portuguese head of a framework recipe's stage line (either rule below), up to what micro_batch_size counts
_RECIPE_COUNTS = (r"(\((?:sem perfil de etapa do \w+|código de log-probs do próprio \w+, não o do TRL)\); "
                  r"micro_batch_size conta)")

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
    # what a stage's time counts (plan/stage_work.py stage_time_note)
    (r"^Stage (\w+): a step's tokens count one sequence per pair \(a dataset's rows\), and each pair runs its chosen "
     r"and rejected sequences",
     "Etapa $1: os tokens de um passo contam uma sequência por par (as linhas de um dataset), e cada par corre as suas "
     "sequências escolhida e rejeitada"),
    (r"; the precomputed reference log-probs \(one no-grad forward of every pair before training\) are not timed\.$",
     "; os log-probs de referência pré-calculados (um forward sem gradiente de cada par antes do treino) não são "
     "cronometrados."),
    (r"^Stage ppo: a step is one batch of rollouts, trained (\d+) times \(TRL num_ppo_epochs\) with its value model; "
     r"its tokens count the batch's sequences once\.$",
     "Etapa ppo: um passo é um lote de rollouts, treinado $1 vezes (num_ppo_epochs do TRL) com o seu modelo de valor; "
     "os seus tokens contam as sequências do lote uma vez."),
    (r"^Stage ppo: a step is one batch of rollouts, trained (\d+) times \((\w+) ppo_epochs\) with its value model; "
     r"its tokens count the batch's sequences once\.$",
     "Etapa ppo: um passo é um lote de rollouts, treinado $1 vezes (ppo_epochs do $2) com o seu modelo de valor; "
     "os seus tokens contam as sequências do lote uma vez."),
    # a scenario loss the stage's trainer does not run (stages.stage_loss_choice)
    (r"^loss (\w+): the (\w+) trainer of this release has no fused or chunked loss \(use_liger_kernel applies Liger's "
     r"layer kernels only\), so its own log-prob code is counted\.$",
     "loss $1: o treinador de $2 desta versão não tem perda fundida nem por blocos (use_liger_kernel só aplica os "
     "kernels de camada do Liger), por isso conta-se o seu próprio código de log-probs."),
    (r"^loss (\w+): the (\w+) trainer of this release has no fused or chunked loss, so its own log-prob code is "
     r"counted\.$",
     "loss $1: o treinador de $2 desta versão não tem perda fundida nem por blocos, por isso conta-se o seu próprio "
     "código de log-probs."),
    # a framework's own stage recipe (profile stage_recipes), counted with TRL's stage profile (preference._stage_runner)
    (r"^Stage (\w+) in (\w+)'s ([\w /]+) recipe, its memory estimated as TRL (\S+) runs the stage \(no \w+ stage "
     r"profile\); micro_batch_size counts ",
     "Etapa $1 na receita $3 do $2, com a memória estimada como o TRL $4 corre a etapa (sem perfil de etapa do $2); "
     "micro_batch_size conta "),
    # ... or counted with the recipe's own log-prob code where the profile models it (torchtune's DPO/SimPO)
    (r"^Stage (\w+) in (\w+)'s ([\w /]+) recipe, its memory estimated as (\S+) runs the stage \(\w+'s own log-prob "
     r"code, not TRL's\); micro_batch_size counts ",
     "Etapa $1 na receita $3 do $2, com a memória estimada como o $4 corre a etapa (código de log-probs do próprio $2, "
     "não o do TRL); micro_batch_size conta "),
    (_RECIPE_COUNTS + r" pairs: chosen and rejected run as one concatenated forward of 2 × micro_batch_size "
     r"sequences\.$",
     "$1 pares: a resposta escolhida e a rejeitada correm num só forward concatenado de 2 × micro_batch_size "
     "sequências."),
    (_RECIPE_COUNTS + r" completions\.$", "$1 completações."),
    (_RECIPE_COUNTS + r" examples \(one completion each\)\.$", "$1 exemplos (uma completação cada)."),
    (r"^Log-probs as framework_version (\S+) takes them \(TRL before 1\.0 or its own trainer\): from the full logits",
     "Log-probs como a framework_version $1 as calcula (TRL antes do 1.0 ou o seu próprio trainer): a partir dos "
     "logits completos"),
    (r"(a partir dos logits completos) cast to fp32", "$1 convertidos para fp32"),
    (r"^Mixed precision runs through accelerate's wrapper, which returns the model's logits in fp32 "
     r"\(convert_outputs_to_fp32\): the log-probs read fp32 logits\.$",
     "A precisão mista passa pelo wrapper do accelerate, que devolve os logits do modelo em fp32 "
     "(convert_outputs_to_fp32): as log-probs leem logits em fp32."),
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
    (r"^PPO keeps its rollouts' generation scores \(fp32, completions × completion_len × vocabulary: " + _N
     + r" GiB\) through scoring and training, and the previous step's through the next rollout \(TRL's logitss\)\.$",
     "O PPO guarda as pontuações da geração dos seus rollouts (fp32, completações × completion_len × vocabulário: "
     "⟨$1⟩ GiB) durante a pontuação e o treino, e as do passo anterior durante o rollout seguinte (logitss do TRL)."),
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
    (r"^On the (.+?) \(" + _GIB + r" usable\) the allocator releases its free cached segments and retries before an "
     r"allocation fails: reserved stops at " + _GIB + r", the card full \(without that limit it would reach "
     + _GIB + r"\), at least " + _GIB + r" of the paged optimizer state in host memory\.$",
     "Na $1 (⟨$2⟩ GiB utilizáveis) o alocador liberta os segmentos livres em cache e tenta de novo antes de uma "
     "alocação falhar: a memória reservada fica em ⟨$3⟩ GiB, com a placa cheia (sem esse limite chegaria a ⟨$4⟩ GiB), "
     "pelo menos ⟨$5⟩ GiB do estado paginado do otimizador na memória do anfitrião."),
    (r"^DeepSpeed config (\w+) (\d+) is not this scenario's (\w+) \((\d+)\): the HF Trainer refuses the mismatch "
     r"\(trainer_config_finalize\); this estimate is of \w+ \d+\. Give \w+ \d+, or \"auto\" in the file\.$",
     "O valor $1 $2 da configuração do DeepSpeed não é o $3 deste cenário ($4): o Trainer do HF recusa a diferença "
     "(trainer_config_finalize); esta estimativa é a de $3 $4. Dê $3 $2, ou \"auto\" no ficheiro."),
    (r"^DeepSpeed config train_batch_size (\d+) is not this scenario's effective_batch \((\d+)\): the HF Trainer refuses "
     r"the mismatch \(trainer_config_finalize\); this estimate is of effective_batch \d+\. Give micro_batch_size x "
     r"grad_accum x data-parallel GPUs = \d+, or \"auto\" in the file\.$",
     "O train_batch_size $1 da configuração do DeepSpeed não é o lote efetivo deste cenário ($2): o Trainer do HF recusa "
     "a diferença (trainer_config_finalize); esta estimativa é a do lote efetivo $2. Dê micro_batch_size x grad_accum x "
     "GPUs de dados paralelos = $1, ou \"auto\" no ficheiro."),
    (r"^Your DeepSpeed file gives (.+): the HF Trainer refuses it with a plan whose micro-batch, accumulation or GPU "
     r"count makes other values \(trainer_config_finalize\); write \"auto\" there \(--export deepspeed writes the "
     r"plan's own\)\.$",
     "O seu ficheiro do DeepSpeed dá $1: o Trainer do HF recusa-o num plano cujo micro-batch, acumulação ou número de "
     "GPUs dê outros valores (trainer_config_finalize); escreva \"auto\" aí (--export deepspeed escreve os do plano)."),
    (r"^cannot run: no BF16 on (.+) \(--precision fp16-mixed runs\)$",
     "não corre: sem BF16 na $1 (com a precisão fp16-mixed corre)"),
    (r"^cannot run: no FlashAttention-2 on (.+) \(--attention sdpa runs\)$",
     "não corre: sem FlashAttention-2 na $1 (com a atenção sdpa corre)"),
    (r"^no FlashAttention-2 on (.+): plan it with --attention sdpa$", "sem FlashAttention-2 na $1: planeia com a atenção sdpa"),
    *_RESERVED_RULES,
]

#: A sequence past the model's trained context (vramfit.models.context past_context_note).
_CONTEXT_RULES: list[tuple[str, str]] = [
    (r"^seq_len " + _N + r" is past the model's context \(the model was trained to " + _N + r" tokens, "
     r"max_position_embeddings in its config\): memory is counted for " + _N + r" tokens, but positions past " + _N
     + r" were never trained; extend the context \(rope_scaling\) or shorten the sequences\.$",
     "seq_len ⟨$1⟩ ultrapassa o contexto do modelo (foi treinado até ⟨$2⟩ tokens, max_position_embeddings na sua "
     "configuração): a memória é contada para ⟨$3⟩ tokens, mas as posições além de ⟨$4⟩ nunca foram treinadas; "
     "estenda o contexto (rope_scaling) ou encurte as sequências."),
]

MORE_RULES: list[tuple[str, str]] = _LOSS_RULES + _STAGE_RULES + _LAYOUT_RULES + _CONTEXT_RULES
