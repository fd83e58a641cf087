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
    (r"^DeepSpeed ZeRO keeps an fp32 master copy and fp32 optimizer states in each rank's partition whatever the "
     r"model's dtype \(([^)]*)\)\.$",
     "O DeepSpeed ZeRO guarda uma cópia mestre fp32 e os estados do otimizador em fp32 na partição de cada rank, seja "
     "qual for o dtype do modelo ($1)."),
    (r"^Precision (\S+): ", "Precisão $1: "),
    (r" \(set; ([^()]+?)'s default for (\w+) is (\S+)\)\.$", " (escolhida; a predefinição de $1 para $2 é $3)."),
    (r" \(([^()]+?)'s default for (\w+)\)\.$", " (predefinição de $1 para $2)."),
    (r"^Activations are counted tensor by tensor from what autograd saves in a (\S+) block \(" + _N
     + r" MiB per block per micro-batch without checkpointing\)\.$",
     "As ativações contam-se tensor a tensor, a partir do que o autograd guarda num bloco $1 (⟨$2⟩ MiB por bloco "
     "e por micro-batch, sem checkpointing)."),
    (r"^Attention: the (.+?) has no FlashAttention-2, so (\S+) runs xformers with k and v copied out to all (\d+) query "
     r"heads \(not (\d+)\), and those copies are saved for backward\.$",
     "Atenção: a $1 não tem FlashAttention-2, por isso o $2 corre o xformers com k e v copiados para todas as $3 cabeças "
     "de query (não $4), e essas cópias ficam guardadas para o backward."),
    (r"^Attention: the (.+?) has no flash SDPA kernel and PyTorch's memory-efficient one takes no grouped-query heads, "
     r"so transformers' SDPA call \(enable_gqa\) runs the math kernel: fp32 probabilities \((\d+) x (\d+) x (\d+)\^2 per "
     r"layer\) and fp32 q, k and v of every head are saved for backward\.$",
     "Atenção: a $1 não tem o kernel flash do SDPA e o de memória eficiente do PyTorch não aceita cabeças de query "
     "agrupadas, por isso a chamada SDPA do transformers (enable_gqa) corre o kernel math: as probabilidades em fp32 "
     "($2 x $3 x $4^2 por camada) e q, k e v em fp32 de todas as cabeças ficam guardados para o backward."),
    (r"^Loss: ", "Perda: "),
    (r"model-dtype logits, fp32 upcast in ForCausalLMLoss", "logits no dtype do modelo, convertidos para fp32 em ForCausalLMLoss"),
    (r"model-dtype logits, fp32 upcast in torchtitan's loss_fn \(cross_entropy of pred\.float\(\)\)",
     "logits no dtype do modelo, convertidos para fp32 na loss_fn do torchtitan (cross_entropy de pred.float())"),
    (r"fp32 logits from the model, CrossEntropyLoss", "logits fp32 do modelo, CrossEntropyLoss"),
    (r"^torch\.compile: each decoder block compiled; the final norm, output layer and loss eager ",
     "torch.compile: cada bloco do decoder compilado; a normalização final, a camada de saída e a perda em modo eager "),
    (r"^torch\.compile: the model and the loss compiled ", "torch.compile: o modelo e a perda compilados "),
    (r"^torch\.compile: each decoder block and the loss compiled; the final norm and output layer eager ",
     "torch.compile: cada bloco do decoder e a perda compilados; a normalização final e a camada de saída em modo "
     "eager "),
    (r"\(AOTAutograd's min-cut partition\): a compiled norm keeps its input and per-token statistics, and the MLP's "
     r"activation is recomputed in backward\.",
     "(partição min-cut do AOTAutograd): uma normalização compilada guarda a sua entrada e as estatísticas por token, "
     "e a ativação do MLP é recalculada no backward."),
    (r" Under op-level selective AC a compiled block keeps only what its backward reads: not its down projection's "
     r"output, which eager SAC caches\.$",
     " Com o AC seletivo por operação, um bloco compilado guarda só o que o seu backward lê: não a saída da sua "
     "projeção down, que o SAC eager guarda."),
    (r"^Gradients are freed with zero_grad\(set_to_none=True\) after each optimizer step\.$",
     "Os gradientes são libertados com zero_grad(set_to_none=True) depois de cada passo do otimizador."),
    (r"^CUDA context and lazily loaded kernels assumed " + _N + r" MiB per GPU( \(measured on an H200, torch 2\.11 \+ "
     r"CUDA 13\))?; `vramfit measure` records yours and `vramfit calibrate` reports the overhead your runs imply\.$",
     "Contexto CUDA e kernels carregados a pedido assumidos: ⟨$1⟩ MiB por GPU$2; o `vramfit measure` regista o teu "
     "e o `vramfit calibrate` indica o custo fixo que as tuas execuções implicam."),
    (r" \(measured on an H200, torch 2\.11 \+ CUDA 13\)", " (medido numa H200, torch 2.11 + CUDA 13)"),
    (r"^LoRA rank (\d+) on (.+?); dropout ([\d.]+); adapters in fp32\.$", "LoRA de rank $1 em $2; dropout ⟨$3⟩; adaptadores em fp32."),
    (r"^LoRA rank (\d+) on (.+?); dropout ([\d.]+); adapters in the parameter dtype\.$",
     "LoRA de rank $1 em $2; dropout ⟨$3⟩; adaptadores no dtype dos parâmetros."),
    (r"^Quantized base (\S+): block linears (\d)-bit, ", "Base quantizada $1: lineares dos blocos em $2 bits, "),
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
    (r"^PEFT's all-linear wraps the router, an nn\.Linear subclass whose forward returns a tuple, and peft 0\.21\.2's "
     r"LoRA layer fails reading that output's dtype \(the simulator's run of transformers 5\.24\.0 and peft 0\.21\.2\): "
     r"name the linears to adapt; the router is left unadapted here\.$",
     "O all-linear do PEFT envolve o router, uma subclasse de nn.Linear cujo forward devolve um tuplo, e a camada LoRA "
     "do peft 0.21.2 falha ao ler o dtype dessa saída (a execução do simulador com transformers 5.24.0 e peft 0.21.2): "
     "indica as camadas lineares a adaptar; aqui o router fica sem adaptador."),
    (r"^freeze_vision=(\w+) is ignored: the model has no vision tower\.$",
     "freeze_vision=$1 é ignorado: o modelo não tem torre de visão."),
    (r"^(images_per_sample|frames_per_sample) is ignored: the model has no vision tower, so its sequences hold text "
     r"tokens only\.$", "$1 é ignorado: o modelo não tem torre de visão, as sequências só têm tokens de texto."),
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
    (r"the gradient accumulation dtype \(grad_accum_dtype\)", "o dtype da acumulação de gradientes (grad_accum_dtype)"),
    (r"^Vision tower and projector ", "Torre de visão e projetor "),
    (r"quantized like the language model's linears", "quantizados como os lineares do modelo de linguagem"),
    (r"\bkept 16-bit \(", "mantidos em 16 bits ("),
    (r": bitsandbytes replaces every linear but the head", ": o bitsandbytes substitui todos os lineares menos a cabeça"),
    (r": (\S+)'s dynamic 4-bit checkpoints keep the vision layers 16-bit",
     ": os checkpoints dinâmicos de 4 bits do $1 mantêm as camadas de visão em 16 bits"),
    (r"; set quantize_vision=yes or no to choose\.$", "; define quantize_vision=yes ou no para escolher."),
    (r"^QLoRA as the HF recipe runs it \(Trainer bf16=True\): attention and (\d)-bit matmuls in 16 bits under autocast; "
     r"without autocast, fp32 activations and SDPA's math kernel would need more\.$",
     "QLoRA como a receita HF o corre (Trainer bf16=True): atenção e produtos de matrizes de $1 bits em 16 bits com "
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
    (r"^From the second optimizer step on, reserved memory can be up to " + _N + r" GiB above this figure: the first "
     r"step's gradients and lazily created optimizer states are placed by best fit in the segments its loss left "
     r"cached, and a segment still holding a state after zero_grad cannot serve the next loss, whose tensors open new "
     r"segments that sit idle at the backward peak\. How many are taken depends on where each tensor lands \(measured "
     r"on an H100: Qwen3-4B full fine-tuning \+8\.72 GB after the first step, all of its loss segments; Llama-3\.2-1B "
     r"\+4\.20 GB, one of three\); vramfit simulate replays the placement\.$",
     "A partir do segundo passo do otimizador, a memória reservada pode ficar até ⟨$1⟩ GiB acima deste valor: os "
     "gradientes do primeiro passo e os estados do otimizador, criados só então, são colocados por melhor ajuste nos "
     "segmentos que a sua perda deixou em cache, e um segmento que ainda guarda um estado depois do zero_grad não "
     "serve a perda seguinte, cujos tensores abrem segmentos novos, parados no pico do backward. Quantos são ocupados "
     "depende de onde cai cada tensor (medido numa H100: Qwen3-4B com ajuste completo +8,72 GB depois do primeiro "
     "passo, todos os seus segmentos da perda; Llama-3.2-1B +4,20 GB, um de três); vramfit simulate reproduz a "
     "colocação."),
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
    (r"^gradient_checkpointing (\S+): not set, so (\S+)'s own, what its scripts run on one GPU\.$",
     "gradient_checkpointing $1: não indicado, por isso o do $2, o que os seus scripts correm numa GPU."),
    (r"^gradient_checkpointing (\S+): not set, so (\S+)'s own, what its scripts run on several GPUs\.$",
     "gradient_checkpointing $1: não indicado, por isso o do $2, o que os seus scripts correm em várias GPUs."),
    (r"^gradient_checkpointing (\S+): not set, so (\S+)'s own, its default\.$",
     "gradient_checkpointing $1: não indicado, por isso o do $2, a sua predefinição."),
    (r"^gradient_checkpointing (\S+): (\S+)'s scripts run (\S+) on one GPU \(checkpointing is their FSDP strategy's "
     r"per-block policy\); counted as set, which takes an edited script\.$",
     "gradient_checkpointing $1: os scripts do $2 correm $3 numa GPU (o checkpointing é a política por bloco da sua "
     "estratégia FSDP); conta-se como indicado, o que exige um script editado."),
    (r"^gradient_checkpointing (\S+): (\S+)'s scripts run (\S+) on several GPUs \(checkpointing is their FSDP "
     r"strategy's per-block policy\); counted as set, which takes an edited script\.$",
     "gradient_checkpointing $1: os scripts do $2 correm $3 em várias GPUs (o checkpointing é a política por bloco da "
     "sua estratégia FSDP); conta-se como indicado, o que exige um script editado."),
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

from vramfit.web.translate_estimate_more import MORE_RULES  # noqa: E402  (after the specific rules above)

ESTIMATE_RULES += MORE_RULES
