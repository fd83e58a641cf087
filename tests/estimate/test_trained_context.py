"""A seq_len past the model's trained context: ``estimate`` says it in its assumptions (CLI table, JSON, web API) by
the rule and words ``fit`` states beside its longest sequence (vramfit.models.context, one definition)."""

import json

from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.models.context import past_context_note, trained_context, trained_to
from vramfit.plan import fit
from vramfit.web.translate import to_pt, untranslated

LLAMA2 = "meta-llama/Llama-2-7b-hf"  # max_position_embeddings 4096
NOTE = ("seq_len 8,192 is past the model's context (the model was trained to 4,096 tokens, max_position_embeddings "
        "in its config): memory is counted for 8,192 tokens, but positions past 4,096 were never trained; extend the "
        "context (rope_scaling) or shorten the sequences.")


def _past(r) -> list[str]:
    return [a for a in r.assumptions if a.startswith("seq_len ") and "past the model's context" in a]


def test_estimate_says_a_sequence_past_the_trained_context():
    assert _past(estimate(model=LLAMA2, method="qlora", seq_len=8192)) == [NOTE]
    assert _past(estimate(model=LLAMA2, method="qlora", seq_len=4096)) == []  # at the context: nothing to say
    # Llama 3.1 is trained to 131,072: 8,192 is well inside it
    assert _past(estimate(model="meta-llama/Llama-3.1-8B", method="qlora", seq_len=8192)) == []


def test_a_generic_decoder_has_no_trained_context_to_pass():
    """params= makes a placeholder max_position_embeddings (4,096): neither estimate nor fit states it."""
    r = estimate(params="7B", method="qlora", seq_len=8192)
    assert r.model.origin == "generic" and _past(r) == []
    assert fit({"params": "7B", "method": "qlora", "seq_len": 8192}, "h100-sxm").max_position_embeddings == 0


def test_fit_and_estimate_share_the_rule_and_the_words():
    from vramfit.estimate import resolve_spec
    from vramfit.scenario import parse_scenario

    _, spec, origin, _ = resolve_spec(parse_scenario({"model": LLAMA2}))
    assert trained_context(spec, origin) == 4096
    report = fit({"model": LLAMA2, "method": "qlora", "seq_len": 8192}, "h100-sxm")
    assert report.max_position_embeddings == 4096
    assert trained_to(4096) == "the model was trained to 4,096" and trained_to(4096) in NOTE
    assert past_context_note(4097, 4096) is not None and past_context_note(4096, 4096) is None
    assert past_context_note(10**6, 0) is None  # unknown context: nothing said


def test_the_cli_table_and_json_carry_the_line():
    runner = CliRunner()
    args = ["estimate", "--model", LLAMA2, "--method", "qlora", "--seq-len", "8192"]
    d = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert NOTE in d["assumptions"]
    text = runner.invoke(app, args, env={"COLUMNS": "400"}).output
    assert NOTE in text
    fitted = runner.invoke(app, ["fit", "--model", LLAMA2, "--method", "qlora", "--seq-len", "8192", "--gpu",
                                 "h100-sxm"], env={"COLUMNS": "400"}).output
    assert "(the model was trained to 4,096)" in fitted


def test_the_line_has_its_portuguese():
    assert untranslated([NOTE]) == []
    assert to_pt(NOTE).startswith("seq_len 8192 ultrapassa o contexto do modelo (foi treinado até 4096 tokens")
