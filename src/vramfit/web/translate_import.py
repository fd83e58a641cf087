"""Portuguese for the notes of the config-import report (``POST /api/import``: why a key is ignored or not modelled
yet, where a default comes from): part of :data:`vramfit.web.translate.RULES` (same rule style, split off to keep
each file short).

A citation (``owner/repo@sha path l. N``, ``ms-swift v4.5.2 path``) stays as it is; the explanation after it is
translated, and so are the labels the importers give for an ignored key (``logging``, ``checkpoint saving``), matched
whole so that a key name at the start of another sentence (``loss: ...``) is left alone. Sentences first, then the
phrases several notes share, then the labels.
"""

from __future__ import annotations

from vramfit.web.translate_rlhf import RLHF_LABELS, RLHF_RULES

#: Notes that are one label (why a key is ignored or not modelled yet), matched whole.
LABELS: dict[str, str] = {
    # what a key is about
    "data": "dados", "data layout": "disposição dos dados", "data loading": "carregamento dos dados",
    "data order": "ordem dos dados", "data preprocessing": "pré-processamento dos dados", "path": "caminho",
    "paths and labels": "caminhos e rótulos", "label": "rótulo", "upload": "envio para o Hub",
    "download": "transferência do Hub", "logging": "registos", "metrics": "métricas", "monitoring": "monitorização",
    "profiling": "medição de desempenho (profiling)", "debugging": "depuração", "determinism": "determinismo",
    "randomness": "aleatoriedade", "timeouts": "tempos limite", "callbacks": "funções de callback",
    "schedule": "calendário do treino", "evaluation": "avaliação", "evaluation schedule": "calendário da avaliação",
    "generation at evaluation": "geração na avaliação", "inference": "inferência", "export": "exportação",
    "mode": "modo", "sampling": "amostragem", "generation": "geração", "tokenizer": "tokenizador",
    "loading": "carregamento", "launcher": "lançador", "launcher environment": "ambiente do lançador",
    "the subcommand": "o subcomando", "plugins": "extensões (plugins)", "config checking": "verificação da configuração",
    "argument checks": "verificação dos argumentos", "args.json record": "registo do args.json",
    "model registry name": "nome no registo de modelos", "model family hint": "indicação da família do modelo",
    "model detail": "detalhe do modelo", "model config overrides": "substituições na configuração do modelo",
    "vocab rounding": "arredondamento do vocabulário", "host garbage collection": "recolha de lixo no host",
    "estimation mode": "modo de estimativa", "always cuda here": "aqui é sempre cuda",
    "unset": "não definido", "unset or off": "não definido ou desligado", "off": "desligado", "no FSDP": "sem FSDP",
    "no truncation": "sem truncagem", "validation is off": "validação desligada",
    "experimental switches off": "opções experimentais desligadas", "load_in_4bit is off": "load_in_4bit está desligado",
    "rmsnorm is modelled": "rmsnorm é modelado", "TPU only": "só TPU", "accelerate default": "predefinição do accelerate",
    "a permission flag": "uma opção de permissão", "collective dtype": "dtype das operações coletivas",
    "storage dtype": "dtype de armazenamento", "torch.compile settings": "definições do torch.compile",
    "compile detail": "detalhe da compilação", "compile options": "opções de compilação",
    "communication": "comunicação", "communication overlap": "sobreposição da comunicação",
    "stage boundaries": "fronteiras dos estágios do pipeline", "schedule file": "ficheiro do calendário do pipeline",
    "loss layout": "disposição da perda", "sequence sharding under TP, as modelled": "repartição da sequência com TP, como modelada",
    # the optimizer, the loss, the checkpoints
    "optimizer hyperparameter": "hiperparâmetro do otimizador", "optimizer hyperparameters": "hiperparâmetros do otimizador",
    "learning-rate ratio": "razão da taxa de aprendizagem", "clipping": "recorte (clipping)", "clipping range": "intervalo de recorte",
    "loss": "perda", "loss options": "opções da perda", "loss choice": "escolha da perda",
    "loss choice of a preference stage": "escolha da perda de uma etapa de preferência", "loss weight": "peso da perda",
    "a loss weight": "um peso da perda", "loss weights": "pesos da perda", "a loss margin": "uma margem da perda",
    "loss weighting": "ponderação da perda", "loss weight of the rl stage": "peso da perda da etapa rl",
    "which tokens carry loss": "que tokens contam para a perda", "MoE auxiliary loss": "perda auxiliar MoE",
    "EAFT loss": "perda EAFT", "reward scaling": "escala das recompensas", "reward functions (host)": "funções de recompensa (no host)",
    "updates per batch (the step holds one)": "atualizações por lote (o passo guarda uma)",
    "reuse of rollouts": "reutilização das gerações (rollouts)", "checkpoint": "retoma de checkpoint",
    "checkpoint saving": "gravação de checkpoints", "checkpoint loading/saving": "carregamento/gravação de checkpoints",
    "checkpoint resume": "retoma de checkpoint", "checkpoint function options": "opções da função de checkpointing",
    "recompute style": "estilo de recálculo", "every-k-layers activation checkpointing": "checkpointing de ativações a cada k camadas",
    "the vision tower's checkpointing": "o checkpointing da torre de visão",
    # adapters, quantization, precision
    "adapter layout": "disposição do adaptador", "adapter head type": "tipo de cabeça do adaptador",
    "adapter initialisation": "inicialização do adaptador", "PEFT extra options": "opções extra do PEFT",
    "the tuner library (peft assumed)": "a biblioteca de tuners (assume-se peft)",
    "LoRA weights' dtype (PEFT's kept)": "dtype dos pesos LoRA (mantém-se o do PEFT)",
    "PEFT bookkeeping (base model path, task type, init, revision)":
        "metadados do PEFT (caminho do modelo base, tipo de tarefa, inicialização, revisão)",
    "bitsandbytes compute/storage detail": "detalhe de cálculo/armazenamento do bitsandbytes",
    "bitsandbytes compute dtype, thresholds and storage type":
        "dtype de cálculo, limiares e tipo de armazenamento do bitsandbytes",
    "GPTQ checkpoint detail": "detalhe do checkpoint GPTQ", "GPTQ kernel choice": "escolha do kernel GPTQ",
    "HQQ quantization (not used)": "quantização HQQ (não usada)", "other quantization schemes": "outros esquemas de quantização",
    "quantization-aware training": "treino consciente da quantização",
    "quantization-aware training / quantization": "treino consciente da quantização / quantização",
    "FP8 training": "treino em FP8", "NVFP4": "formato NVFP4", "1-bit models": "modelos de 1 bit",
    "precision comes from the training config": "a precisão vem da configuração de treino",
    "filled in by the trainer ('auto')": "preenchido pelo Trainer ('auto')",
    "filled in by the trainer ('auto'); a number is checked by the estimate against micro-batch x accumulation x GPUs, "
    "the count set at launch": "preenchido pelo Trainer ('auto'); um número é verificado pela estimativa contra "
    "micro-batch x acumulação x GPUs, o número definido no lançamento",
    # features not modelled yet
    "Axolotl's fused LoRA Triton kernels": "kernels Triton de LoRA fundidos do Axolotl", "EBFT training": "treino EBFT",
    "settings of the rl stage not read (GRPO sizes are)": "definições da etapa rl não lidas (os tamanhos do GRPO são lidos)",
    "diffusion-LM training": "treino de LM de difusão", "the vLLM generation server of GRPO": "o servidor de geração vLLM do GRPO",
    "MoE expert kernels": "kernels dos especialistas MoE", "the MoE expert kernels": "os kernels dos especialistas MoE",
    "legacy packing length": "comprimento de empacotamento antigo", "N-D parallel layouts": "disposições paralelas N-D",
    "context parallelism": "paralelismo de contexto", "tensor parallelism": "paralelismo de tensores",
    "expert parallelism": "paralelismo de especialistas", "LoRA on MoE expert parameters": "LoRA nos parâmetros dos especialistas MoE",
    "partial full fine-tuning": "ajuste fino completo parcial", "attention kernel variants": "variantes de kernels de atenção",
    "flash-attn fused kernels": "kernels fundidos do flash-attn", "BetterTransformer": "kernels BetterTransformer do optimum",
    "model-specific kernels": "kernels específicos de modelos", "reward-model heads": "cabeças de modelo de recompensa",
    "reward-model training": "treino de modelo de recompensa", "classification heads": "cabeças de classificação",
    "multimodal": "congelamento de módulos multimodais", "multimodal freezing": "congelamento multimodal",
    "multimodal inputs": "entradas multimodais", "tiled MLP": "MLP em blocos (tiled)", "tiling": "divisão em blocos (tiling)",
    "LISA layer freezing": "congelamento de camadas LISA", "LISA": "congelamento de camadas LISA", "ReLoRA": "treino ReLoRA",
    "PiSSA": "inicialização PiSSA do adaptador", "GaLore": "otimizador GaLore", "re-initialised weights": "pesos reinicializados",
    "Liger's non-fused cross-entropy": "entropia cruzada não fundida do Liger", "chunked cross-entropy": "entropia cruzada por blocos",
    "LLaMA-Factory's v1 fused kernels": "kernels fundidos v1 do LLaMA-Factory",
    "KTransformers CPU experts": "especialistas no CPU do KTransformers", "Megatron parallelism": "paralelismo Megatron",
    "Megatron kernels": "kernels Megatron", "Megatron MoE": "MoE do Megatron", "Megatron recompute": "recálculo Megatron",
    "Megatron packing": "empacotamento Megatron", "Megatron precision": "precisão Megatron",
    "layer norms upcast to fp32": "normas das camadas convertidas para fp32",
    "lm_head output upcast to fp32": "saída do lm_head convertida para fp32",
    "mixture of depths": "mistura de profundidades (MoD)", "knowledge distillation": "destilação de conhecimento",
    "knowledge distillation (a second, frozen model)": "destilação de conhecimento (um segundo modelo, congelado)",
    "FSDP options given as a mapping": "opções FSDP dadas como mapeamento", "FSDP wrapping": "encapsulamento FSDP",
    "FSDP wrapping detail": "detalhe do encapsulamento FSDP", "tensor/context/hybrid parallel layouts":
        "disposições paralelas de tensores/contexto/híbridas",
    "accelerate's sequence/context/tensor parallel layouts": "disposições paralelas de sequência/contexto/tensores do accelerate",
    "Ulysses/ring sequence parallelism": "paralelismo de sequência Ulysses/ring", "DeepSpeed AutoTP": "AutoTP do DeepSpeed",
    "ZeRO++ hierarchical partitioning": "partição hierárquica do ZeRO++", "NEFTune noise": "ruído NEFTune",
    "a frozen language model (multimodal)": "um modelo de linguagem congelado (multimodal)",
    "frozen parameter lists": "listas de parâmetros congelados", "frozen parameter share": "fração de parâmetros congelados",
    "trainable parameter lists": "listas de parâmetros treináveis", "image size (multimodal)": "tamanho das imagens (multimodal)",
    "allocator settings (expandable segments change the reserved figure)":
        "definições do alocador (os segmentos expansíveis mudam o valor reservado)",
    "a separate reference model": "um modelo de referência separado", "reward models held in memory":
        "modelos de recompensa guardados na memória", "a teacher model (GKD)": "um modelo professor (GKD)",
    "asynchronous generation": "geração assíncrona", "vLLM tensor parallelism": "paralelismo de tensores do vLLM",
    "model offload during generation": "descarga do modelo durante a geração",
    "optimizer offload during generation": "descarga do otimizador durante a geração",
    "weight sync batches": "lotes de sincronização dos pesos", "vLLM's KV cache size": "tamanho da cache KV do vLLM",
    "vLLM server address": "endereço do servidor vLLM",
    **RLHF_LABELS,  # web/translate_rlhf.py
}

