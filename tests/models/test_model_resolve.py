"""resolve_model: catalog ids and aliases, release suffixes, local config files, the Hub (mocked)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from vramfit.errors import ModelError
from vramfit.models import ResolvedModel, load_catalog, resolve_model

BY_ID = {e["id"]: e for e in load_catalog()}
ALIASES = [(alias, e["id"]) for e in load_catalog() for alias in e["aliases"]]


@pytest.fixture(autouse=True)
def offline_hub(request, monkeypatch):
    """No test reaches the network: by default the Hub answers as if offline."""
    if "real_huggingface_hub" not in request.node.name:
        def download(repo_id, filename, local_files_only=False):
            raise named_error("LocalEntryNotFoundError")("offline (test)")

        fake_hub(monkeypatch, download)


@pytest.mark.parametrize(("alias", "model_id"), ALIASES, ids=[a for a, _ in ALIASES])
def test_every_alias_resolves_to_its_entry(alias, model_id):
    resolved = resolve_model(alias)
    assert (resolved.id, resolved.origin, resolved.requested) == (model_id, "catalog", alias)
    assert any(model_id in note for note in resolved.notes)


def test_exact_id_case_insensitive():
    resolved = resolve_model("  META-LLAMA/llama-2-7B-HF ")
    assert isinstance(resolved, ResolvedModel)
    assert resolved.id == "meta-llama/Llama-2-7b-hf" and resolved.origin == "catalog"
    assert resolved.source == BY_ID["meta-llama/Llama-2-7b-hf"]["source"]
    assert resolved.config == BY_ID["meta-llama/Llama-2-7b-hf"]["config"]
    assert resolve_model("meta-llama/Llama-2-7b-hf").notes == ()


@pytest.mark.parametrize(
    ("name", "model_id"),
    [
        ("NousResearch/Llama-2-13b-chat-hf", "meta-llama/Llama-2-13b-hf"),
        ("SomeOrg/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
        ("Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
        ("Qwen/Qwen-14B-Chat-AWQ", "Qwen/Qwen-14B"),
        ("Qwen/Qwen2.5-14B-Instruct-FP8", "Qwen/Qwen2.5-14B"),
        ("unsloth/Qwen3-32B-bnb-4bit", "Qwen/Qwen3-32B"),
        ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mistralai/Mixtral-8x22B-v0.1"),
        ("unsloth/llama-3-8b-Instruct-bnb-4bit", "meta-llama/Meta-Llama-3-8B"),
        ("TheBloke/Llama-2-13B-chat-AWQ", "meta-llama/Llama-2-13b-hf"),
        ("google/gemma-2-9b-it-GPTQ", "google/gemma-2-9b"),
        ("tiiuae/falcon-40b-instruct-AWQ", "tiiuae/falcon-40b"),
    ],
)
def test_release_suffixes_resolve_to_the_architecture(name, model_id):
    resolved = resolve_model(name)
    assert resolved.id == model_id and resolved.origin == "catalog"
    assert "not in the catalog" in resolved.notes[0] and model_id in resolved.notes[0]


def test_suffix_stripping_never_changes_the_size():
    # not a catalog architecture: goes on to the (here unreachable) Hub instead of guessing
    with pytest.raises(ModelError, match="Hugging Face Hub is unreachable"):
        resolve_model("meta-llama/Llama-2-8b-chat-hf")


def write_config(path, model_id="Qwen/Qwen2.5-0.5B", **changes):
    cfg = dict(BY_ID[model_id]["config"], **changes)
    path.write_text(json.dumps(cfg))
    return cfg


def test_local_config_file(tmp_path):
    cfg = write_config(tmp_path / "config.json")
    resolved = resolve_model(str(tmp_path / "config.json"))
    assert resolved.origin == "config-file" and resolved.config == cfg
    assert resolved.spec.num_params == BY_ID["Qwen/Qwen2.5-0.5B"]["published_params"]
    assert resolved.source == str((tmp_path / "config.json").resolve())


def test_local_directory(tmp_path):
    write_config(tmp_path / "config.json", "microsoft/phi-2",
                 quantization_config={"quant_method": "gptq", "bits": 4})
    resolved = resolve_model(str(tmp_path))
    assert resolved.origin == "config-file" and resolved.id == str(tmp_path)
    assert resolved.spec.num_params == BY_ID["microsoft/phi-2"]["published_params"]
    assert "quant_method=gptq" in resolved.notes[0]


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelError, match="has no config.json"):
        resolve_model(str(tmp_path))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_is_not_called_a_directory():
    with pytest.raises(ModelError) as info:
        resolve_model("/dev/zero")
    assert str(info.value) == "model: /dev/zero is not a regular file (give a config.json file or a directory holding one)"


def test_missing_path():
    with pytest.raises(ModelError, match="no such file"):
        resolve_model("./does/not/exist/config.json")


def test_file_that_is_not_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{'model_type': 'llama',}")
    with pytest.raises(ModelError, match="is not valid JSON"):
        resolve_model(str(bad))
    bad.write_text("[1, 2]")
    with pytest.raises(ModelError, match="expected a JSON object"):
        resolve_model(str(bad))


def test_file_with_missing_fields(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ModelError, match="missing the required field 'num_hidden_layers'") as err:
        resolve_model(str(path))
    assert str(path) in str(err.value)


def test_file_with_unknown_model_type(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64}))
    with pytest.raises(ModelError, match="unsupported model_type 'mamba'") as err:
        resolve_model(str(path))
    assert "llama" in err.value.valid and str(err.value).count("valid values") == 1


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("lama-2-7b", "meta-llama/Llama-2-7b-hf"), ("qwen3-8", "Qwen/Qwen3-8B"),
     ("mixtral-8x7", "mistralai/Mixtral-8x7B-v0.1")],
)
def test_unknown_name_suggests_close_matches(name, suggestion):
    with pytest.raises(ModelError, match="did you mean") as err:
        resolve_model(name)
    assert suggestion in str(err.value)


@pytest.mark.parametrize("bad", ["", "   ", None, 7])
def test_empty_or_non_string(bad):
    with pytest.raises(ModelError):
        resolve_model(bad)


def test_generic():
    resolved = resolve_model("generic:7B")
    assert resolved.origin == "generic" and resolved.id == "generic-7B"
    assert abs(resolved.spec.num_params - 7e9) / 7e9 < 0.02
    assert resolved.config["model_type"] == "llama"
    with pytest.raises(ModelError, match="not a parameter count") as err:
        resolve_model("generic:lots")
    assert err.value.key == "params"


# --------------------------------------------------------------------------------------- Hub
def fake_hub(monkeypatch, download, reachable=True):
    module = types.ModuleType("huggingface_hub")
    module.hf_hub_download = download
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    # the TCP probe of the Hub endpoint: no network in tests, so say what the fake Hub would
    monkeypatch.setattr("vramfit.models.catalog._hub_reachable", lambda timeout_s=3.0: reachable)


def test_offline_machine_fails_fast_without_calling_the_hub(monkeypatch):
    calls = []

    def download(repo_id, filename, local_files_only=False):
        calls.append(local_files_only)
        raise FileNotFoundError("not cached")

    fake_hub(monkeypatch, download, reachable=False)
    with pytest.raises(ModelError, match="unreachable"):
        resolve_model("some-org/some-model")
    assert calls == [True]  # only the local cache was consulted


def test_hub_download(monkeypatch, tmp_path):
    cfg = write_config(tmp_path / "config.json", "Qwen/Qwen3-8B")
    calls = []

    def download(repo_id, filename, local_files_only=False):
        calls.append((repo_id, filename, local_files_only))
        if local_files_only:
            raise FileNotFoundError("not cached")
        return str(tmp_path / "config.json")

    fake_hub(monkeypatch, download)
    resolved = resolve_model("someone/my-qwen3-finetune")
    assert resolved.origin == "hub" and resolved.id == "someone/my-qwen3-finetune"
    assert resolved.config == cfg
    assert resolved.spec.num_params == BY_ID["Qwen/Qwen3-8B"]["published_params"]
    assert resolved.source == "https://huggingface.co/someone/my-qwen3-finetune/blob/main/config.json"
    assert calls == [("someone/my-qwen3-finetune", "config.json", True),
                     ("someone/my-qwen3-finetune", "config.json", False)]


def test_hub_cached_copy_needs_no_network(monkeypatch, tmp_path):
    write_config(tmp_path / "config.json", "Qwen/Qwen3-8B")

    def download(repo_id, filename, local_files_only=False):
        assert local_files_only, "went to the network although the config is cached"
        return str(tmp_path / "config.json")

    fake_hub(monkeypatch, download)
    assert resolve_model("someone/cached-model").origin == "hub"


def test_hub_unsupported_model_type(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    fake_hub(monkeypatch, lambda repo_id, filename, local_files_only=False: str(
        tmp_path / "config.json"))
    with pytest.raises(ModelError, match="config.json of google/flan-t5: unsupported model_type"):
        resolve_model("google/flan-t5")


def named_error(name):
    return type(name, (Exception,), {})


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("LocalEntryNotFoundError", "Hugging Face Hub is unreachable"),
        ("OfflineModeIsEnabled", "Hugging Face Hub is unreachable"),
        ("ConnectError", "Hugging Face Hub is unreachable"),
        ("RepositoryNotFoundError", "was not found on the Hugging Face Hub"),
        ("GatedRepoError", "is a gated repository"),
        ("RemoteEntryNotFoundError", "has no config.json"),
        ("ValueError", "ValueError: boom"),
    ],
)
def test_hub_errors(monkeypatch, error, message):
    exc = named_error(error)

    def download(repo_id, filename, local_files_only=False):
        raise exc("boom")

    fake_hub(monkeypatch, download)
    with pytest.raises(ModelError, match=message):
        resolve_model("someone/llama-2-7b-chat-hf-merged")


def test_hub_not_found_suggests(monkeypatch):
    def download(repo_id, filename, local_files_only=False):
        raise named_error("RepositoryNotFoundError")("404")

    fake_hub(monkeypatch, download)
    with pytest.raises(ModelError, match="did you mean: Qwen/Qwen2.5-7B"):
        resolve_model("Qwen/Qwen2.5-7B-Instruct-1M")


def test_hub_library_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ModelError, match="huggingface_hub is not installed"):
        resolve_model("someone/some-model")


def test_real_huggingface_hub_offline_message(monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match="Hugging Face Hub is unreachable"):
        resolve_model("vramfit-tests/no-such-model-offline")
