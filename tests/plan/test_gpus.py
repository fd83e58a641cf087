import pytest

from vramfit import gpus
from vramfit.errors import ScenarioError
from vramfit.gpus import MiB, get_gpu, list_gpus, load_user_gpus


def test_usable_memory_is_what_cuda_exposes_not_the_marketing_figure():
    h100 = get_gpu("h100-sxm")
    assert h100.memory_gb == 80  # marketing, 10^9 bytes
    assert h100.usable_bytes == 81082 * MiB  # torch total_memory, below nvidia-smi's 81559 MiB
    assert h100.usable_kind == "cuda" and "total_memory" in h100.usable_source


@pytest.mark.parametrize("gid", [g for g in gpus.USABLE])
def test_every_sourced_usable_figure_has_a_kind_and_a_source(gid):
    g = get_gpu(gid)
    assert g.usable_kind in ("cuda", "nvidia-smi") and g.usable_source
    assert 0.85 * g.memory_gb * 1e9 < g.usable_bytes < 1.1 * g.memory_gb * 1e9


def test_cards_without_a_source_fall_back_to_marketing_bytes():
    g = get_gpu("rtx4080")
    assert g.usable_kind == "marketing" and g.usable_bytes == 16 * 10**9


def test_every_card_keeps_its_sources_and_prices_are_ordered():
    for g in list_gpus():
        assert g.source, g.gpu_id
        if g.price_low is not None:
            assert g.price_low <= g.price_high and g.price_details


def test_unknown_gpu_names_the_field_and_suggests_at_most_five_ids():
    with pytest.raises(ScenarioError) as e:
        get_gpu("h100-sxmm")
    msg = str(e.value)
    assert e.value.key == "gpu" and "did you mean: h100-sxm" in msg and "`vramfit gpus` lists all" in msg
    suggested = msg.split("did you mean: ", 1)[1].split("?", 1)[0].split(", ")
    assert 1 <= len(suggested) <= 5 and len(set(suggested)) == len(suggested)
    assert "rtx3060-12gb" not in msg  # no dump of the whole catalog


def test_user_file_overrides_only_the_cells_it_fills(tmp_path):
    f = tmp_path / "prices.csv"
    f.write_text("gpu_id,price_usd_per_gpu_hr_low,price_usd_per_gpu_hr_high,price_details\n"
                 "h100-sxm,1.99,2.49,my cloud (read today)\n", encoding="utf-8")
    assert load_user_gpus(f) == ["h100-sxm"]
    g = get_gpu("h100-sxm")
    assert (g.price_low, g.price_high, g.price_details) == (1.99, 2.49, "my cloud (read today)")
    assert g.usable_bytes == 81082 * MiB and g.bf16_tflops == 989 and g.origin == str(f)


def test_user_file_adds_a_card_with_its_own_usable_memory(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text("gpu_id,name,memory_gb,usable_mib,bf16_fp16_dense_tflops,price_usd_per_gpu_hr_low\n"
                 "my-card,My Card,32,30000,100,0.5\n", encoding="utf-8")
    load_user_gpus(f)
    g = get_gpu("my-card")
    assert g.usable_bytes == 30000 * MiB and g.usable_kind == "user" and g.price_high == 0.5


def test_user_cards_added_for_a_block_only(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text("gpu_id,name,memory_gb,bf16_fp16_dense_tflops\nblock-card,Block Card,32,100\n", encoding="utf-8")
    with gpus.user_gpus_added(f) as ids:
        assert ids == ["block-card"] and get_gpu("block-card").memory_gb == 32
    with pytest.raises(ScenarioError, match="block-card"):
        get_gpu("block-card")


def test_config_directory_file_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMFIT_CONFIG_DIR", str(tmp_path))
    (tmp_path / "gpus.csv").write_text("gpu_id,price_usd_per_gpu_hr_low\nrtx4090,0.11\n", encoding="utf-8")
    gpus.reset_user_gpus()
    assert get_gpu("rtx4090").price_low == 0.11


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("gpu_id,memory_gb\nnew-card,lots\n", "line 2 (gpu_id 'new-card'): memory_gb must be a number, got 'lots'"),
        ("gpu_id,memory_gb\nnew-card,-8\n", "memory_gb must be a positive number"),
        ("gpu_id,price_usd_per_gpu_hr_low\nh100-sxm,-1\n", "price_usd_per_gpu_hr_low must be zero or more"),
        ("gpu_id,name\nnew-card,No memory\n", "memory_gb is required for a card not in the catalog"),
        ("gpu_id,memory_gbs\nnew-card,8\n", "unknown column 'memory_gbs'"),
        ("name,memory_gb\nx,8\n", "needs a header row with a gpu_id column"),
        ("gpu_id,price_usd_per_gpu_hr_low,price_usd_per_gpu_hr_high\nh100-sxm,3,2\n", "is above price_usd_per_gpu_hr_high"),
        ("gpu_id,memory_gb\n,8\n", "gpu_id is empty"),
        ("gpu_id,price_usd_per_gpu_hr_low\nh100-sxm,1.99\nH100-SXM,2.5\n",
         "line 3: card 'h100-sxm' is given again (first on line 2)"),
    ],
    ids=["not-a-number", "negative-memory", "negative-price", "new-card-without-memory", "unknown-column",
         "no-gpu-id-column", "low-above-high", "empty-id", "card-twice"],
)
def test_malformed_user_file_names_file_line_and_column(tmp_path, text, fragment):
    f = tmp_path / "bad.csv"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as e:
        load_user_gpus(f)
    assert e.value.key == "gpus" and fragment in str(e.value) and "bad.csv" in str(e.value)
    assert get_gpu("h100-sxm").price_low == 2.69  # the catalog is unchanged after a bad file


