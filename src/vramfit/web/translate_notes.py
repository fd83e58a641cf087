"""Portuguese for the catalog's notes on its entries (``notes`` in data/models.json, shown as assumptions) and for
sentences of the planner and the scenario check that reach the page: part of
:data:`vramfit.web.translate.RULES` (split off to keep each file short; same rule style)."""

from __future__ import annotations

from vramfit.web.translate_estimate import _N  # a number as the library prints it (1,234.5)

NOTE_RULES: list[tuple[str, str]] = [
    (r"^DeepSpeed reads the ratio at ZeRO stage 3 only; at stage (\d) the whole optimizer state is offloaded$",
     "o DeepSpeed só lê o ratio no ZeRO estágio 3; no estágio $1 todo o estado do otimizador é descarregado"),
    (r"^optimizer_impl=(\w+) is ignored: it picks torch's AdamW implementation, and this run's optimizer is (\S+)\.$",
     "optimizer_impl=$1 é ignorado: escolhe a implementação do AdamW do torch, e o otimizador desta execução é $2."),
    (r"^counted as the fused step \(no model-sized temporaries\), its fp32 states$",
     "contado como o passo fundido (sem temporários do tamanho do modelo), com os estados em fp32"),
    (r"^counted as the fused step \(no model-sized temporaries\)$",
     "contado como o passo fundido (sem temporários do tamanho do modelo)"),
    (r"^max_gpus (\d+): plans take 1, 2, 4 or (\d+) GPUs, then whole nodes of (\d+) \(2, 4, 8 \.\.\. nodes\), so at most "
     r"(\d+) here\.$",
     "max_gpus $1: os planos usam 1, 2, 4 ou $2 GPUs e depois nós inteiros de $3 (2, 4, 8 ... nós), por isso aqui no "
     "máximo $4."),
    # ---- a framework_version release with nothing on the run's path (vramfit.estimate._version_note)
    (r"^framework_version (.+): what this release does differently is not on this run's path \(the figures are the "
     r"same without it\)\.$",
     "framework_version $1: o que esta versão faz de diferente não está no caminho desta execução (os valores são os "
     "mesmos sem ela)."),
    (r"^framework_version (.+): what these releases do differently is not on this run's path \(the figures are the "
     r"same without it\)\.$",
     "framework_version $1: o que estas versões fazem de diferente não está no caminho desta execução (os valores são "
     "os mesmos sem elas)."),
    # ---- the error band's length-bound cases (vramfit.estimate.accuracy)
    (r"^(\d+) published measurement\(s\) on this path \(([^)]*)\), each at an upper-bound sequence length \(padded "
     r"to it, the real lengths unknown\): our figure at that length is ([+-]?)([\d.]+) % to ([+-]?)([\d.]+) % off, "
     r"median \|error\| ([\d.]+) %$",
     "$1 medição(ões) publicada(s) neste caminho ($2), todas num comprimento de sequência que é só um limite superior "
     "(preenchidas até ele, os comprimentos reais desconhecidos): o nosso valor nesse comprimento desvia-se de "
     "$3⟨$4⟩ % a $5⟨$6⟩ %, mediana do |erro| ⟨$7⟩ %"),
    (r"; (\d+) of them, at an upper-bound sequence length \(padded to it, the real lengths unknown\), are left out of "
     r"the band$",
     "; $1 delas, num comprimento de sequência que é só um limite superior (preenchidas até ele, os comprimentos reais "
     "desconhecidos), ficam fora do intervalo"),
    (r"; each at an upper-bound sequence length \(padded to it, the real lengths unknown\)$",
     "; todas num comprimento de sequência que é só um limite superior (preenchidas até ele, os comprimentos reais "
     "desconhecidos)"),
    # ---- config import: a DeepSpeed value against the training config's (config_import/hf_common.py)
    (r"(\S+ → \S+): (.+) contradicts the training config's (\w+) \(([^)]*)\); the HF Trainer refuses the mismatch "
     r"\(trainer_config_finalize\): set it to \"auto\" or to (.+)$",
     "$1: $2 contradiz o valor de $3 da configuração de treino ($4); o Trainer do HF recusa a discordância "
     "(trainer_config_finalize): põe-no a \"auto\" ou a $5"),
    (r"zero_optimization\.(\w+) must be a mapping such as \{\"device\": \"cpu\"\}, got (.+)$",
     "zero_optimization.$1 tem de ser um mapeamento como {\"device\": \"cpu\"}, e é $2"),
    (r"zero_optimization\.offload_optimizer\.ratio must be a number from 0 to 1, got (.+)$",
     "zero_optimization.offload_optimizer.ratio tem de ser um número de 0 a 1, e é $1"),
    (r"^partial optimizer offload \(ratio ([\d.]+): the rest of the optimizer state stays on the GPU\): counted as no "
     r"optimizer offload \(an upper bound\)$",
     "descarga parcial do otimizador (ratio $1: o resto do estado do otimizador fica na GPU): contada como sem descarga "
     "do otimizador (um limite superior)"),
    # ---- the catalog's notes (vramfit.models, data/models.json)
    (r"^Mistral released the v0\.2 base model outside the Hub; this is the community conversion, architecture "
     r"identical to (\S+)\.$",
     "A Mistral publicou o modelo base v0.2 fora do Hub; esta é a conversão da comunidade, com a arquitetura do $1."),
    (r"^(\S+) has a (\d+)-token vocabulary \((v\d+) tokenizer\) and so ([\d.]+)M more parameters; it resolves here "
     r"by suffix with a note\.$",
     "$1 tem um vocabulário de $2 tokens (tokenizador $3) e por isso mais ⟨$4⟩ M parâmetros; aqui chega-se a esta "
     "entrada pelo sufixo, com esta nota."),
    (r"^Published config\.json is the multimodal (\S+) \(model_type (\w+)\); this entry is its text_config completed "
     r"with the (\S+) defaults it relies on \(([^)]*)\)\. Fine-tuning the text part only; the (\d+)M-parameter SigLIP "
     r"vision tower and projector are not counted\.$",
     "O config.json publicado é o $1 multimodal (model_type $2); esta entrada é o seu text_config, completado com as "
     "predefinições do $3 de que depende ($4). Só se treina a parte de texto; a torre de visão SigLIP de $5 M "
     "parâmetros e o projetor não contam."),
    (r"^(\S+)'s own config\.json is gated; the config above is its copy in (\S+) \(_name_or_path \S+, transformers "
     r"([\d.]+), saved in (\w+)\)\. The ([\d,]+) LoRA r=(\d+) parameters that Unsloth's (\S+) notebook prints for the "
     r"seven projections of this model confirm its (.+?) layout \((.+)\)\.$",
     "O config.json do próprio $1 tem acesso restrito; o config acima é a sua cópia em $2 (transformers $3, gravado "
     "em $4). Os ⟨$5⟩ parâmetros de LoRA r=$6 que o notebook $7 do Unsloth imprime para as sete projeções deste "
     "modelo confirmam a sua disposição $8 ($9)."),
    (r"^The (\w+) variant differs only in its rope_scaling \((\w+)\) settings\.$",
     "A variante $1 só difere nas definições de rope_scaling ($2)."),
    (r"^config\.json values: (\S+)'s with the (\S+) text model as transformers' (\S+) writes it from Meta's params "
     r"\((\d+) self-attention \+ (\d+) cross-attention layers: ([^)]*)\) and the same vision tower \(the script's "
     r"constants; torchtune (\S+) builds the same\)\. Meta's model card gives ([\d.]+)B\.$",
     "valores do config.json: os do $1 com o modelo de texto $2, como o $3 do transformers os escreve a partir dos "
     "parâmetros da Meta ($4 camadas de self-attention + $5 de cross-attention: $6), e a mesma torre de visão (as "
     "constantes do script; o $7 do torchtune constrói o mesmo). O model card da Meta indica ⟨$8⟩B."),
    (r"^config\.json values: the InternVL3 -hf layout of (\S+) \(transformers' (\w+)\), the vision tower (\S+) "
     r"\(hidden (\d+), intermediate (\d+), (\d+) layers, (\d+) heads, RMSNorm, q/k norm, no qkv bias; OpenGVLab's "
     r"(\w+) config\), ",
     "valores do config.json: o formato -hf do InternVL3 de $1 ($2 do transformers), a torre de visão $3 (hidden $4, "
     "intermediate $5, $6 camadas, $7 cabeças, RMSNorm, norma q/k, sem bias em qkv; config $8 da OpenGVLab), "),
    (r"the language model (\S+) \(catalog entry (\S+)\) with InternVL3's (\d+)-token vocabulary, as the InternVL3 "
     r"model card pairs them\.$",
     "o modelo de linguagem $1 (a entrada $2 do catálogo) com o vocabulário de $3 tokens do InternVL3, como o model "
     "card do InternVL3 os junta."),
    # ---- the planner's changes and exported notes (vramfit.plan.changes, vramfit.plan.export_trl)
    (r"^transformers 5 \+ bitsandbytes cannot \(fused 3-D experts\): use transformers 4, torchtune or litgpt$",
     "o transformers 5 com o bitsandbytes não consegue (experts 3-D fundidos): usa o transformers 4, o torchtune ou "
     "o litgpt"),
    (r"^TRL's SFT, DPO, KTO and GRPO trainers neither call prepare_model_for_kbit_training nor keep fp32 adapters "
     r"\(trl 1\.16\.0 trainer/sft_trainer\.py l\. 902-911\): this run needs less than the plan, sized for a prepared "
     r"model \(estimate again with framework_version trl-1\.16\)$",
     "os trainers SFT, DPO, KTO e GRPO do TRL não chamam prepare_model_for_kbit_training nem mantêm adaptadores em fp32 "
     "(trl 1.16.0 trainer/sft_trainer.py l. 902-911): esta execução precisa de menos do que o plano, dimensionado para "
     "um modelo preparado (estima de novo com framework_version trl-1.16)"),
    (r"^use_liger_kernel needs `pip install liger-kernel` \(the fused cross-entropy the plan assumes\)$",
     "use_liger_kernel precisa de `pip install liger-kernel` (a entropia cruzada fundida que o plano assume)"),
    # ---- config import (vramfit.config_import.swift_shell)
    (r"holds no 'swift sft', 'swift rlhf' or 'swift pt' command \(command lines are read for ms-swift only; for TRL, "
     r"Axolotl, LLaMA-Factory or torchtune give the YAML or JSON config\)$",
     "não tem nenhum comando 'swift sft', 'swift rlhf' ou 'swift pt' (só se leem linhas de comando do ms-swift; para "
     "TRL, Axolotl, LLaMA-Factory ou torchtune, indica a configuração YAML ou JSON)"),
    (r"^DeepSpeed reads parameter offload at ZeRO stage 3 only; at stage (\d) the parameters stay on the GPU$",
     "o DeepSpeed só lê a descarga de parâmetros no ZeRO stage 3; no stage $1 os parâmetros ficam na GPU"),
    (r"^litgpt floors it: (\d+) // (\d+) device\(s\) // (\d+) = (\d+) micro-batch\(es\) per step, (\d+) samples$",
     "o litgpt arredonda por defeito: $1 // $2 dispositivo(s) // $3 = $4 micro-lote(s) por passo, $5 amostras"),
    (r"train\.global_batch_size (\d+) leaves no micro-batch of (\d+) on each of (\d+) device\(s\) \(litgpt asserts "
     r"global_batch_size // devices // micro_batch_size > 0\)$",
     "train.global_batch_size $1 não deixa nenhum micro-lote de $2 em cada um dos $3 dispositivo(s) (o litgpt exige "
     "global_batch_size // devices // micro_batch_size > 0)"),
    (r"lora_target_modules: PEFT has no default target modules for model type '(\w+)' \(it raises 'Please specify "
     r"`target_modules` or `target_parameters`'\); give lora_target_modules, e\.g\. all-linear$",
     "lora_target_modules: o PEFT não tem módulos-alvo predefinidos para o tipo de modelo '$1' (lança 'Please specify "
     "`target_modules` or `target_parameters`'); indica lora_target_modules, p. ex. all-linear"),
    (r" \(llama's; give lora_target_modules for another architecture\)$",
     " (os do llama; indica lora_target_modules para outra arquitetura)"),
    # ---- the web API (vramfit.web.planning, vramfit.web.app)
    (r"^gpu_id: no plan on (\S+) fits \(up to max_gpus of them\)$",
     "gpu_id: nenhum plano em $1 cabe (até max_gpus delas)"),
    (r"^body: unknown multipart field '(.*)'", "body: campo multipart desconhecido '$1'"),
    (r"^body: the body must be sent as Content-Type: application/json, got '(.*)'",
     "body: o corpo tem de ser enviado com Content-Type: application/json (recebido: '$1')"),
    # ---- a pasted config.json (vramfit.models.hf_config_cfg, vramfit.models.vlm_fields)
    (r"config\.json field '(\w+)' must be an integer >= (\d+), got (.+)$",
     "o campo '$1' do config.json tem de ser um número inteiro >= $2 (recebido: $3)"),
    (r"config\.json field '(\w+)' must be an integer from (\d+) to ([\d,]+), got (.+)$",
     "o campo '$1' do config.json tem de ser um número inteiro entre $2 e ⟨$3⟩ (recebido: $4)"),
    (r"config\.json field '(\w+)' must be a list of at most ([\d,]+) \[height, width\] pairs of integers from 1 to "
     r"([\d,]+), got (.+)$",
     "o campo '$1' do config.json tem de ser uma lista de no máximo ⟨$2⟩ pares [altura, largura] de números inteiros "
     "entre 1 e ⟨$3⟩ (recebido: $4)"),
    (r"config\.json field 'downsample_ratio' must be a number above 0 and at most 1, got (.+)$",
     "o campo 'downsample_ratio' do config.json tem de ser um número acima de 0 e no máximo 1 (recebido: $1)"),
    (r"one image comes to", "uma imagem chega a"), (r"one video comes to", "um vídeo chega a"),
    (r"(chega a) ([\d,]+) tokens by its config\.json fields, more than a sequence may hold \(([\d,]+)\); check the "
     r"vision fields$",
     "$1 ⟨$2⟩ tokens pelos campos do seu config.json, mais do que uma sequência pode ter (⟨$3⟩); verifica os campos "
     "de visão"),
    # ---- the scenario check (vramfit.scenario: method and quantize)
    (r"^quantize: full fine-tuning trains every weight, so the base cannot be quantized",
     "quantize: o ajuste fino completo treina todos os pesos, por isso a base não pode ser quantizada"),
    (r"^quantize: lora trains adapters on a 16-bit base; adapters on a (\S+) base are method qlora",
     "quantize: o lora treina adaptadores sobre uma base de 16 bits; adaptadores sobre uma base $1 são o método qlora"),
    # ---- notes of the exported configs (vramfit.plan.export, vramfit.plan.export_trl)
    (r"^mixed_precision no: the plan trains (\S+) weights as loaded; with bf16/fp16 on, accelerate keeps the trained "
     r"weights in fp32 under FSDP \(16 B per parameter, not 8\)$",
     "mixed_precision no: o plano treina os pesos $1 como são carregados; com bf16/fp16 ligado, o accelerate guarda os "
     "pesos treinados em fp32 com FSDP (16 B por parâmetro, não 8)"),
    (r"^accelerate under FSDP with mixed precision on keeps the trained weights in fp32 \(([^)]*)\), so full "
     r"fine-tuning reads as (\S+)$",
     "com FSDP e precisão mista ligada, o accelerate guarda os pesos treinados em fp32 ($1); por isso o ajuste fino "
     "completo lê-se como $2"),
    (r"^quantize (\S+) is not a bitsandbytes type: nf4 with double quantization written instead$",
     "quantize $1 não é um tipo do bitsandbytes: escreve-se nf4 com quantização dupla"),
    (r"^the HF Trainer has no optimizer-in-backward: gradients stay resident until the step \(more memory\)$",
     "o HF Trainer não tem otimizador no backward: os gradientes ficam residentes até ao passo (mais memória)"),
    (r"^(\w+) needs `pip install torchao`$", "$1 precisa de `pip install torchao`"),
    (r"^(\S+): replace node1\.\.\. with your hosts \(passwordless ssh between them\)$",
     "$1: substitui node1... pelas tuas máquinas (ssh sem palavra-passe entre elas)"),
    (r"^Optimizer offload under ZeRO steps with DeepSpeed's CPU Adam: accelerate replaces the Trainer's (\S+) with it "
     r"\(map_pytorch_optim_to_deepspeed\), so the host keeps fp32 Adam states\.$",
     "A descarga do otimizador com ZeRO faz o passo com o CPU Adam do DeepSpeed: o accelerate substitui por ele o $1 "
     "do Trainer (map_pytorch_optim_to_deepspeed), por isso o host guarda estados Adam em fp32."),
    # ---- the scenario check (vramfit.layout_keys)
    (r"^num_gpus: must be a multiple of tensor_parallel × pipeline_parallel × context_parallel \(([^)]*)\); "
     r"got (\d+)",
     "num_gpus: tem de ser um múltiplo de tensor_parallel × pipeline_parallel × context_parallel ($1); recebido: $2"),
    # ---- bounded input (vramfit.safe_input, web.service.parse_json_text)
    (r"^(\w+): the pasted config (?=holds|is nested|gives the key)", "$1: a configuração colada "),
    (r"^(\w+): the scenario field (?=holds|is nested|gives the key)", "$1: o campo scenario "),
    (r"holds a number too large to read \(over 4,300 digits\)$",
     "tem um número demasiado grande para ler (mais de 4300 algarismos)"),
    (r"is nested too deeply \(more than (\d+) levels: MAX_CONFIG_DEPTH\)$",
     "tem demasiados níveis de aninhamento (mais de $1: MAX_CONFIG_DEPTH)"),
    (r"is nested too deeply$", "tem demasiados níveis de aninhamento"),
    (r"gives the key (.+) twice$", "dá a chave $1 duas vezes"),
    (r"^(\w+): must be an integer from (\d+) to (\d+) written with the digits 0-9, got (.+)$",
     "$1: tem de ser um número inteiro entre $2 e $3, escrito com os algarismos 0-9 (recebido: $4)"),
    (r"^(\w+): must be a number written with the digits 0-9, got (.+)$",
     "$1: tem de ser um número escrito com os algarismos 0-9 (recebido: $2)"),
    (r"^(\w+): must be a positive number written with the digits 0-9, got (.+)$",
     "$1: tem de ser um número positivo escrito com os algarismos 0-9 (recebido: $2)"),
    (r"^(\w+): is given twice, as (.+?) and (.+?); give it once$", "$1: está indicado duas vezes, como $2 e $3; indica-o só uma"),
    (r"^method: (\w+) does not train (\w+) \(no 4-bit base\)", "method: o $1 não treina $2 (sem base de 4 bits)"),
    # ---- what a framework's recipes cannot run (vramfit.estimate.framework check_runs, check_ddp_layout)
    (r"^optimizer: (\w+) runs no bitsandbytes optimizer \(([\w-]+) is one\)",
     "optimizer: o $1 não corre nenhum otimizador do bitsandbytes (o $2 é um deles)"),
    (r"^loss: (\w+) does not call a fused linear \+ cross-entropy loss",
     "loss: o $1 não chama uma perda fundida (camada linear + entropia cruzada)"),
    (r"^loss: (\w+) has no chunked-loss switch \(its own loss is what loss: standard runs\)",
     "loss: o $1 não tem opção de perda por blocos (a sua própria perda é a que loss: standard corre)"),
    (r"^compile: (\w+)'s training code has no torch\.compile switch that is modelled \(profile runs_compile\)",
     "compile: o código de treino do $1 não tem uma opção torch.compile modelada (perfil runs_compile)"),
    (r"^offload: (\w+) does not offload model state to the host \(its FSDP is built with CPU offload off\)",
     "offload: o $1 não descarrega o estado do modelo para o host (o seu FSDP é construído sem descarga para o CPU)"),
    (r"^stage: (\w+) has no trainer for (\w+)", "stage: o $1 não tem treinador para $2"),
    (r"^seq_len: (\w+)'s chunked loss splits the sequence into (\d+) equal chunks and raises otherwise: seq_len must "
     r"be a multiple of (\d+), got (\d+)",
     "seq_len: a perda por blocos do $1 divide a sequência em $2 blocos iguais e falha de outro modo: seq_len tem de ser "
     "múltiplo de $3 (recebido: $4)"),
    (r"^seq_len: (\w+)'s chunked loss splits the sequence on each context-parallel rank \((\d+) / (\d+) tokens\) "
     r"into (\d+) equal chunks and raises otherwise: seq_len must be a multiple of (\d+), got (\d+)",
     "seq_len: a perda por blocos do $1 divide a sequência de cada rank de paralelismo de contexto ($2 / $3 tokens) em "
     "$4 blocos iguais e falha de outro modo: seq_len tem de ser múltiplo de $5 (recebido: $6)"),
    # ---- DoRA (vramfit.estimate.framework._check_dora, vramfit.estimate.dora)
    (r"^dora: is a LoRA variant: full fine-tuning has no adapters to decompose",
     "dora: é uma variante do LoRA: o ajuste fino completo não tem adaptadores a decompor"),
    (r"^dora: (\w+)((?: \([\w.+-]+\))?) runs no DoRA that is modelled \(PEFT's, framework hf, and torchtune's from "
     r"v0\.3\.0 are\)",
     "dora: o $1$2 não corre nenhum DoRA modelado (o do PEFT, framework hf, e o do torchtune desde a v0.3.0 são-no)"),
    (r"^dora: DoRA on the embedding or output layer \((\w+)\) is not modelled; adapt the decoder blocks' linears "
     r"only, or set dora false",
     "dora: o DoRA na camada de embedding ou de saída ($1) não é modelado; adapte só as camadas lineares dos blocos do "
     "decoder, ou ponha dora a false"),
    (r"^dora: PEFT refuses DoRA on fused experts \((\w+), which all-linear adapts\): name the attention projections in "
     r"lora_targets, or set dora false",
     "dora: o PEFT recusa o DoRA em especialistas fundidos ($1, que o all-linear adapta): indique as projeções de "
     "atenção em lora_targets, ou ponha dora a false"),
    (r"^dora: DoRA on a vision tower \((\w+)\) is not modelled: set freeze_vision yes \(the tower frozen\), or dora "
     r"false",
     "dora: o DoRA numa torre de visão ($1) não é modelado: ponha freeze_vision a yes (a torre congelada), ou dora a "
     "false"),
    (r"^DoRA \(use_dora\): a magnitude vector per adapted linear; each keeps its LoRA output and the base "
     r"layer's output \(reused: torchtune, or PEFT >= 0\.14 at dropout 0\) for backward \(" + _N + r" MiB per block per "
     r"micro-batch\); its forward takes up to " + _N + r" MiB more \(B·A and the weight for its "
     r"norm, the output's products\)\.$",
     "DoRA (use_dora): um vetor de magnitudes por camada linear adaptada; cada uma guarda a sua saída LoRA e a "
     "saída da camada base (reutilizada: torchtune, ou PEFT >= 0.14 com dropout 0) para o backward (⟨$1⟩ MiB por bloco por "
     "micro-batch); o seu forward ocupa até ⟨$2⟩ MiB a mais (B·A e o peso para a sua norma, os produtos da "
     "saída)."),
    (r"^DoRA \(use_dora\): a magnitude vector per adapted linear; each keeps its LoRA output and a recomputed "
     r"base output with the weight its matmul ran on \(PEFT: dropout > 0 or before 0\.14\) for backward \(" + _N
     + r" MiB per block per micro-batch\); its forward takes up to " + _N + r" MiB more \(B·A and the weight for its "
     r"norm, the output's products\)\.$",
     "DoRA (use_dora): um vetor de magnitudes por camada linear adaptada; cada uma guarda a sua saída LoRA e "
     "uma saída base recalculada com o peso em que a sua multiplicação correu (PEFT: dropout > 0 ou antes da 0.14) para o "
     "backward (⟨$1⟩ MiB por bloco por micro-batch); o seu forward ocupa até ⟨$2⟩ MiB a mais (B·A e o peso para "
     "a sua norma, os produtos da saída)."),
    # ---- modules_to_save (vramfit.scenario._as_saved_modules, vramfit.estimate.saved_modules)
    (r"^modules_to_save: (.+) is not a module trained as a whole copy here",
     "modules_to_save: $1 não é um módulo treinado como cópia inteira aqui"),
    (r"^modules_to_save: must be a list of module names, got (.+?)( \(valid values|$)",
     "modules_to_save: tem de ser uma lista de nomes de módulos (recebido: $1)$2"),
    (r"^modules_to_save: full fine-tuning already trains every module; it copies none",
     "modules_to_save: o ajuste fino completo já treina todos os módulos; não copia nenhum"),
    (r"^modules_to_save: (\w+)((?: \([\w.+-]+\))?) trains no modelled copies of whole modules \(PEFT's "
     r"modules_to_save under framework hf, and Unsloth's from its 2024\.11 release, are modelled\)",
     "modules_to_save: o $1$2 não treina cópias modeladas de módulos inteiros (o modules_to_save do PEFT, framework hf, "
     "e o do Unsloth a partir da versão 2024.11 são modelados)"),
    (r"^lora_targets: (\w+) trains embed_tokens named in its target modules as a whole copy \(modules_to_save\), not "
     r"as a LoRA layer: move embed_tokens to modules_to_save",
     "lora_targets: o $1 treina o embed_tokens indicado nos módulos-alvo como cópia inteira (modules_to_save), não como "
     "camada LoRA: passe o embed_tokens para modules_to_save"),
    (r"^modules_to_save: ([\w, ]+) is also in lora_targets; PEFT wraps a module as a LoRA layer or as a trained copy, "
     r"not both \(ModulesToSaveWrapper raises a TypeError for a LoRA layer\): remove it from one of them",
     "modules_to_save: $1 também está em lora_targets; o PEFT envolve um módulo como camada LoRA ou como cópia treinada, "
     "não as duas coisas (o ModulesToSaveWrapper levanta um TypeError para uma camada LoRA): retire-o de uma delas"),
    (r"^modules_to_save: is modelled on one GPU and under DDP; where ([\w-]+) places the copies' gradients and states "
     r"is not modelled",
     "modules_to_save: é modelado numa GPU e sob DDP; onde o $1 coloca os gradientes e estados das cópias não é "
     "modelado"),
    *[(rf"^modules_to_save: whole trained copies of ([\w, ]+) in {dt} \({why}\), each with its gradient and "
       rf"optimizer state; {where}\.$",
       f"modules_to_save: cópias inteiras treinadas de $1 em {dt_pt} ({why_pt}), cada uma com o seu gradiente e estado "
       f"do otimizador; {where_pt}.")
      for dt, dt_pt in (("16-bit", "16 bits"), ("fp32", "fp32"))
      for why, why_pt in (("the original's dtype", "o dtype do original"),
                          ("the load's dtype, fp32 for an fp16 load", "o dtype do carregamento, fp32 num carregamento em fp16"))
      for where, where_pt in (("the originals stay frozen on the GPU", "os originais ficam congelados na GPU"),
                              (r"the frozen originals moved to disk before the copy, off the GPU: ([\w=, ]+)",
                               "os originais congelados vão para o disco antes da cópia, fora da GPU: $2"))],
    (r"^precision: (\w+)'s scripts refuse ([\w-]+) with a bitsandbytes-quantized base: a -true precision runs it",
     "precision: os scripts do $1 recusam $2 com uma base quantizada pelo bitsandbytes: uma precisão -true corre-a"),
    (r"^optimizer_in_backward: steps each parameter during backward, so no gradient is left to accumulate over "
     r"(\d+) micro-batches; set grad_accum to 1",
     "optimizer_in_backward: atualiza cada parâmetro durante o backward, por isso não sobra gradiente para acumular "
     "em $1 micro-batches; põe grad_accum a 1"),
    # ---- images under a framework that trains none of this model's (vision_inputs.check_image_framework)
    (r"^(images|frames)_per_sample: (\w+) \(([\w.@-]+)\) trains only ([\w, ]+) checkpoints, no images of "
     r"model_type '(\w+)'; frameworks that do: ([\w, ]+)",
     "$1_per_sample: o $2 ($3) só treina checkpoints $4, não imagens de model_type '$5'; frameworks que o fazem: $6"),
    (r"^(images|frames)_per_sample: (\w+) \(([\w.@-]+)\) trains no vision-language model, no images of "
     r"model_type '(\w+)'; frameworks that do: ([\w, ]+)",
     "$1_per_sample: o $2 ($3) não treina nenhum modelo de visão e linguagem (imagens de model_type '$4'); "
     "frameworks que o fazem: $5"),
    (r"^method: (\w+) has no (\w+) recipe that trains (\w+) \(its \w+ recipes: ([\w, ]+)\)",
     "method: o $1 não tem receita de $2 que treine $3 (as suas receitas de $2: $4)"),
    (r"^num_gpus: (\w+)'s (\w+) recipes run on one GPU only \(([\w, ]+)\)",
     "num_gpus: as receitas de $2 do $1 correm numa só GPU ($3)"),
    (r"^reference: (\w+)'s (\w+) recipes run the reference forward every step, none precomputes it \(([\w, ]+)\)",
     "reference: as receitas de $2 do $1 correm o forward de referência em cada passo, nenhuma o pré-calcula ($3)"),
    (r"^parallelism: (\w+) runs no DDP beside tensor, pipeline or context parallelism \(it shards the remaining ranks "
     r"with FSDP\)", "parallelism: o $1 não corre DDP a par de paralelismo de tensor, pipeline ou contexto (reparte os "
     "ranks restantes com FSDP)"),
    (r"; DDP over the remaining (\d+) ranks \(dp_replicate\)\. ", "; DDP sobre os $1 ranks restantes (dp_replicate). "),
    (r"^params: a generic decoder of ([\d,]+) parameters rounds up to more than ([\d,]+) \(MAX_PARAMS\); give a smaller "
     r"count$", "params: um decoder genérico de ⟨$1⟩ parâmetros arredonda para mais de ⟨$2⟩ (MAX_PARAMS); indica um número "
     "menor"),
    # ---- the planner's host RAM cap (vramfit.plan.rental not_found) and the guide's pure-bf16 reading (plan/guide.py)
    (r"^fits (\d+) x (\S+) or more only with offloaded state, needing " + _N + r" GB of host RAM per GPU at (\d+), over "
     r"the (\d+) GB per GPU plans assume \(a DGX H100: 2 TB for 8 GPUs\)",
     "cabe em $1 × $2 ou mais só com estado descarregado, que precisa de ⟨$3⟩ GB de RAM do host por GPU com $4, acima "
     "dos $5 GB por GPU que os planos supõem (um DGX H100: 2 TB para 8 GPUs)"),
    (r"^In pure bf16 \(bf16-true, 8 B per parameter(, FSDP)?\) (\d+) x (\d+) GB fits: " + _N + r" GB per GPU, of the "
     + _N + r" GB each card exposes\.$",
     "Em bf16 puro (bf16-true, 8 B por parâmetro$1) $2 × $3 GB cabe: ⟨$4⟩ GB por GPU, dos ⟨$5⟩ GB que cada placa expõe."),
    (r"^In pure bf16 \(bf16-true, 8 B per parameter(, FSDP)?\) (\d+) x (\d+) GB does not fit either: " + _N
     + r" GB per GPU, of the " + _N + r" GB each card exposes\.$",
     "Em bf16 puro (bf16-true, 8 B por parâmetro$1) $2 × $3 GB também não cabe: ⟨$4⟩ GB por GPU, dos ⟨$5⟩ GB que cada "
     "placa expõe."),
    # ---- validation errors the page can trigger (stage_keys, layout_keys, estimate/framework.py, service.py); unanchored
    # at the end: " (valid values: ...)" follows them, which its own rule translates
    (r"^(\w+): is a key of stage ([\w, ]+?), not (\w+); set stage or remove (\w+)",
     "$1: é uma chave da etapa $2, não de $3; define a etapa ou retira $4"),
    (r"^framework: tensor, pipeline, context and expert parallelism are modelled as torchtitan runs them; set "
     r"framework=torchtitan", "framework: o paralelismo de tensores, de pipeline, de contexto e de especialistas é "
     "modelado como o torchtitan o executa; define framework=torchtitan"),
    (r"^fsdp_version: (\w+) runs FSDP(\d) only", "fsdp_version: o $1 só executa FSDP$2"),
    (r"^num_nodes: must divide num_gpus \((\d+)\) into equal nodes", "num_nodes: tem de dividir num_gpus ($1) em nós iguais"),
    (r"^reference: (\w+)'s loss needs reference log-probs \(orpo and simpo do not\)",
     "reference: a perda do $1 precisa das log-probs de referência (orpo e simpo não)"),
    (r"^(vllm_sleep|vllm_gpu_memory_utilization): applies to generation=vllm-colocate only",
     "$1: só se aplica a generation=vllm-colocate"),
    (r"^shard_scope: sharding inside a node needs zero3 \(hpZ\), fsdp or fsdp-grad-op \(HSDP\)",
     "shard_scope: repartir dentro de um nó precisa de zero3 (hpZ), fsdp ou fsdp-grad-op (HSDP)"),
    (r"^reference: (\w+) scores its own fresh rollouts, so reference log-probs cannot be precomputed",
     "reference: o $1 pontua as suas próprias respostas novas, por isso as log-probs de referência não podem ser "
     "pré-calculadas"),
    (r"^reference: (\w+)'s KL penalty always needs a reference", "reference: a penalização KL do $1 precisa sempre de uma "
     "referência"),
    (r"^deepspeed_config: names a file; paste the DeepSpeed config's JSON instead",
     "deepspeed_config: nomeia um ficheiro; cola antes o JSON da configuração do DeepSpeed"),
    (r"^images_per_sample: images of model_type '(\w+)' are not modelled \(no vision-tower description\); modelled: ",
     "images_per_sample: as imagens do model_type '$1' não estão modeladas (sem descrição da torre de visão); "
     "modelados: "),
    (r"^grad_accum: is the pipeline's micro-batches per step and must be at least pipeline_parallel \((\d+)\) for 1f1b "
     r"\(torch's Schedule1F1B\); got (\d+)", "grad_accum: são os micro-batches do pipeline por passo e tem de ser pelo "
     "menos pipeline_parallel ($1) com 1f1b (o Schedule1F1B do torch); recebido: $2"),
    (r"^(image_width|image_height): the image's aspect ratio must be at most 200 \(the model's image processor refuses "
     r"it\), got image_height (\d+) x image_width (\d+)$", "$1: a proporção da imagem tem de ser no máximo 200 (o "
     "processador de imagens do modelo recusa-a); recebido: image_height $2 x image_width $3"),
    (r"^the image's aspect ratio must be at most 200 \(the model's image processor refuses it\), got image_height (\d+) "
     r"x image_width (\d+)$", "a proporção da imagem tem de ser no máximo 200 (o processador de imagens do modelo "
     "recusa-a); recebido: image_height $1 x image_width $2"),
    (r"^offload: FSDP's CPU offload moves the parameters and gradients with the optimizer state: optimizer-only "
     r"offload is DeepSpeed ZeRO's \(zero1, zero2, zero3\)",
     "offload: o offload para CPU do FSDP move os parâmetros e os gradientes com o estado do otimizador: o offload só "
     "do otimizador é do DeepSpeed ZeRO (zero1, zero2, zero3)"),
    (r"^framework_version: (\w+) has no modelled release '([^']*)'", "framework_version: o $1 não tem nenhuma versão "
     "modelada '$2'"),
    (r"^micro_batch_size: KTO's KL term needs at least 2 examples per GPU batch \(TRL refuses 1\)",
     "micro_batch_size: o termo KL do KTO precisa de pelo menos 2 exemplos por lote de GPU (o TRL recusa 1)"),
    (r"\(valid values: (\d+) or more\)", "(valores válidos: $1 ou mais)"),
    (r"^precision: a (bf16|fp16) load of this model keeps (.+?) in fp32 \(transformers' _keep_in_fp32_modules\), and "
     r"FSDP(\d) ", "precision: uma carga $1 deste modelo mantém $2 em fp32 (_keep_in_fp32_modules do transformers), e o "
     "FSDP$3 "),
    (r"needs one dtype for the trainable parameters of each unit \(FSDP expects uniform original parameter dtype\); "
     r"use bf16-mixed \(fp32 weights\), LoRA, or DeepSpeed ZeRO", "precisa de um só dtype para os parâmetros treináveis "
     "de cada unidade (FSDP expects uniform original parameter dtype); usa bf16-mixed (pesos fp32), LoRA ou DeepSpeed ZeRO"),
    (r"flattens each unit's parameters, frozen ones too, into one tensor of one dtype \(Must flatten tensors with "
     r"uniform dtype\); use bf16-mixed \(fp32 weights\), LoRA under fsdp_version 2, or DeepSpeed ZeRO",
     "achata os parâmetros de cada unidade, também os congelados, num tensor de um só dtype (Must flatten tensors with "
     "uniform dtype); usa bf16-mixed (pesos fp32), LoRA com fsdp_version 2 ou DeepSpeed ZeRO"),
    (r"^config\.json declares quantization_config \(quant_method=([^)]*)\); the architecture is read from it, the "
     r"weight format is chosen separately$", "o config.json declara quantization_config (quant_method=$1); a arquitetura "
     "lê-se dele, o formato dos pesos escolhe-se à parte (method e quantize)"),
    # ---- the page's own words for import advice (web/importing.py WEB_HINTS)
    (r"; the page reads no file: remove that key and paste the file's JSON into the DeepSpeed config field",
     "; a página não lê ficheiros: retira essa chave e cola o JSON do ficheiro no campo da configuração do DeepSpeed"),
    (r"; paste the training config here \(a DeepSpeed JSON goes into the DeepSpeed config field\)",
     "; cola aqui a configuração de treino (um JSON do DeepSpeed vai para o campo da configuração do DeepSpeed)"),
    (r"^not in the file: the GPU count is set at launch; set the GPU count on the page$",
     "não está no ficheiro: o número de GPUs define-se no lançamento; define o número de GPUs na página"),
    # ---- DeepSpeed review (estimate/ds_load.py host_flatten_note, config_import/ds_read.py)
    (r"^The peak is ZeRO's load: the " + _N + r" GiB flat copy of the 16-bit trainable weights beside themselves, "
     r"which DeepSpeed \(0\.18\.7 and later\) makes on the GPU only where the card's free memory holds it; on a card "
     r"without that room it flattens on the host and the peak is the (\S+) phase's, " + _N + r" GiB allocated\.$",
     "O pico é a carga do ZeRO: a cópia plana de ⟨$1⟩ GiB dos pesos treináveis de 16 bits ao lado deles, que o "
     "DeepSpeed (0.18.7 e posteriores) faz na GPU só quando a memória livre da placa a comporta; numa placa sem esse "
     "espaço achata no host e o pico passa a ser o da fase $2, ⟨$3⟩ GiB alocados."),
]