_SPECIAL = set(".^$*+?()[]{}|\\")


def _whole(text: str) -> str:
    """``text`` as a pattern matching it whole (escaped for both Python ``re`` and JavaScript)."""
    return "^" + "".join("\\" + c if c in _SPECIAL else c for c in text) + "$"


_SFT = "estimado como ajuste fino supervisionado"

IMPORT_RULES: list[tuple[str, str]] = [
    # ---- whole notes (vramfit.config_import: axolotl, axolotl_dtype, companions, hf_common, litgpt, llamafactory,
    # stages, swift, torchtitan, torchtune, trl)
    (r"^0 is not passed to the Trainer \(Axolotl passes a non-zero eval_batch_size only\), which then evaluates (\d+) "
     r"per GPU \((\S+)\)$",
     "0 não é passado ao Trainer (o Axolotl só passa um eval_batch_size diferente de zero), que então avalia $1 por GPU "
     "($2)"),
    (r"^Axolotl loads the model on the CPU \(FSDP, ZeRO-3, or one GPU under accelerate launch\), where kernelize finds "
     r"no MegaBlocksMoeMLP, so the model's own experts forward runs; DDP on several GPUs loads each copy on its GPU and "
     r"the hub kernel runs there: pass --moe-kernel megablocks$",
     "o Axolotl carrega o modelo no CPU (FSDP, ZeRO-3, ou uma GPU com accelerate launch), onde o kernelize não encontra "
     "MegaBlocksMoeMLP, e corre o forward dos especialistas do próprio modelo; o DDP em várias GPUs carrega cada cópia "
     "na sua GPU e o kernel do hub corre aí: indica --moe-kernel megablocks"),
    (r"^auto: on, as Axolotl turns it on for torch ([\d.]+) and newer \(it requires ([\d.]+)\); off under use_ray, "
     r"whose driver reads no torch version$",
     "auto: ligado, como o Axolotl o liga no torch $1 e posteriores (exige o $2); desligado com use_ray, cujo driver "
     "não lê a versão do torch"),
    (r"^deprecated: DeepSpeed reads it as (\w+) on the CPU when true \(runtime/zero/config\.py\)$",
     "obsoleto: o DeepSpeed lê-o como $1 no CPU quando é true (runtime/zero/config.py)"),
    (r"zero_optimization\.(\w+) must be true or false, got (.+?)(?= \(valid values|$)",
     "zero_optimization.$1 tem de ser true ou false (recebido: $2)"),
    (r"zero_optimization\.(\w+) \(deprecated\) and (\w+) together: DeepSpeed refuses them together; keep the section",
     "zero_optimization.$1 (obsoleto) e $2 juntos: o DeepSpeed recusa-os juntos; mantém a secção"),
    (r"^torchtune v([\d.]+)'s LoRA and QLoRA recipes do not read it \(full recipes only\)$",
     "as receitas LoRA e QLoRA do torchtune v$1 não o leem (só as receitas completas)"),
    (r"^adapter lora with load_in_4bit: Axolotl quantizes only for adapter qlora, so the base loads unquantized",
     "adapter lora com load_in_4bit: o Axolotl só quantiza com adapter qlora, por isso a base carrega sem quantização"),
    (r"sem quantização and prepare_model_for_kbit_training casts it to fp32 \(norms and embeddings back to 16 bits\): "
     r"counted as an fp32 base under the Trainer's autocast$",
     "sem quantização e o prepare_model_for_kbit_training converte-a para fp32 (normalizações e embeddings de volta a "
     "16 bits): contada como uma base fp32 com o autocast do Trainer"),
    (r"sem quantização in 16 bits \(ZeRO-3, FSDP cpu_ram_efficient_loading and Qwen-1 models skip "
     r"prepare_model_for_kbit_training\)$",
     "sem quantização, em 16 bits (ZeRO-3, FSDP cpu_ram_efficient_loading e os modelos Qwen-1 saltam o "
     "prepare_model_for_kbit_training)"),
    (r"^Axolotl casts norms, embeddings and lm_head back to 16 bits after prepare_model_for_kbit_training \((\S+) "
     r"(\w+); FSDP and ZeRO-3 skip the preparation\)$",
     "o Axolotl converte normalizações, embeddings e lm_head de volta a 16 bits depois do "
     "prepare_model_for_kbit_training ($1 $2; FSDP e ZeRO-3 saltam a preparação)"),
    (r"^bf16 is on too, and Axolotl then turns fp16 off \((.+)\)$",
     "o bf16 também está ligado, e o Axolotl desliga então o fp16 ($1)"),
    (r": 'auto' = bf16 on Ampere and newer, off when fp16 is on$",
     ": 'auto' = bf16 em Ampere e posteriores, desligado quando o fp16 está ligado"),
    (r"^(\S+) attention: counted as SDPA \(memory-efficient, linear in seq_len\)$",
     "atenção $1: contada como SDPA (eficiente em memória, linear em seq_len)"),
    (r"^a regular expression of module paths: counted as all-linear", "uma expressão regular de caminhos de módulos: "
     "contada como all-linear"),
    (r"^full fine-tuning trains the resized embedding and head as they are \(the added rows are not counted\)$",
     "o ajuste fino completo treina o embedding e a cabeça redimensionados tal como estão (as linhas acrescentadas não "
     "são contadas)"),
    (r"^trained copies of (.+): not counted \(embed_tokens and lm_head are\)$",
     "cópias treinadas de $1: não contadas (as de embed_tokens e lm_head são)"),
    (r"^4-bit MoE experts on an unquantized base \(adapter lora\)$",
     "especialistas MoE de 4 bits numa base não quantizada (adapter lora)"),
    (r"^no adapter: LoRA settings have no effect$", "sem adaptador: as definições LoRA não têm efeito"),
    (r"^given with gradient_accumulation_steps, which wins here$", "dado com gradient_accumulation_steps, que prevalece aqui"),
    (r"^plugins: their settings are read below$", "plugins: as definições deles são lidas abaixo"),
    (r"^model class: the architecture comes from base_model$", "classe do modelo: a arquitetura vem de base_model"),
    (r"^weights dtype override: precision is taken from bf16/fp16$",
     "substituição do dtype dos pesos: a precisão vem de bf16/fp16"),
    (r"^Liger RoPE/RMSNorm/SwiGLU/LayerNorm kernels: vramfit models the fused loss only$",
     "kernels RoPE/RMSNorm/SwiGLU/LayerNorm do Liger: o vramfit só modela a perda fundida"),
    (r"^Unsloth kernels: vramfit estimates the plain transformers \+ PEFT step",
     "kernels Unsloth: o vramfit estima o passo simples de transformers + PEFT"),
    (r"\(counted as checkpoint offload\)$", "(contado como checkpointing com descarga)"),
    (r"^counted as checkpoint offload: LLaMA-Factory's UnslothGradientCheckpointing holds dY, the recomputed output and "
     r"the input's gradient in a block's backward and prefetches nothing \(one block-input tensor more than "
     r"transformers' offload, which the estimate runs\)$",
     "contado como checkpointing com descarga: o UnslothGradientCheckpointing do LLaMA-Factory guarda dY, a saída "
     "recalculada e o gradiente da entrada no backward de um bloco e não antecipa nada (mais um tensor de entrada de "
     "bloco do que a descarga do transformers, que a estimativa corre)"),
    (r"^LLaMA-Factory turns checkpointing on unless disable_gradient_checkpointing$",
     "o LLaMA-Factory liga o checkpointing exceto com disable_gradient_checkpointing"),
    (r": checkpointing is on unless disabled$", ": o checkpointing está ligado exceto se for desativado"),
    (r"^SFT term on the per-token log-probs the loss already holds: no tensor of its own$",
     "termo SFT sobre as log-probabilidades por token que a perda já guarda: sem tensor próprio"),
    (r"^replicas other than the node count \((.+), one replica per node\) are not modelled yet$",
     "réplicas em número diferente do de nós ($1, uma réplica por nó) ainda não são modeladas"),
    (r"^FSDP wrapping, prefetch and state-dict details: vramfit models the sharding and offload only$",
     "detalhes de encapsulamento, prefetch e state-dict do FSDP: o vramfit só modela a repartição e a descarga"),
    (r"^DeepSpeed's own checkpointing API: unused by the HF Trainer$",
     "API de checkpointing própria do DeepSpeed: não usada pelo HF Trainer"),
    (r"^an eval set is assumed: the Trainer refuses this strategy without one \((.+)\)$",
     "assume-se um conjunto de avaliação: o Trainer recusa esta estratégia sem um ($1)"),
    (r"^assumed: training reaches eval\.interval, so a validation follows an optimizer step \(else only the check "
     r"before training runs\)$",
     "assumido: o treino chega a eval.interval, por isso há uma validação depois de um passo do otimizador (senão só "
     "corre a verificação antes do treino)"),
    (r"^evaluation cadence: validation runs at (\S+)$", "cadência da avaliação: a validação corre com $1"),
    (r"^read by the distributed recipes \(the single-device ones never validate\)$",
     "lido pelas receitas distribuídas (as de um só dispositivo nunca validam)"),
    (r"^DPO losses other than sigmoid are counted as sigmoid's \(the same log-probs\)$",
     "as perdas DPO além da sigmoid contam como a da sigmoid (as mesmas log-probabilidades)"),
    (r"^the loss formula: the same log-probs$", "a fórmula da perda: as mesmas log-probabilidades"),
    (r"^ppo: modelled as TRL's PPO with a separate, fully trained value model; LLaMA-Factory puts the value head on "
     r"the policy itself, so the value model is an over-count$",
     "ppo: modelado como o PPO do TRL, com um modelo de valor separado e totalmente treinado; o LLaMA-Factory põe a "
     "cabeça de valor na própria política, por isso o modelo de valor é uma sobrestimativa"),
    (r"^stage '(\w+)' \(reward-model training\) is not modelled yet: ",
     "stage '$1' (treino de modelo de recompensa) ainda não é modelado: "),
    (r"^(\w+) '([^']*)' is not modelled yet \(modelled: ([^)]*)\): ", "$1 '$2' ainda não é modelado (modelados: $3): "),
    (r": estimated as supervised fine-tuning$", ": " + _SFT),
    (r"^the prompt's share of max_length \(TRL before ([\d.]+)\), which bounds the pair$",
     "a parte do prompt em max_length (TRL antes do $1), que limita o par"),
    (r"^the completion's share of max_length \(TRL before ([\d.]+)\)$", "a parte da completação em max_length (TRL antes do $1)"),
    (r"^not a key of Axolotl's trl section \((.+)\): pydantic drops it; the colocated vLLM's share is (\S+)$",
     "não é uma chave da secção trl do Axolotl ($1): o pydantic descarta-a; a fração do vLLM na mesma placa é $2"),
    (r"^several GPUs without NPROC_PER_NODE: ms-swift splits the model over them with device_map \((.+)\); estimated "
     r"as one GPU holding it all$",
     "várias GPUs sem NPROC_PER_NODE: o ms-swift reparte o modelo por elas com device_map ($1); estimado como uma só "
     "GPU que o guarda todo"),
    (r"^ms-swift's '(\w+)' optimizer \(GaLore/LoRA\+/Muon/multimodal\): estimated as optim$",
     "otimizador '$1' do ms-swift (GaLore/LoRA+/Muon/multimodal): estimado como optim"),
    (r"^logits from the batch's first label position on \(ms-swift's default for text models\): counted for every "
     r"token, an upper bound on the logits and loss$",
     "logits a partir da primeira posição de rótulo do lote (predefinição do ms-swift para modelos de texto): contados "
     "para todos os tokens, um limite superior dos logits e da perda"),
    (r"^the DeepSpeed config as ms-swift resolved it: read below$",
     "a configuração DeepSpeed tal como o ms-swift a resolveu: lida abaixo"),
    (r"^each image is scaled to at most ([\d,]+) pixels before the processor: give image_height and image_width at "
     r"that size \(a square image: (\d+) x (\d+)\)$", "cada imagem é reduzida a no máximo ⟨$1⟩ píxeis antes do "
     "processador: indique image_height e image_width nesse tamanho (uma imagem quadrada: $2 x $3)"),
    (r"^unused with adapters: lora_target all leaves the projector out$",
     "sem uso com adaptadores: o lora_target all deixa o projetor de fora"),
    (r"^the projector frozen apart from the tower: counted with (freeze_vit|freeze_vision_tower)$",
     "o projetor congelado à parte da torre: contado com $1"),
    (r"^a LoRA setting: unused with full fine-tuning$", "uma definição LoRA: sem uso no ajuste fino completo"),
    (r"^causal_lm is what vramfit models$", "causal_lm é o que o vramfit modela"),
    (r"^args\.json record of transformers' old name \((\w+) is read\)$",
     "registo no args.json do nome antigo do transformers (lê-se $1)"),
    (r"^not read by vramfit: no memory effect it models in (.+)'s arguments \(if it is a typo, ms-swift refuses it\)$",
     "não lido pelo vramfit: sem efeito na memória que modele nos argumentos do $1 (se for um erro de escrita, o "
     "ms-swift recusa-o)"),
    (r"^not read by vramfit: no memory effect it models in torchtitan's job config \(check the spelling\)$",
     "não lido pelo vramfit: sem efeito na memória que modele na configuração de job do torchtitan (confirma a "
     "ortografia)"),
    (r"^(-?\d+): (\d+) = the launcher's (\d+) GPUs / (\d+) for the other degrees; write the degree for another count "
     r"\(--num-gpus does not re-derive it\)$",
     "$1: $2 = as $3 GPUs do lançador / $4 para os outros graus; escreve o grau para outro número de GPUs "
     "(--num-gpus não o recalcula)"),
    (r"^no effect here: at data_parallel_shard_degree x context_parallel_degree = 1 torchtitan before 0\.3 applies no "
     r"FSDP, so nothing is offloaded \(0\.3, which reads no TOML, offloads at every degree\)$",
     "sem efeito aqui: com data_parallel_shard_degree x context_parallel_degree = 1, o torchtitan antes do 0.3 não "
     "aplica FSDP, por isso nada é descarregado (o 0.3, que não lê TOML, descarrega em qualquer grau)"),
    (r"^float8 linears \(torchao\): estimated with bf16 matmuls and activations$",
     "lineares float8 (torchao): estimados com multiplicações de matrizes e ativações em bf16"),
    (r"^tensor parallelism without sequence parallelism: counted with it \(norm and dropout activations sharded\)$",
     "paralelismo de tensores sem paralelismo de sequência: contado com ele (ativações de normalização e dropout "
     "repartidas)"),
    (r"^HSDP: each of the (\w+) replicas counted as one node's shard group$",
     "HSDP: cada uma das réplicas de $1 contada como o grupo de repartição de um nó"),
    (r"^a reduce dtype other than float32: gradients counted in float32$",
     "um dtype de redução diferente de float32: gradientes contados em float32"),
    (r"^stage boundaries given: counted as (\d+) stages per rank$", "fronteiras dos estágios indicadas: contadas como $1 "
     "estágios por rank"),
    (r"^every (\d+)-th block checkpointed: counted as no checkpointing",
     "checkpointing de um bloco em cada $1: contado como sem checkpointing"),
    (r"^validation passes between steps: not counted$", "passagens de validação entre passos: não contadas"),
    (r"^optimizer kernel: the profile models (\w+)'s foreach step$",
     "kernel do otimizador: o perfil modela o passo foreach do $1"),
    (r"^(\S+ \S+): no Hugging Face id in vramfit's table \((.+)\); pass --model$",
     "$1: sem id Hugging Face na tabela do vramfit ($2); indica --model"),
    (r"^builder (\S+): no Hugging Face id in vramfit's table; pass --model$",
     "construtor $1: sem id Hugging Face na tabela do vramfit; indica --model"),
    (r"^DoRA magnitude vectors: ", "vetores de magnitude do DoRA: "),
    (r"^the container dtype of the packed 4-bit weights: the same bytes$",
     "o dtype contentor dos pesos de 4 bits empacotados: os mesmos bytes"),
    (r"^use_peft is off: no adapter$", "use_peft está desligado: sem adaptador"),
    (r"^deprecated alias: (\w+) is set \(transformers ([\d.]+)\)$", "alias obsoleto: $1 está definido (transformers $2)"),
    (r"^checkpointing only every n-th layer \(the estimate checkpoints each\)$",
     "checkpointing só a cada n camadas (a estimativa faz checkpointing de todas)"),
    (r"^max_length is null: TRL truncates nothing, the data's longest sample sets the length; pass --seq-len, or "
     r"--dataset FILE --max-length none to read it$",
     "max_length é null: o TRL não trunca nada, a amostra mais longa dos dados define o comprimento; indica --seq-len, "
     "ou --dataset FILE --max-length none para o ler"),
    (r"^max_seq_length is null: TRL <= ([\d.]+) trains at (\d+) tokens, ([\d.-]+) truncate nothing \(the data's "
     r"longest sample\); pass --seq-len$",
     "max_seq_length é null: o TRL <= $1 treina com $2 tokens, as versões $3 não truncam nada (a amostra mais longa "
     "dos dados); indica --seq-len"),
    (r"^null with packing: TRL <= ([\d.]+)'s (.+)$", "null com packing: o $2 do TRL <= $1"),
    (r"^null: (\d+) on TRL <= ([\d.]+), no truncation on ([\d.-]+)$", "null: $1 no TRL <= $2, sem truncagem nas versões $3"),
    (r"^vramfit's default: unset, litgpt trains to the longest sample$",
     "predefinição do vramfit: não definido, o litgpt treina até à amostra mais longa"),
    (r"^vramfit's default: unset, torchtune pads each batch to its longest sample$",
     "predefinição do vramfit: não definido, o torchtune preenche cada lote até à sua amostra mais longa"),
    # ---- the explanation after a citation (project@commit path, or project version path)
    (r" \(setup defaults\)", " (predefinições de setup)"),
    (r": get_default_supported_precision\(training=True\) on bf16 cards$",
     ": get_default_supported_precision(training=True) nas placas com bf16"),
    (r": (\w+) defaults to (\w+)$", ": $1 é $2 por predefinição"),
    (r": NGPU defaults to (\d+) \(set NGPU / pass --num-gpus\)$", ": NGPU é $1 por predefinição (define NGPU ou indica "
     "--num-gpus)"),
    (r": use_vllm without vllm_mode = server$", ": use_vllm sem vllm_mode = server"),
    (r": no adapter = full fine-tuning$", ": sem adapter = ajuste fino completo"),
    (r": True unless fp16$", ": True exceto com fp16"),
    (r"\btransformers picks SDPA when unset$", "o transformers escolhe SDPA quando não está definido"),
    (r": None reads config\.json, where transformers picks SDPA$", ": None lê o config.json, onde o transformers escolhe SDPA"),
    (r": None reads config\.json's torch_dtype", ": None lê o torch_dtype do config.json"),
    (r" \(model not in vramfit's catalog: (\w+) assumed\)$", " (modelo fora do catálogo do vramfit: assume-se $1)"),
    (r": from torch_dtype (\w+)$", ": a partir de torch_dtype $1"),
    (r": None is the model's max_model_len \(config\.json max_position_embeddings\)$",
     ": None é o max_model_len do modelo (max_position_embeddings do config.json)"),
    (r": (\d+) for GRPO$", ": $1 para GRPO"),
    (r": follows (\w+)( \('\w+'\))?$", ": segue $1$2"),
    (r": no NPROC_PER_NODE, no torchrun: one process$", ": sem NPROC_PER_NODE, sem torchrun: um só processo"),
    (r": no NNODES, one node$", ": sem NNODES, um só nó"),
    (r"; the label positions of one row: give label_share, the data set's share of label tokens \(1: every token\)$",
     "; as posições de rótulo de uma linha: indica label_share, a fração de tokens de rótulo do conjunto de dados "
     "(1: todos os tokens)"),
    (r"/ world size\)\)$", "/ número de processos))"),
    (r": the HF Trainer's \(transformers < 5\)$", ": a do HF Trainer (transformers < 5)"),
    (r": every second block$", ": um bloco em cada dois"),
    # ---- phrases several notes share
    (r"^not in the file: the GPU count is set at launch; pass --num-gpus$",
     "não está no ficheiro: o número de GPUs define-se no lançamento; indica --num-gpus"),
    (r"^not in the file: (\w+) \(TRL ([\d.]+)\) has no prompt limit, the data's prompts set it; pass --seq-len "
     r"\(prompt \+ completion\)$",
     "não está no ficheiro: o $1 (TRL $2) não tem limite de prompt, são os prompts dos dados que o definem; indica "
     "--seq-len (prompt + completação)"),
    (r"^DeepSpeed default: none$", "predefinição do DeepSpeed: nenhum"),
    (r"^DeepSpeed default: ", "predefinição do DeepSpeed: "),
    (r"^([^\s:]+): the default$", "$1: a predefinição"),
    (r"^read with the FSDP keys", "lido com as chaves FSDP"),
    (r" \(no FSDP: no effect\)$", " (sem FSDP: sem efeito)"),
    (r"^read with the builder$", "lido com o construtor do modelo"),
    (r"^read with quant_method (\w+) and quant_bits (\d+)$", "lido com quant_method $1 e quant_bits $2"),
    (r"^read with (\S+)$", "lido com $1"),
    (r"/regex or parameter targets: ", "/alvos por regex ou por parâmetro: "),
    (r"/parameter targets: ", "/alvos por parâmetro: "),
    (r"/additional trained modules: ", "/módulos treinados adicionais: "),
    (r": counted as plain LoRA$", ": contam como LoRA simples"),
    (r"^no quantized base: no effect$", "sem base quantizada: sem efeito"),
    (r"^pinned host memory: no GPU memory effect$", "memória fixada do host: sem efeito na memória da GPU"),
    (r"^compute dtype: ", "dtype de cálculo: "),
    *[(rf"^{en}: no memory effect$", f"{pt}: sem efeito na memória") for en, pt in (
        ("schedule", "calendário do treino"), ("matmul precision", "precisão das multiplicações de matrizes"),
        ("learning-rate ratio", "razão da taxa de aprendizagem"), ("loss weighting", "ponderação da perda"),
        ("learning-rate schedule", "calendário da taxa de aprendizagem"),
        ("which tokens carry loss", "que tokens contam para a perda"))],
    (r"^no memory effect$", "sem efeito na memória"),
    (r"^LinearCrossEntropyLoss keeps each token chunk's logits for backward, as CEWithChunkedOutputLoss does: read as "
     r"the chunked loss; it masks ignored tokens before the projection, which seq_len does not count$",
     "a LinearCrossEntropyLoss guarda os logits de cada bloco de tokens para o backward, como a "
     "CEWithChunkedOutputLoss: lida como a perda por blocos; mascara os tokens ignorados antes da projeção, o que o "
     "seq_len não conta"),
    (r" \(an upper bound\)$", " (um limite superior)"),
    (r"^a key only the distributed recipes read: the run shards with FSDP$",
     "uma chave que só as receitas distribuídas leem: a execução reparte com FSDP"),
    # ---- a pre-quantized checkpoint by its name (config_import/hf_common.py checkpoint_quantization)
    (r"^a GPTQ checkpoint by its name: (\S+) loads the checkpoint's own quantization_config, so LoRA trains on its "
     r"4-bit weights \(quantize gptq-int4\)$",
     "um checkpoint GPTQ pelo nome: o $1 carrega a quantization_config do próprio checkpoint, pelo que o LoRA treina "
     "sobre os pesos de 4 bits (quantize gptq-int4)"),
    (r"(\S+): ('[^']*') is (?:an|a) (AWQ|8-bit GPTQ|GPTQ) checkpoint \(its name\), whose LoRA training path is not "
     r"modelled yet \(valid: a 4-bit GPTQ or a 16-bit checkpoint, or on-the-fly bitsandbytes quantization\)$",
     "$1: $2 é um checkpoint $3 (pelo nome), cujo treino LoRA ainda não é modelado (válidos: um checkpoint GPTQ de "
     "4 bits ou de 16 bits, ou quantização bitsandbytes na hora)"),
    (r"(\S+): ('[^']*') is (?:an|a) (AWQ|8-bit GPTQ|GPTQ) checkpoint \(its name\): quantized weights cannot be fully "
     r"fine-tuned \(valid: LoRA on it, or full fine-tuning of the 16-bit model\)$",
     "$1: $2 é um checkpoint $3 (pelo nome): pesos quantizados não podem ser afinados por completo (válidos: LoRA "
     "sobre ele, ou afinação completa do modelo de 16 bits)"),
    *RLHF_RULES,  # web/translate_rlhf.py
    # ---- the labels
    *[(_whole(en), pt) for en, pt in LABELS.items()],
]