def test_missing_user_file():
    with pytest.raises(ScenarioError, match="gpus: file not found"):
        load_user_gpus("/nonexistent/gpus.csv")


def test_host_and_peer_links():
    assert get_gpu("h100-sxm").peer_gbs == 450 and get_gpu("h100-sxm").host_link_gbs == 63
    assert get_gpu("rtx4090").peer_gbs == get_gpu("rtx4090").host_link_gbs == 31.5
    assert get_gpu("rtx4060ti-16gb").host_link_gbs == 15.75  # x8 link


def test_a_new_memory_for_a_catalog_card_drops_its_published_usable_figure(tmp_path):
    """memory_gb 24 over the H100 kept its 79.2 GiB CUDA total: every fit verdict ignored the new memory."""
    f = tmp_path / "small.csv"
    f.write_text("gpu_id,memory_gb\nh100-sxm,24\n", encoding="utf-8")
    with gpus.user_gpus_added(f):
        g = get_gpu("h100-sxm")
        assert (g.memory_gb, g.usable_bytes, g.usable_kind) == (24, 24 * 10**9, "marketing")
        assert g.name == "H100 SXM5 80GB as 24 GB (small.csv)"  # not '80GB' beside 24 GB in every table
    same = tmp_path / "same.csv"
    same.write_text("gpu_id,memory_gb\nh100-sxm,80.0\n", encoding="utf-8")  # the same number, another spelling
    with gpus.user_gpus_added(same):  # the catalog's own memory: its published total stays
        assert get_gpu("h100-sxm").usable_bytes == 81082 * MiB
        assert get_gpu("h100-sxm").name == "H100 SXM5 80GB"
    named = tmp_path / "named.csv"
    named.write_text("gpu_id,name,memory_gb,usable_mib\nh100-sxm,My H100,40,38000\n", encoding="utf-8")
    with gpus.user_gpus_added(named):  # a name of the user's own is kept as written
        assert (get_gpu("h100-sxm").name, get_gpu("h100-sxm").usable_bytes) == ("My H100", 38000 * MiB)


def test_new_prices_without_details_do_not_keep_the_old_offers(tmp_path):
    f = tmp_path / "prices.csv"
    f.write_text("gpu_id,price_usd_per_gpu_hr_low,price_usd_per_gpu_hr_high\nh100-sxm,1.99,2.49\n", encoding="utf-8")
    with gpus.user_gpus_added(f):
        assert get_gpu("h100-sxm").price_details == f"set in {f}"


@pytest.mark.parametrize("text, words", [
    ("gpu_id,memory_gb,usable_mib\nmy-card,24,999999\n", r"usable_mib \(976.6 GiB\) is above memory_gb \(24 GB"),
    ("gpu_id,memory_gb,memory_gb\nx,30,40\n", "column 'memory_gb' is given twice"),
    ("gpu_id,memory_gb\nmy-card,1e308\n", "memory_gb must be at most 100,000 GB"),
    ("gpu_id,memory_gb,usable_mib\nmy-card,24,1e308\n", r"usable_mib \(.* GiB\) is above memory_gb"),
    ("gpu_id,memory_gb\n4090,26\n", "gpu_id is the catalog's name for rtx4090")])
def test_user_rows_that_would_silently_contradict_are_refused(tmp_path, text, words):
    f = tmp_path / "bad.csv"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError, match=words):
        load_user_gpus(f)
    assert get_gpu("4090").gpu_id == "rtx4090"


def test_estimate_and_gpus_take_a_gpu_file(tmp_path):
    """fit, sweep and plan took --gpus; estimate and gpus did not, so a card of your file could not be estimated."""
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    f = tmp_path / "mine.csv"
    f.write_text("gpu_id,name,memory_gb,bf16_fp16_dense_tflops\nmy-card,My Card,32,100\n", encoding="utf-8")
    out = CliRunner().invoke(app, ["estimate", "--gpus", str(f), "--gpu", "my-card", "--model", "Qwen/Qwen2.5-0.5B",
                                   "--json"])
    assert out.exit_code == 0, out.output
    assert '"my-card"' in out.output
    listed = CliRunner().invoke(app, ["gpus", "--gpus", str(f), "--json"])
    assert listed.exit_code == 0 and '"gpu_id": "my-card"' in listed.output


def test_the_table_calls_memory_gb_the_marketing_figure():
    """"80 GB" names the H100, not 80 x 10^9 bytes: its CUDA total is 85.0 x 10^9 (the review found the column headed
    "GB (10^9)" beside 79.18 usable GiB)."""
    from typer.testing import CliRunner

    from vramfit.cli.main import app
    from vramfit.gpus import get_gpu

    out = CliRunner().invoke(app, ["gpus"], env={"COLUMNS": "160"}, terminal_width=160).output
    assert "marketing GB" in out and "10^9" not in out
    h100 = get_gpu("h100-sxm")
    assert h100.memory_gb * 10**9 < h100.usable_bytes <= h100.memory_gb * 2**30
