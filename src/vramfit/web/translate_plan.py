"""Portuguese rules for the planner's reasons a card got no plan and its plan notes (vramfit.plan.rental,
vramfit.plan.planner), and for a few of the estimate's and the importer's notes (what images add to the sequence,
torchtitan's compile components): a part of :data:`vramfit.web.translate.RULES`, in its place there."""

from __future__ import annotations

from vramfit.web.translate_estimate import _N  # a number as the library prints it

#: Whole sentences and phrases, most specific first.
PLAN_RULES: list[tuple[str, str]] = [
    # ---- changes that make a run fit: DoRA's (vramfit.plan.changes._dora_changes)
    (r"^LoRA dropout 0, so DoRA reuses the base output \(no kept weight copies\)$",
     "dropout do LoRA 0, para o DoRA reutilizar a saída base (sem cópias guardadas dos pesos)"),
    (r"^plain LoRA instead of DoRA$", "LoRA simples em vez de DoRA"),
    (r"^no dropout on the adapters' input$", "sem dropout na entrada dos adaptadores"),
    (r"^no magnitude/direction split: measure the quality on the task$",
     "sem a separação magnitude/direção: meça a qualidade na tarefa"),
    # ---- a colocated vLLM whose share cannot start it (vramfit.plan.verdict._vllm_refusal)
    (r"^cannot run: vLLM's ([\d.]+) share \(" + _N + r" GiB\) is less than its model copy and one sequence's KV cache "
     r"\(" + _N + r" GiB\) \(--vllm-gpu-memory-utilization ([\d.]+) or more runs\)$", "não corre: a fração $1 do vLLM "
     "(⟨$2⟩ GiB) é menor do que a sua cópia do modelo e a cache KV de uma sequência (⟨$3⟩ GiB) (corre com "
     "vllm_gpu_memory_utilization $4 ou mais)"),
    (r"^cannot run: vLLM's ([\d.]+) share \(" + _N + r" GiB\) is less than its model copy and one sequence's KV cache "
     r"\(" + _N + r" GiB\) \(a card with more memory runs\)$", "não corre: a fração $1 do vLLM (⟨$2⟩ GiB) é menor do "
     "que a sua cópia do modelo e a cache KV de uma sequência (⟨$3⟩ GiB) (corre numa placa com mais memória)"),
    (r"^vLLM's ([\d.]+) share \(" + _N + r" GiB\) is less than its model copy and one sequence's KV cache \(" + _N
     + r" GiB\): plan it with (.+)$", "a fração $1 do vLLM (⟨$2⟩ GiB) é menor do que a sua cópia do modelo e a cache KV "
     "de uma sequência (⟨$3⟩ GiB): planeia com $4"),
    (r"planeia com a card with more memory$", "planeia com uma placa com mais memória"),
    (r"planeia com --vllm-gpu-memory-utilization ([\d.]+) or more$", "planeia com vllm_gpu_memory_utilization $1 ou mais"),
    # ---- sharding at the run's own GPU count (vramfit.plan.changes._sharding_changes)
    (r"^(ZeRO-2|ZeRO-3|FSDP|FSDP SHARD_GRAD_OP) across the (\d+) GPUs$", "$1 entre as $2 GPUs"),
    (r"^optimizer state and gradients split across the GPUs: the same traffic as data parallelism$",
     "estado do otimizador e gradientes repartidos entre as GPUs: o mesmo tráfego do paralelismo de dados"),
    (r"^weights split too and gathered for every block, forward and backward: half again the traffic$",
     "também os pesos repartidos e reunidos para cada bloco, no forward e no backward: mais metade do tráfego"),
    # ---- the trained copies' (vramfit.plan.changes._saved_module_changes)
    (r"^LoRA on ([\w, ]+) instead of whole trained copies$", "LoRA em $1 em vez de cópias inteiras treinadas"),
    (r"^no trained copies of ([\w, ]+)$", "sem cópias treinadas de $1"),
    (r"^a rank-r update of ([\w, ]+): new tokens' rows learn less than in a whole copy$",
     "uma atualização de rank r de $1: as linhas dos tokens novos aprendem menos do que numa cópia inteira"),
    (r"^([\w, ]+) stay frozen: added tokens keep their initial vectors$",
     "$1 ficam congelados: os tokens acrescentados mantêm os vetores iniciais"),
    # ---- planner: why a card got no plan, and plan notes (vramfit.plan.rental, vramfit.plan.planner)
    # every form search.tried_words builds: the engine, checkpointing, offload (only with the engine), as listed
    (r"does not fit (\d+) x (\S+)( \(rented at most \d+ per instance\))? even with ((?:ZeRO-3|FSDP)(?:, checkpointing and "
     r"offload| and checkpointing| and offload)?|checkpointing) \(at micro-batch 1\)",
     "não cabe em $1 × $2$3 nem com $4 (com micro-batch 1)"),
    (r"(nem com (?:ZeRO-3|FSDP)(?:, checkpointing)?) and (checkpointing|offload) \(com micro-batch",
     "$1 e $2 (com micro-batch"),
    (r"(nem com [^(]*?)offload \(com micro-batch", "$1descarga (com micro-batch"),
    (r" \(rented at most (\d+) per instance\)( nem com)", " (alugada no máximo $1 por instância)$2"),
    (r"; effective batch (\d+) allows at most (\d+) GPUs", "; o batch efetivo $1 permite no máximo $2 GPU(s)"),
    (r"^does not fit (\d+) x (\S+) at micro-batch 1 \((\S+)'s scripts run no checkpointing or offload on one GPU\)",
     "não cabe em $1 × $2 com micro-batch 1 (os scripts do $3 não correm checkpointing nem descarga numa GPU)"),
    (r"^does not fit 1 x (\S+) at micro-batch 1 \((\S+) trains a quantized base on one GPU only, checkpointing "
     r"(\S+)\)$", "não cabe em 1 × $1 com micro-batch 1 (o $2 treina uma base quantizada numa só GPU, checkpointing $3)"),
    (r"; give max_gpus above (\d+) to plan across nodes$", "; indica max_gpus acima de $1 para planear em vários nós"),
    (r"^rented in units of (\d+) GPUs; effective batch (\d+) allows at most (\d+)$",
     "alugada em unidades de $1 GPUs; o batch efetivo $2 permite no máximo $3"),
    (r"^no BF16 on (.+): plan it with --precision fp16-mixed$", "sem BF16 na $1: planeia com a precisão fp16-mixed"),
    (r"^needs " + _N + r" GiB of host RAM per GPU for offloaded state$",
     "precisa de ⟨$1⟩ GiB de RAM do host por GPU para o estado descarregado"),
    (r"^usable memory unconfirmed: the marketing GB is used \(conservative\)$",
     "memória utilizável por confirmar: usa-se o valor comercial em GB (conservador)"),
    (r"^fused loss: ", "perda fundida: "),
    (r"^no NVLink between (\d+) cards: GPU-to-GPU traffic over PCIe \(" + _N + r" GB/s per direction\)$",
     "sem NVLink entre $1 placas: o tráfego entre GPUs passa pelo PCIe (⟨$2⟩ GB/s em cada sentido)"),
    (r"^the plan needs no sharding, but DeepSpeed's stage 0 in 16-bit keeps an unsharded fp32 master copy: written as "
     r"ZeRO stage 1, whose memory differs \(estimate again with parallelism zero1 for its figure, or export accelerate "
     r"for the plan's own\)$",
     "o plano não precisa de repartição, mas o stage 0 do DeepSpeed em 16 bits mantém uma cópia mestra fp32 não "
     "repartida: escreve-se o ZeRO stage 1, cuja memória difere (estima de novo com parallelism zero1 para o seu valor, "
     "ou exporta accelerate para o do plano)"),
    (r"^timed with an NVLink bridge between the (\d+) cards \(" + _N + r" GB/s per direction\); without one, "
     r"GPU-to-GPU traffic goes over PCIe \(" + _N + r" GB/s\)$",
     "tempo contado com uma ponte NVLink entre as $1 placas (⟨$2⟩ GB/s em cada sentido); sem ela, o tráfego entre GPUs "
     "passa pelo PCIe (⟨$3⟩ GB/s)"),
    (r"^(\S+): bitsandbytes 8-bit AdamW instead of (\S+)$", "$1: AdamW de 8 bits do bitsandbytes em vez de $2"),
    (r"^needs " + _N + r" GiB of host RAM per GPU for offloaded state \(" + _N + r" GiB for the node\)$",
     "precisa de ⟨$1⟩ GiB de RAM do host por GPU para o estado descarregado (⟨$2⟩ GiB para o nó)"),
    (r"^effective batch (\d+) \(the nearest multiple of (\d+) GPUs at or above (\d+)\)$",
     "batch efetivo $1 (o múltiplo de $2 GPUs mais próximo, igual ou acima de $3)"),
    (r"^vendor (.+) not in the stack table: taken as CUDA; check your software runs on it$",
     "fabricante $1 fora da tabela de stacks: tratado como CUDA; confirma que o teu software corre nela"),
    (r"^rented in units of (\d+) GPUs \((.+)\): the cost is for (\d+)$",  # the source stays in the API and CLI
     "alugada em unidades de $1 GPUs: o custo é o de $3"),
    (r"^no dated rental price in the catalog: add one with --gpus$", "sem preço de aluguer datado no catálogo: acrescenta um com --gpus"),
    (r"^Gaudi \(SynapseAI, optimum-habana\): bitsandbytes 0\.50 only de-quantizes 4-bit on HPU; no FlashAttention 2, "
     r"no Triton \(Liger\), no bitsandbytes 8-bit/paged optimizers$",
     "Gaudi (SynapseAI, optimum-habana): o bitsandbytes 0.50 só desquantiza 4 bits na HPU; sem FlashAttention 2, "
     "sem Triton (Liger), sem otimizadores de 8 bits/paginados do bitsandbytes"),
    (r"^the scenario needs ([^;]+); ", "o cenário precisa de $1; "),
    (r"^(.+) card; --stack (\S+)$", "placa $1; só as stacks $2"),
    (r"^fits (\d+) x (\S+) only with settings its stack lacks \(", "cabe em $1 × $2 só com opções que a sua stack não tem ("),
    (r"; Gaudi \(SynapseAI, optimum-habana\): bitsandbytes 0\.50 only de-quantizes 4-bit on HPU; no FlashAttention 2, "
     r"no Triton \(Liger\), no bitsandbytes 8-bit/paged optimizers",
     "; Gaudi (SynapseAI, optimum-habana): o bitsandbytes 0.50 só desquantiza 4 bits na HPU; sem FlashAttention 2, "
     "sem Triton (Liger), sem otimizadores de 8 bits/paginados do bitsandbytes"),
    (r"^ROCm: use the ROCm builds of PyTorch and bitsandbytes \(>= 0\.50: 4-bit QLoRA and 8-bit optimizers\), "
     r"FlashAttention 2 via its ROCm CK backend; CUDA-only kernels will not load$",
     "ROCm: usa as versões ROCm do PyTorch e do bitsandbytes (≥ 0.50: QLoRA de 4 bits e otimizadores de 8 bits), "
     "FlashAttention 2 pelo backend ROCm CK; kernels só para CUDA não carregam"),
    # ---- DeepSpeed files read as DeepSpeed reads them (config_import/ds_read.py, estimate/deepspeed.py)
    (r"zero_optimization\.(\S+) is not a DeepSpeed ZeRO key \(DeepSpeed refuses unknown keys: DeepSpeedZeroConfig, "
     r"extra='forbid'\); check the spelling", "zero_optimization.$1 não é uma chave ZeRO do DeepSpeed (o DeepSpeed recusa "
     "chaves desconhecidas: DeepSpeedZeroConfig, extra='forbid'); verifica a ortografia"),
    (r"zero_optimization\.(\S+) is not a DeepSpeed offload key \(valid keys: ([^)]*)\)",
     "zero_optimization.$1 não é uma chave de offload do DeepSpeed (chaves válidas: $2)"),
    (r"ZeRO stage 0 with (\S+) (\S+) is DeepSpeed's own 16-bit optimizer wrapper \(an unsharded fp32 master copy and its "
     r"gradients: ([^)]*)\), which vramfit does not model yet; use ZeRO stage 1-3, or plain DDP without a DeepSpeed "
     r"config", "ZeRO stage 0 com $1 $2 é o invólucro de otimizador de 16 bits do próprio DeepSpeed (uma cópia mestra "
     "fp32 não repartida e os seus gradientes: $3), que o vramfit ainda não modela; usa o ZeRO stage 1-3, ou DDP "
     "simples sem configuração DeepSpeed"),
    (r"zero_optimization\.(\S+) and (\S+) name one DeepSpeed setting: give one",
     "zero_optimization.$1 e $2 designam a mesma definição do DeepSpeed: indica só uma"),
    (r"not a DeepSpeed ZeRO key \(DeepSpeed would refuse it\): check the spelling",
     "não é uma chave ZeRO do DeepSpeed (o DeepSpeed recusá-la-ia): verifica a ortografia"),
    (r"^a comment \(DeepSpeed skips keys it does not read\)$", "um comentário (o DeepSpeed salta as chaves que não lê)"),
    (r"^DeepSpeed's compile section \(DeepCompile in 0\.18: deepcompile, free_activation, \.\.\.; 0\.18 refuses the older "
     r"disable/backend fields\): not modelled$", "a secção compile do DeepSpeed (DeepCompile no 0.18: deepcompile, "
     "free_activation, ...; o 0.18 recusa os campos antigos disable/backend): não modelada"),
    (r"^Ulysses sequence parallelism's collective dtype$", "o dtype das coletivas do paralelismo de sequência Ulysses"),
    (r"^DeepSpeed reads parameter offload at ZeRO stage 3 only \(stage (\d)\)$",
     "o DeepSpeed só lê o offload de parâmetros no ZeRO stage 3 (stage $1)"),
    (r"\(its decoder layers hold a convolution, (\S+): a state-space or linear-attention mixer, which vramfit does not "
     r"model yet\)", "(as camadas do decoder têm uma convolução, $1: um misturador de espaço de estados ou de atenção "
     "linear, que o vramfit ainda não modela)"),
    (r"\(its layer_types name '([^']*)' layers, a linear-attention or state-space mixer, which vramfit does not model "
     r"yet\)", "(o layer_types indica camadas '$1', um misturador de atenção linear ou de espaço de estados, que o "
     "vramfit ainda não modela)"),
    (r"\(an encoder-decoder model: vramfit models decoder-only transformers\)",
     "(um modelo codificador-descodificador: o vramfit modela transformers só com decoder)"),
    # ---- what images and video add to the language model's sequence (estimate/vision_inputs.py image_tokens_note)
    *[(r"^Vision inputs: " + en + r" per sequence make " + _N + r" language-model tokens and " + _N + r" tower "
       r"patches, so the language model runs " + _N + r" \+ " + _N + r" = " + _N + r" tokens per sequence \(seq_len "
       r"counts the text only\)\.$",
       "Entradas de visão: " + pt + " por sequência dão ⟨$" + str(k + 1) + "⟩ tokens do modelo de linguagem e ⟨$"
       + str(k + 2) + "⟩ patches da torre, por isso o modelo de linguagem processa ⟨$" + str(k + 3) + "⟩ + ⟨$"
       + str(k + 4) + "⟩ = ⟨$" + str(k + 5) + "⟩ tokens por sequência (seq_len conta só o texto).")
      for en, pt, k in ((r"(\d+) image\(s\) of (\d+) x (\d+)", "$1 imagem(ns) de $2 x $3", 3),
                        (r"(\d+) video frame\(s\)", "$1 fotograma(s) de vídeo", 1),
                        (r"(\d+) image\(s\) of (\d+) x (\d+) and (\d+) video frame\(s\)",
                         "$1 imagem(ns) de $2 x $3 e $4 fotograma(s) de vídeo", 4))],
    # ---- torchtitan's compile.components (config_import/torchtitan.py _step)
    (r"^no model component: nothing of the blocks compiled, counted uncompiled$",
     "sem o componente model: nenhum bloco compilado, contado sem compilação"),
    (r"^no model component: nothing of the blocks compiled, counted uncompiled \(the compiled loss not counted\)$",
     "sem o componente model: nenhum bloco compilado, contado sem compilação (a loss compilada não é contada)"),
    (r"^the loss left eager: counted compiled, as torchtitan's default; framework_version (\S+) counts it eager \(with "
     r"9dec370's foreach AdamW and repeat_kv\)$",
     "a loss fica eager: contada compilada, como no padrão do torchtitan; framework_version $1 conta-a eager (com o "
     "AdamW foreach e o repeat_kv do 9dec370)"),
    # ---- the release a profile models where a newer one runs more (estimate/profile_fields.py release_note)
    (r"^Release: torchtitan v0\.3\.0 \(output layer and loss over 8 sequence chunks, each chunk's backward inside the "
     r"loss; the embedding and \[norm, lm_head\] FSDP units of their own; fused AdamW; flex attention counted as "
     r"flash, its max_scores left out\)\. framework_version torchtitan-0\.2\.2, torchtitan-0\.2\.1 and "
     r"torchtitan-2024 name older releases\.$",
     "Versão: torchtitan v0.3.0 (camada de saída e perda em 8 blocos da sequência, o backward de cada bloco dentro "
     "da perda; a embedding e [norm, lm_head] em unidades FSDP próprias; AdamW fundido; atenção flex contada como "
     "flash, sem os seus max_scores). framework_version torchtitan-0.2.2, torchtitan-0.2.1 e torchtitan-2024 "
     "nomeiam versões anteriores."),
    (r"^the plan was sized as torchtitan 0\.3 runs it \(lm_head and the loss over 8 sequence chunks\); the releases "
     r"that read this TOML compute the loss on the whole logits, which holds more: estimate again with "
     r"--framework-version torchtitan-0\.2\.2 before running the TOML$",
     "o plano foi dimensionado como o torchtitan 0.3 o corre (lm_head e a perda em 8 blocos da sequência); as versões "
     "que leem este TOML calculam a perda sobre os logits inteiros, que ocupa mais: estima de novo com "
     "--framework-version torchtitan-0.2.2 antes de correr o TOML"),
]
