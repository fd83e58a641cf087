"""One definition of "fits" (vramfit.plan.verdict), paged optimizer state, a pure estimator, the
GPU architecture column and the one node cap."""

import json

import pytest
from typer.testing import CliRunner

from vramfit import ScenarioError, estimate, gpus, parse_scenario
from vramfit.cli.main import app
from vramfit.estimate.constants import CUBLAS_WORKSPACE, CUBLAS_WORKSPACE_HOPPER, CUBLASLT_WORKSPACE
from vramfit.gpus import GPUS_PER_NODE, Arch, get_gpu, list_gpus, load_user_gpus
from vramfit.plan import fit, plan, sweep
from vramfit.plan.verdict import SAFETY_MARGIN, card_fit, limit_bytes, paging_bytes, with_fits
from vramfit.units import GiB

runner = CliRunner()

# issue 11 item 3: estimate said "fits (headroom 0.14 GiB)", sweep "fits", fit "does not fit"
EDGE = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "gradient_checkpointing": "full",
        "seq_len": 15360, "gpu": "l40s"}
# the QLoRA paper's 65B recipe (r=64, all linear, seq 512, checkpointing) on one 48 GB card
QLORA_65B = {"params": "65B", "method": "qlora", "lora_rank": 64, "gradient_checkpointing": "full",
             "seq_len": 512, "gpu": "rtxa6000"}


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("fastapi", reason="the web extra (fastapi) is not installed")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as c:
        yield c


def test_limit_is_usable_less_the_margin():
    g = get_gpu("l40s")
    assert SAFETY_MARGIN == 0.05
    assert limit_bytes(g) == int(45589 * 1024**2 * 0.95)
    assert limit_bytes(g, 0.0) == g.usable_bytes


