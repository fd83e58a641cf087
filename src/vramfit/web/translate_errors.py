"""Portuguese rules for the API's one-line errors the other rule modules leave English: fractions, parameter counts,
LoRA targets, pipeline layouts, DeepSpeed configs, the config importer's frame (vramfit.config_import.loader,
detect) and the dataset upload's size: a part of :data:`vramfit.web.translate.RULES`, after the plan rules there."""

from __future__ import annotations

from vramfit.web.translate_estimate import _N  # a number as the library prints it

_YAML = r"(não é YAML válido(?: \(linha \d+\))?: )"  # the frame the problems below follow (vramfit.config_import.loader)

#: Whole sentences and phrases, most specific first.
ERROR_RULES: list[tuple[str, str]] = [
    # ---- numbers and counts (vramfit.scenario.fraction, vramfit.units.parse_param_count, vramfit.models.generic)
    (r"^(\w+): must be a fraction above 0 and at most 1, got (.+)$",
     "$1: tem de ser uma fração acima de 0 e no máximo 1 (recebido: $2)"),
    (r"^(\w+): must be a number, got (.+)$", "$1: tem de ser um número (recebido: $2)"),
    (r"^params: a generic model needs at least " + _N + r" parameters \(its (\d+)-token embeddings alone take tens "
     r"of millions\), got " + _N + "$",
     "params: um modelo genérico precisa de pelo menos ⟨$1⟩ parâmetros (só os embeddings de $2 tokens ocupam "
     "dezenas de milhões); recebido: ⟨$3⟩"),
    (r"^params: a generic decoder of " + _N + r" parameters rounds up to more than " + _N
     + r" \(MAX_PARAMS\); give a smaller count$",
     "params: um descodificador genérico de ⟨$1⟩ parâmetros arredonda para mais de ⟨$2⟩ (MAX_PARAMS); indica um "
     "número menor"),
    (r"^params: parameter count (.+) is not a whole number$", "params: o número de parâmetros $1 não é inteiro"),
    (r"^params: parameter count must be positive, got (.+)$",
     "params: o número de parâmetros tem de ser positivo (recebido: $1)"),
    (r"^params: parameter count (.+) is absurd \(more than 10 trillion\)$",
     "params: o número de parâmetros $1 é absurdo (mais de 10 biliões)"),
    (r"^params: not a parameter count: ", "params: não é um número de parâmetros: "),
    (r"^model: must be a catalog model id, got (.+)$", "model: tem de ser o id de um modelo do catálogo (recebido: $1)"),
    # ---- LoRA targets (vramfit.scenario)
    (r"^lora_targets: must name at least one module or 'all-linear'$",
     "lora_targets: tem de indicar pelo menos um módulo ou 'all-linear'"),
    (r"^lora_targets: (.+) is not a module name \(e\.g\. ([^)]*)\)$", "lora_targets: $1 não é um nome de módulo (p. ex. $2)"),
    # ---- pipeline layouts (vramfit.layout_keys)
    (r"^pipeline_virtual_stages: more than one model chunk per GPU needs pipeline_schedule=interleaved-1f1b",
     "pipeline_virtual_stages: mais de um bloco do modelo por GPU precisa de pipeline_schedule=interleaved-1f1b"),
    (r"^pipeline_virtual_stages: interleaved-1f1b needs 2 or more model chunks per GPU",
     "pipeline_virtual_stages: o interleaved-1f1b precisa de 2 ou mais blocos do modelo por GPU"),
    (r"^pipeline_schedule: interleaved-1f1b needs pipeline_parallel of 2 or more",
     "pipeline_schedule: o interleaved-1f1b precisa de pipeline_parallel de 2 ou mais"),
    # ---- a DeepSpeed config (vramfit.estimate.deepspeed)
    (r"^deepspeed_config: applies to DeepSpeed ZeRO; set parallelism to one of its stages",
     "deepspeed_config: aplica-se ao DeepSpeed ZeRO; escolhe em parallelism um dos seus estágios"),
    (r"zero_optimization\.stage must be 0, 1, 2 or 3, got (.+?)(?= \(valid values:|$)",
     "zero_optimization.stage tem de ser 0, 1, 2 ou 3 (recebido: $1)"),
    (r"zero_optimization\.stage (\d) means parallelism (\S+), but parallelism is (\S+?)(?= \(valid values:|$)",
     "zero_optimization.stage $1 corresponde a parallelism $2, mas parallelism é $3"),
    (r"zero_optimization\.(\w+)\.device must be one of cpu, nvme, none, got (.+)$",
     "zero_optimization.$1.device tem de ser cpu, nvme ou none (recebido: $2)"),
    (r"zero_optimization must be a mapping, got (\w+)$", "zero_optimization tem de ser um mapeamento (recebido: $1)"),
    (r"its offload sections mean offload (\S+), but offload is (\S+?)(?= \(valid values:|$)",
     "as suas secções de offload correspondem a offload $1, mas offload é $2"),
    # ---- a key of other stages (vramfit.stage_keys): the stages' "or" (the rule itself is in translate_notes)
    (r"(é uma chave da etapa [\w, ]*?) or ", "$1 ou "),
    # ---- the config importer (vramfit.config_import.loader, detect; web.importing)
    (r"^text: paste a training config \(YAML, JSON, TOML or a swift command\)$",
     "text: cola uma configuração de treino (YAML, JSON, TOML ou um comando swift)"),
    (r"^dialect: unknown dialect '(.*)'(?= \(valid values:)", "dialect: formato desconhecido '$1'"),
    (r"^dialect: must be a dialect name or null, got (.+?)(?= \(valid values:)",
     "dialect: tem de ser o nome de um formato ou null (recebido: $1)"),
    (r"<pasted config>: ", "<configuração colada>: "),
    (r": is not a training config vramfit knows \(no keys of ([^)]*)\); ",
     ": não é uma configuração de treino que o vramfit conheça (sem chaves de $1); "),
    (r"; choose its format in the Format list$", "; escolhe o formato na lista Formato"),
    (r"; pass --dialect to say which$", "; indica qual com --dialect"),
    (r": (\S+) '([^']*)' is not modelled yet \(valid values: ", ": $1 '$2' ainda não é modelado (valores válidos: "),
    (r": must hold a mapping of config keys, got (\w+)$", ": tem de conter um mapeamento de chaves de configuração "
     "(recebido: $1)"),
    (r": is not valid YAML \(line (\d+)\): ", ": não é YAML válido (linha $1): "),
    (r": is not valid YAML: ", ": não é YAML válido: "),
    (r": is not valid (JSON|TOML): ", ": não é $1 válido: "),
    (_YAML + r"expected (.+?), but (?:got|found) (.+)$", "$1esperava-se $2, mas encontrou-se $3"),
    (r"(esperava-se '[^']*') or ('[^']*')", "$1 ou $2"),
    (_YAML + r"mapping values are not allowed here$", "$1não são permitidos valores de mapeamento aqui"),
    (_YAML + r"(?:could not|did not) find expected (.+)$", "$1não se encontrou o $2 esperado"),
    (_YAML + r"found character (.+) that cannot start any token$",
     "$1encontrou-se o carácter $2, que não pode iniciar nenhum token"),
    (_YAML + r"found unexpected end of stream$", "$1o texto acaba inesperadamente"),
    # ---- a pasted config.json that is not JSON (vramfit.safe_input.load_json_text, web.service.spec_from_pasted)
    (r"^config_json: the pasted config\.json is not valid JSON \((.+) at line (\d+) column (\d+)\)$",
     "config_json: o config.json colado não é JSON válido ($1 na linha $2, coluna $3)"),
    *[(r"(não é JSON válido \()" + en, "$1" + pt) for en, pt in (
        ("Expecting property name enclosed in double quotes", "esperava-se um nome de propriedade entre aspas"),
        ("Expecting '(.)' delimiter", "esperava-se o delimitador '$2'"), ("Expecting value", "esperava-se um valor"),
        ("Extra data", "dados a mais"), ("Unterminated string starting at", "texto sem fim a partir de"),
        ("Invalid control character at", "carácter de controlo inválido em"))],
    # ---- the dataset upload (web.app)
    (r"^file: the upload needs a Content-Length of at most (\d+) bytes$",
     "file: o envio precisa de um Content-Length de no máximo $1 bytes"),
]
