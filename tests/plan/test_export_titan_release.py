"""A torchtitan plan sized as v0.3.0 runs it (the profile's release: its chunked loss) is written as a TOML that only
releases before 0.3 read (v0.3.0 reads none): the export says so, in English and on the page in Portuguese; a plan
sized with torchtitan-0.2.2, the TOML's release, does not."""

from __future__ import annotations

from vramfit.plan import plan
from vramfit.plan.export import export_plan
from vramfit.web.translate import untranslated

NOTE = "the plan was sized as torchtitan 0.3 runs it"


def _notes(**keys) -> list[str]:
    r = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 8192, "framework": "torchtitan",
              **keys}, effective_batch=8, max_gpus=8, gpu_ids="h100-sxm", with_changes=False)
    return list(export_plan(r.plans[0], "torchtitan").notes)


def test_a_0_3_plan_says_its_toml_release_computes_the_whole_logits():
    notes = _notes()
    said = [n for n in notes if n.startswith(NOTE)]
    assert len(said) == 1 and "--framework-version torchtitan-0.2.2" in said[0]
    assert untranslated(said) == []
    assert not [n for n in _notes(framework_version="torchtitan-0.2.2") if n.startswith(NOTE)]