def test_the_edge_case_sits_between_the_limit_and_the_usable_memory():
    r = estimate(EDGE)
    g = get_gpu("l40s")
    assert limit_bytes(g) < r.peak.required_bytes < g.usable_bytes  # why the faces disagreed before
    # released on an OOM retry: the segments of the no-grad MLP working set (three 15,360 x 14,336 bf16 tensors) and
    # of the loss's forward working set (15,360 x 128,256 bf16), cached, wholly free, while the loss gradient opens
    # segments of its own (segments rounded up to 2 MiB, kRoundLarge)
    seg = lambda n: -(-n // 2**21) * 2**21  # noqa: E731
    free = estimate({k: v for k, v in EDGE.items() if k != "gpu"}).peak  # no card: the whole cached figure
    assert free.required_bytes == r.peak.required_bytes
    assert free.device_bytes - free.required_bytes == 3 * seg(15360 * 14336 * 2) + seg(15360 * 128256 * 2)
    # on the L40S the run fits only after that release, so its reserved figure stops at the card (estimate.on_card)
    assert r.peak.required_bytes < g.usable_bytes == r.peak.device_bytes < free.device_bytes


def test_every_face_gives_the_same_verdict_on_the_edge_case(client):
    r = with_fits(estimate(EDGE))
    est = next(f for f in r.fits if f.gpu_id == "l40s")
    assert not est.fits and est.verdict == "does not fit"
    assert est.headroom_bytes == est.limit_bytes - r.peak.required_bytes < 0
    assert fit(EDGE, "l40s").fits is False
    assert sweep(EDGE, "seq_len", [15360], cards=["l40s"]).points[0].fits == {"l40s": False}
    assert sweep(EDGE, "seq_len", [2048], cards=["l40s"]).points[0].fits == {"l40s": True}
    report = plan(EDGE, gpu_ids=["l40s"], max_gpus=1)
    assert "l40s" in report.changes  # the planner offers changes only for a scenario that does not fit
    assert any(a.startswith("Fits = ") and "5% safety margin" in a for a in report.assumptions)
    web = client.post("/api/estimate", json=EDGE).json()
    assert next(f for f in web["fits"] if f["gpu_id"] == "l40s")["fits"] is False
    cli = json.loads(runner.invoke(app, ["estimate", *_flags(EDGE), "--json"]).output)
    assert next(f for f in cli["fits"] if f["gpu_id"] == "l40s")["fits"] is False
    text = runner.invoke(app, ["estimate", *_flags(EDGE)], env={"COLUMNS": "200"}).output
    row = next(line for line in text.splitlines() if line.startswith("│ L40S"))
    assert row.split("│")[4].strip() == "no" and "less a 5% safety margin" in text


def test_margin_zero_is_the_same_function():
    r = estimate(EDGE)
    assert card_fit(r, get_gpu("l40s"), 0.0).fits  # under the usable memory, over the 5 % limit


def _flags(sc: dict) -> list[str]:
    return [x for k, v in sc.items() for x in ("--" + k.replace("_", "-"), str(v))]


def test_paging_bytes_rule():
    assert paging_bytes(100, 30, 120) == 0
    assert paging_bytes(100, 30, 80) == 20
    assert paging_bytes(100, 30, 70) == 30
    assert paging_bytes(100, 30, 69) is None


def test_qlora_65b_fits_one_48gb_card_with_paging():
    paged = estimate({**QLORA_65B, "optimizer": "paged-adamw"})
    plain = estimate({**QLORA_65B, "optimizer": "adamw"})
    g = get_gpu("rtxa6000")
    assert paged.component("paged_optimizer_state") > 5 * GiB  # counted in the device figure, shown apart
    assert paged.peak.device_bytes == plain.peak.device_bytes
    assert not card_fit(plain, g).fits
    v = card_fit(paged, g)
    assert v.fits and v.paging_bytes == paged.peak.required_bytes - limit_bytes(g) > 0
    assert v.verdict == f"fits, with paging of {v.paging_bytes / GiB:,.2f} GiB optimizer state (slower)"
    assert v.headroom_bytes == 0
    f = fit({**QLORA_65B, "optimizer": "paged-adamw"}, "rtxa6000")
    assert f.fits and f.paging_bytes == v.paging_bytes and f.verdict == v.verdict
    text = runner.invoke(app, ["estimate", *_flags({**QLORA_65B, "optimizer": "paged-adamw"})],
                         env={"COLUMNS": "200"}).output
    assert "fits, with paging of" in text


@pytest.mark.parametrize("seq", [512, 2048, 8192])
@pytest.mark.parametrize("card", ["rtx4090", "rtxa6000", "a100-80gb-sxm"])
def test_paging_never_makes_a_verdict_worse_than_plain_adamw(seq, card):
    for plain, paged in (("adamw", "paged-adamw"), ("adamw-8bit", "paged-adamw-8bit")):
        a = card_fit(estimate(params="13B", method="qlora", seq_len=seq, optimizer=plain), get_gpu(card))
        b = card_fit(estimate(params="13B", method="qlora", seq_len=seq, optimizer=paged), get_gpu(card))
        assert b.fits or not a.fits
        assert b.headroom_bytes >= a.headroom_bytes


def _bad_user_file(tmp_path, monkeypatch):
    (tmp_path / "gpus.csv").write_text("gpu_id,memory_gb\nmy-card,lots\n", encoding="utf-8")
    monkeypatch.setenv("VRAMFIT_CONFIG_DIR", str(tmp_path))
    gpus.reset_user_gpus()


def test_estimator_reads_no_gpu_catalog(tmp_path, monkeypatch):
    _bad_user_file(tmp_path, monkeypatch)
    r = estimate(model="meta-llama/Llama-2-7b-hf", method="lora")  # raised before: the file is malformed
    assert r.peak.device_bytes > 0 and r.fits == ()
    assert parse_scenario({"params": "7B", "gpu": " H100-SXM "}).gpu == "h100-sxm"  # validation reads no CSV
    with pytest.raises(ScenarioError, match="my-card"):  # naming a card reads the catalog, and says what is wrong
        estimate(model="meta-llama/Llama-2-7b-hf", gpu="h100-sxm")


def test_unknown_gpu_is_refused_where_the_card_is_used():
    with pytest.raises(ScenarioError) as e:
        estimate(params="7B", gpu="h100-sxmm")
    assert e.value.key == "gpu" and "h100-sxm" in str(e.value)


def test_core_imports_no_models():
    """Core (scenario, units, errors) imports nothing above it, not even lazily inside a function."""
    import ast
    from pathlib import Path

    import vramfit

    root = Path(vramfit.__file__).parent
    for name in ("scenario.py", "choices.py", "fieldspec.py", "units.py", "errors.py", "stage_keys.py", "layout_keys.py"):
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        # stage_keys: the stage rows of the scenario table (issue 15), core like the table itself
        core = {"vramfit.errors", "vramfit.units", "vramfit.fieldspec", "vramfit.choices", "vramfit.stage_keys",
                "vramfit.scenario", "vramfit.layout_keys",  # issue 19: the model-parallel rows, core like stage_keys
                # issue 12: the named limits and the bounded readers import only errors, limits and stdlib
                "vramfit.limits", "vramfit.safe_input"}
        # known exception (issue 11 item 7): a framework's default precision is read lazily from its profile
        # and (issue 13) the DeepSpeed config is typed by estimate/deepspeed.py, which reads a file with the
        # config importer's safe loader
        lazy = {"vramfit.estimate.framework", "vramfit.estimate.deepspeed"} if name == "scenario.py" else set()
        assert {m for m in used if m.startswith("vramfit")} <= core | lazy, name


def test_architecture_comes_from_the_catalog_column(tmp_path):
    assert get_gpu("h100-sxm").architecture == "Hopper (GH100)"
    by_arch = {g.gpu_id for g in list_gpus() if g.arch is Arch.HOPPER}
    assert {"h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "gh200-96gb"} <= by_arch
    assert get_gpu("b200").arch is Arch.BLACKWELL and get_gpu("a100-80gb-sxm").arch is Arch.AMPERE
    f = tmp_path / "mine.csv"
    f.write_text("gpu_id,memory_gb,architecture\nmy-h100,80,hopper\nmy-a100,80,Ampere (GA100)\n", encoding="utf-8")
    load_user_gpus(f)
    hopper = 2 * (CUBLAS_WORKSPACE_HOPPER.value + CUBLASLT_WORKSPACE.value)
    other = 2 * (CUBLAS_WORKSPACE.value + CUBLASLT_WORKSPACE.value)
    assert estimate(params="1B", gpu="my-h100").component("workspaces") == hopper
    assert estimate(params="1B", gpu="h100-sxm").component("workspaces") == hopper
    assert estimate(params="1B", gpu="my-a100").component("workspaces") == other
    assert estimate(params="1B").component("workspaces") == other


def test_one_node_cap_shared_and_more_gpus_are_said_out_loud():
    from vramfit.plan import inputs

    assert inputs.GPUS_PER_NODE is GPUS_PER_NODE == 8
    eight = estimate(params="7B", method="full", num_gpus=8, parallelism="zero3")
    assert any("8 GPUs in one node" in a for a in eight.assumptions)
    many = estimate(params="7B", method="full", num_gpus=16, parallelism="zero3")
    assert not any("in one node with" in a for a in many.assumptions)
    note = next(a for a in many.assumptions if a.startswith("16 GPUs"))
    assert "more than one node holds (8)" in note and "not modelled yet" in note


def test_docs_sweep_example_is_what_the_command_prints():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text(encoding="utf-8")
    block = readme.split("--vary seq_len=1k..32k --cards rtx4090,l40s,h100-sxm\n", 1)[1].split("```", 1)[0]
    out = runner.invoke(app, ["sweep", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora",
                              "--gradient-checkpointing", "full", "--vary", "seq_len=1k..32k",
                              "--cards", "rtx4090,l40s,h100-sxm"], env={"COLUMNS": "100"}).output
    lines = [line.rstrip() for line in out.splitlines()]
    for line in block.splitlines():
        assert line.rstrip() in lines, line


def test_cli_says_how_it_treats_more_gpus_than_a_node():
    out = runner.invoke(app, ["estimate", "--params", "7B", "--method", "full", "--num-gpus", "16",
                              "--parallelism", "zero3"], env={"COLUMNS": "300"}).output
    assert "16 GPUs is more than one node holds (8)" in out and "in one node with" not in out
