"""The API's response models are generated from the result dataclasses, so they cannot drift."""

from vramfit import estimate
from vramfit.plan.verdict import with_fits
from vramfit.web.schemas import ComponentOut, EstimateOut, FitOut, ModelOut, PeakOut, PhaseOut


def test_response_models_have_exactly_the_result_keys():
    r = with_fits(estimate(model="meta-llama/Llama-2-7b-hf", method="qlora", optimizer="paged-adamw"))
    d = r.to_dict()
    # reserved_spread is written only when computed (estimate --dataset, vramfit.dataset.spread): optional in the model
    assert set(EstimateOut.model_fields) == set(d) | {"reserved_spread"}
    assert EstimateOut.model_fields["reserved_spread"].is_required() is False
    assert set(PeakOut.model_fields) == set(d["peak"])
    assert set(ModelOut.model_fields) == set(d["model"])
    assert set(ComponentOut.model_fields) == set(d["components"][0])
    assert set(PhaseOut.model_fields) == set(d["phases"][0])
    assert set(FitOut.model_fields) == set(d["fits"][0]) >= {"limit_bytes", "paging_bytes", "verdict"}
    back = EstimateOut.model_validate(d)
    assert back.peak.breakdown == d["peak"]["breakdown"] and back.fits[0].verdict == d["fits"][0]["verdict"]


def test_response_models_keep_their_schema_names():
    names = set(EstimateOut.model_json_schema()["$defs"])
    assert names == {"ComponentOut", "FitOut", "ModelOut", "PeakOut", "PhaseOut"}
