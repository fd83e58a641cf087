"""The guide's stage section (issue 15): its figures are the estimator's, its prose exists in both languages,
and the sentences the stages add to plans and exports have Portuguese."""

from __future__ import annotations

import re

import pytest

from vramfit.estimate import estimate
from vramfit.web import guide


def test_stage_rows_are_the_estimators_phases():
    by = guide.stages()["by"]
    r = estimate(model="meta-llama/Llama-2-7b-hf", seq_len=2048, method="full", stage="dpo")
    assert by["dpo-full"]["peak_gib"] == round(r.peak.device_bytes / 2**30, 1)
    assert by["dpo-full"]["reference_gib"] == round(r.component("reference_model") / 2**30, 1) > 12
    # the LoRA reference is the same weights with the adapters off: no copy
    assert by["dpo-lora"]["reference_gib"] == 0 and by["sft-full"]["reference_gib"] == 0
    # colocated vLLM: 0.3 of an H100's memory, in the generation phase; the server leaves none of it here
    from vramfit.gpus import get_gpu

    assert by["grpo-colocate"]["engine_gib"] == round(int(0.3 * get_gpu("h100-sxm").usable_bytes) / 2**30, 1)
    assert by["grpo-server"]["engine_gib"] == 0 and by["grpo-hf"]["engine_gib"] > 0
    assert by["grpo-server"]["generate_gib"] < by["grpo-hf"]["generate_gib"]


@pytest.mark.parametrize("lang,heading", [("en", "DPO and GRPO: why preference and RL training cost more"),
                                          ("pt", "DPO e GRPO: porque o treino por preferências e por reforço custa mais")])
def test_stage_section_is_served_with_its_table(client, lang, heading):
    html = client.get("/guide", params={"lang": lang}).text
    section = html[html.index('<section id="stages">'):]
    section = section[:section.index("</section>")]
    assert heading in section and 'id="t-stages"' in section
    ref = guide.stages()["by"]["dpo-full"]["reference_gib"]
    assert (f"{ref:.1f}".replace(".", ",") if lang == "pt" else f"{ref:.1f}") in section
    assert len(re.findall(r"<tr><td>", section)) == len(guide.STAGE_ROWS)


def test_stage_notes_and_errors_have_portuguese():
    from vramfit.errors import ScenarioError
    from vramfit.plan import plan
    from vramfit.plan.export import export_plan
    from vramfit.web.translate import untranslated

    base = {"model": "Qwen/Qwen2.5-7B", "method": "lora", "seq_len": 2048}
    sentences: set[str] = set()
    for keys in ({"stage": "grpo", "generation": "vllm-server"}, {"stage": "dpo", "reference": "copy"},
                 {"stage": "dpo", "loss": "fused"}):
        r = plan({**base, **keys}, gpu_ids=["rtx4090"], effective_batch=16)
        sentences.update(n for p in r.plans[:1] for n in p.notes)
        sentences.update(export_plan(r.plans[0], "trl").notes)
    big = plan({"model": "meta-llama/Llama-2-70b-hf", "method": "qlora", "stage": "grpo", "generation": "vllm-server"},
               gpu_ids=["rtx4090"], effective_batch=16)
    sentences.update(e.reason for e in big.excluded)
    for keys, opts in (({"stage": "grpo", "generation": "vllm-server"}, {"max_gpus": 1}),
                       ({"stage": "grpo"}, {"effective_batch": 12})):
        with pytest.raises(ScenarioError) as err:
            plan({**base, **keys}, gpu_ids=["rtx4090"], **{"effective_batch": 16, **opts})
        sentences.add(str(err.value))
    wanted = [s for s in sentences if "vLLM" in s or "grpo" in s or "TRL" in s or "reference" in s]
    assert len(wanted) >= 6
    assert untranslated(sorted(wanted)) == []
