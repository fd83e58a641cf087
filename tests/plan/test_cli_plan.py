import json

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
M7 = ["--model", "meta-llama/Llama-2-7b-hf"]


def run(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_plan_json_and_table():
    r = run("plan", *M7, "--method", "qlora", "--effective-batch", "16", "--dataset-tokens", "10M", "--cards", "rtx4090,h100-sxm", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {p["gpu_id"] for p in d["plans"]} == {"rtx4090", "h100-sxm"} and d["cheapest"]
    t = run("plan", *M7, "--method", "qlora", "--effective-batch", "16", "--dataset-tokens", "10M", "--budget", "100")
    assert t.exit_code == 0 and "Plans that fit" in t.stdout and "Cheapest" in t.stdout and "Assumptions" in t.stdout


def test_plan_for_a_card_that_does_not_fit_offers_changes():
    r = run("plan", *M7, "--method", "full", "--precision", "bf16-mixed", "--gpu", "rtx4090", "--max-gpus", "1",
            "--effective-batch", "8")
    assert r.exit_code == 0, r.output
    assert "rtx4090: the scenario does not fit as given; changes ranked" in r.stdout and "ZeRO-Offload" in r.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["plan", *M7, "--gpu", "rtx9090"], "gpu: unknown GPU 'rtx9090'"),
        (["plan", *M7, "--cards", "h100-sxm,nope"], "gpu: unknown GPU 'nope'"),
        (["plan", *M7, "--budget", "-5"], "budget: must be a positive number of US dollars"),
        (["plan", *M7, "--dataset-tokens", "lots"], "dataset_tokens: must be a number like"),
        (["plan", *M7, "--mfu", "2"], "mfu: must be a fraction"),
        (["plan", *M7, "--export", "megatron"], "export: unknown engine 'megatron'"),
        (["sweep", *M7, "--vary", "colour=1,2"], "vary: unknown scenario key 'colour'"),
        (["fit", *M7], "gpu: fit needs the card"),
    ],
    ids=["unknown-gpu", "unknown-card", "negative-budget", "bad-tokens", "bad-mfu", "bad-engine", "bad-vary", "fit-without-gpu"],
)
def test_bad_input_exits_2_naming_the_field(args, fragment):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert fragment in " ".join(r.output.split())
    assert "Traceback" not in r.output


def test_unknown_gpu_suggests_close_ids_and_points_to_the_list():
    r = run("plan", *M7, "--gpu", "rtx9090")
    out = " ".join(r.output.split())
    assert "did you mean: rtx" in out and "rtx4090" in out and "`vramfit gpus` lists all" in out
    assert "valid values:" not in out  # not the whole catalog (issue 11: ~55 ids)


def test_malformed_gpu_file_exits_2(tmp_path):
    f = tmp_path / "my-gpus.csv"
    f.write_text("gpu_id,memory_gb\nmy-card,huge\n", encoding="utf-8")
    r = run("plan", *M7, "--gpus", str(f))
    assert r.exit_code == 2 and "gpus:" in r.output and "memory_gb must be a number" in " ".join(r.output.split())


