"""Portuguese for what the importer says of the preference and RL keys of the frameworks' own files (LLaMA-Factory's
RLHFArguments, config_import/llamafactory_rlhf.py; Axolotl's and TRL's DPO keys, config_import/stages.py): a part of
:data:`vramfit.web.translate_import.IMPORT_RULES` and its labels, in their place there."""

from __future__ import annotations

#: the import report's labels for those keys (whole sentences)
RLHF_LABELS: dict[str, str] = {
    # RLHF keys (config_import/llamafactory_rlhf.py, stages.py) and LoRA keys under full fine-tuning
    "a LoRA setting: LLaMA-Factory ignores it under finetuning_type full":
        "uma definição LoRA: o LLaMA-Factory ignora-a com finetuning_type full",
    "ppo: the prompt's length; the rollout adds max_new_tokens": "ppo: o comprimento do prompt; a geração acrescenta "
        "max_new_tokens",
    "rollouts per PPO step: the estimate counts one optimizer step's":
        "gerações por passo PPO: a estimativa conta as de um passo do otimizador",
    "no reference model in this stage": "sem modelo de referência nesta etapa",
    "adapters on the reference model: not counted": "adaptadores no modelo de referência: não contados",
    "the reference model's own quantization: the copy is counted as the policy's base is stored":
        "a quantização própria do modelo de referência: a cópia conta-se como a base da política está guardada",
    "PPO only: no effect in this stage": "só PPO: sem efeito nesta etapa",
    "adapters on the reward model: not counted": "adaptadores no modelo de recompensa: não contados",
    "the reward model's own quantization: not counted": "a quantização própria do modelo de recompensa: não contada",
    "generation length cap: max_new_tokens wins": "limite do comprimento da geração: prevalece max_new_tokens",
    "beam search in the rollouts: the estimate counts one sequence per completion":
        "pesquisa em feixe (beam search) nas gerações: a estimativa conta uma sequência por completação",
    "Axolotl 0.12 passes it to TRL's DPOConfig; releases on TRL 0.29 or later refuse it":
        "o Axolotl 0.12 passa-o à DPOConfig do TRL; as versões sobre o TRL 0.29 ou posterior recusam-no",
    "Axolotl passes it to the DPO trainer only": "o Axolotl só o passa ao treinador DPO",
    "not a key of Axolotl's trl section: pydantic drops it; the top-level precompute_ref_log_probs is the one Axolotl "
    "passes": "não é uma chave da secção trl do Axolotl: o pydantic descarta-a; o Axolotl passa o "
    "precompute_ref_log_probs do nível de topo",
    "gc.collect() and torch.cuda.empty_cache() every N steps: cached segments freed, the allocated peak the same":
        "gc.collect() e torch.cuda.empty_cache() a cada N passos: libertam-se segmentos em cache, o pico alocado é o mesmo",
    "a second LoRA adapter as the reference: its weights not counted":
        "um segundo adaptador LoRA como referência: os pesos dele não são contados",
    "the prompt's logits skipped (TRL before 0.29): the estimate counts every token's where the trainer builds the "
    "logits": "os logits do prompt saltados (TRL antes do 0.29): a estimativa conta os de todos os tokens onde o "
    "treinador constrói os logits",
    "TR-DPO's reference sync: the reference counted as a frozen copy, the sync's own temporaries not":
        "a sincronização da referência do TR-DPO: a referência conta como cópia congelada, os temporários da "
        "sincronização não",
    "TR-DPO's sync weight and interval: no memory effect": "peso e intervalo de sincronização do TR-DPO: sem efeito na "
        "memória",
    "0 or less: max_length caps the prompt and the completion":
        "0 ou menos: max_length limita o prompt e a completação juntos",
    "a reference model your script passes beside PEFT: set reference copy if it loads one":
        "um modelo de referência que o teu script passe ao lado do PEFT: define reference copy se carregar um",
}

#: PPO's reward model in LLaMA-Factory (config_import/llamafactory_rlhf.py REWARD_NOTES) and its refusals
RLHF_RULES: list[tuple[str, str]] = [
    (r"^reward_model_type (lora|api): (?:LLaMA-Factory loads the reward model as a second adapter on the policy|a "
     r"reward server, no memory on these GPUs), so the frozen reward-model copy the estimate counts for PPO is an "
     r"over-count$",
     "reward_model_type $1: o modelo de recompensa não ocupa uma cópia própria nestas GPUs (lora: um segundo "
     "adaptador na política; api: um servidor), pelo que a cópia congelada que a estimativa conta para o PPO é "
     "um excesso"),
    (r"^reward_model_type full: counted as PPO's frozen reward model, a copy of the policy's architecture and precision "
     r"\(not the reward checkpoint's own size\)$",
     "reward_model_type full: contado como o modelo de recompensa congelado do PPO, uma cópia da arquitetura e precisão "
     "da política (não o tamanho do próprio checkpoint de recompensa)"),
    (r"^reward_model_type: lora needs finetuning_type lora", "reward_model_type: lora precisa de finetuning_type lora"),
    (r"\(valid values with full: full, api\)", "(valores válidos com full: full, api)"),
    (r"^(\w+): LLaMA-Factory accepts it with finetuning_type lora only \(valid values with full: false or unset\)$",
     "$1: o LLaMA-Factory só o aceita com finetuning_type lora (valores válidos com full: false ou não definido)"),
    (r"^reward_model_type: (.+) is unknown(?= \(valid values)", "reward_model_type: $1 é desconhecido"),
    (r"^max_length: must exceed cutoff_len \((.+?)\) when max_new_tokens is 0 or less: it caps the prompt and the "
     r"completion together", "max_length: tem de exceder cutoff_len ($1) quando max_new_tokens é 0 ou menos: limita o "
     "prompt e a completação juntos"),
]