def test_user_gpu_file_prices_are_used(tmp_path):
    f = tmp_path / "my-gpus.csv"
    f.write_text("gpu_id,price_usd_per_gpu_hr_low,price_usd_per_gpu_hr_high\nrtx4090,0.01,0.01\n", encoding="utf-8")
    r = run("plan", *M7, "--method", "qlora", "--gpus", str(f), "--cards", "rtx4090", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plans"][0]["usd_per_gpu_hour_low"] == 0.01


def test_plan_export_writes_files(tmp_path):
    r = run("plan", *M7, "--method", "qlora", "--cards", "h100-sxm", "--effective-batch", "8", "--export", "trl",
            "--export-dir", str(tmp_path), "--pick", "cheapest")
    assert r.exit_code == 0, r.output
    assert {p.name for p in tmp_path.iterdir()} == {"train.py", "train_config.yaml", "accelerate.yaml"}



def test_export_and_write_to_never_write_over_a_user_file(tmp_path):
    """The same export again is no loss and goes through; a file of the same name with other content (a user's own
    train_config.yaml in the default folder '.') stops the export before anything is written."""
    args = ["plan", *M7, "--method", "qlora", "--cards", "h100-sxm", "--effective-batch", "8", "--export", "trl",
            "--export-dir", str(tmp_path), "--pick", "cheapest"]
    assert run(*args).exit_code == 0 and run(*args).exit_code == 0
    mine = tmp_path / "train_config.yaml"
    mine.write_text("learning_rate: 1e-5  # mine\n")
    (tmp_path / "train.py").unlink()
    r = run(*args)
    assert r.exit_code == 2 and "already exists with other content; vramfit never writes over a file" in r.output
    assert mine.read_text() == "learning_rate: 1e-5  # mine\n" and not (tmp_path / "train.py").exists()


def test_fit_command():
    r = run("fit", *M7, "--method", "lora", "--gpu", "rtx4090", "--gradient-checkpointing", "full")
    assert r.exit_code == 0, r.output
    assert "largest micro-batch" in r.stdout and "longest sequence" in r.stdout
    j = json.loads(run("fit", *M7, "--gpu", "rtx4090", "--json").stdout)
    assert j["gpu_id"] == "rtx4090" and j["grid"]


def test_sweep_table_csv_and_charts(tmp_path):
    r = run("sweep", *M7, "--vary", "seq_len=512..4096", "--csv", "-")
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("seq_len,allocated_bytes,reserved_bytes,device_bytes") and len(lines) == 5
    assert run("sweep", *M7, "--vary", "method=*").exit_code == 0
    pytest.importorskip("matplotlib")
    pytest.importorskip("plotly")
    for ext in ("png", "svg", "html"):
        out = tmp_path / f"chart.{ext}"
        c = run("sweep", *M7, "--vary", "seq_len=1k..8k", "--chart", str(out), "--cards", "rtx4090,h100-sxm")
        assert c.exit_code == 0, c.output
        assert out.stat().st_size > 1000
    bad = run("sweep", *M7, "--vary", "seq_len=1k..8k", "--chart", str(tmp_path / "c.gif"))
    assert bad.exit_code == 2 and "chart: unknown chart format" in bad.output


def test_guide_table_command():
    r = run("guide-table")
    assert r.exit_code == 0, r.output
    assert "recomputed" in r.stdout and "12 bytes per parameter" in " ".join(r.stdout.split())
    assert json.loads(run("guide-table", "--json").stdout)["disagreements"]


@pytest.mark.parametrize("columns, left_out", [
    (80, "price basis, disk GB, $/M tok, mb × accum, ckpt"),
    (200, None),
])
def test_plan_table_keeps_to_the_terminal_width(columns, left_out):
    """A narrow terminal gets the columns that choose a plan (GPUs, memory, time, cost) at full width,
    and a line naming those left out, instead of a table of one-character columns."""
    r = runner.invoke(app, ["plan", *M7, "--method", "lora", "--dataset-tokens", "10M", "--top", "3"],
                      env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    table = [line for line in r.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= columns
    header = " ".join(line for line in table if line.startswith("┃"))  # headings may take two lines
    for col in ("GPUs", "GiB used/usable", "time", "cost"):
        assert f" {col} " in header
    if left_out is None:
        assert "left out at" not in r.stdout and " price basis " in header
    else:
        assert f"left out at {columns} columns: {left_out}" in r.stdout
        assert "price basis" not in header


def test_cheapest_and_fastest_lines_mark_an_unmeasured_path():
    """The summary lines carry the same † as the table: the fastest plan can sit below the rows shown."""
    args = ("plan", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--effective-batch", "16",
            "--dataset-tokens", "20M")
    d = json.loads(run(*args, "--json").stdout)
    text = " ".join(runner.invoke(app, [*args, "--top", "3"], env={"COLUMNS": "400"}).stdout.split())
    for label in ("cheapest", "fastest"):
        line = text.split(f"{label.capitalize()}:")[1].split("Disk for #1")[0].split("Fastest:")[0]
        marked = "† no published measurement behind its path" in line
        assert marked == (not d[label]["measured_path"])
    assert not d["fastest"]["measured_path"]  # 8 x B200 under DDP: no published case on that path


def test_json_stdout_stays_json_when_files_are_written(tmp_path):
    """plan --json --export and sweep --json --chart/--csv: what was written goes to stderr, stdout is one JSON."""
    r = run("plan", *M7, "--method", "full", "--cards", "a100-80gb-sxm", "--json", "--export", "fsdp",
            "--export-dir", str(tmp_path / "ex"))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plans"] and "wrote" in r.stderr and "run: accelerate launch" in r.stderr
    assert (tmp_path / "ex" / "accelerate.yaml").is_file()
    s = run("sweep", *M7, "--method", "lora", "--vary", "seq_len=512,1024", "--json",
            "--chart", str(tmp_path / "c.html"), "--csv", str(tmp_path / "s.csv"))
    assert s.exit_code == 0, s.output
    assert [p["value"] for p in json.loads(s.stdout)["points"]] == [512, 1024] and s.stderr.count("wrote") == 2
    t = run("plan", *M7, "--method", "full", "--cards", "a100-80gb-sxm", "--export", "fsdp",
            "--export-dir", str(tmp_path / "ex2"))
    assert "wrote" in t.stdout  # a table on stdout: the messages beside it


def test_a_plan_that_fits_only_by_paging_says_so_in_its_row():
    """89.0 / 79.2 GiB read as a plan over its card (a review); the row and the summary say the paged optimizer state
    makes it fit."""
    args = ["plan", "--model", "meta-llama/Llama-2-70b-hf", "--method", "full", "--seq-len", "2048", "--effective-batch",
            "8", "--dataset-tokens", "10M", "--cards", "h100-sxm", "--max-gpus", "8"]
    out = runner.invoke(app, args, env={"COLUMNS": "220"}, terminal_width=220).output
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    paged = [p for p in data["plans"] if p["required_bytes"] > p["limit_bytes"]]
    assert paged and "paged" in paged[0]["optimizer"]
    assert "(paging)" in out and "GiB needed per GPU (fits with paging)" in out
