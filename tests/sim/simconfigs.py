"""Tiny configs of real catalog architectures for the simulator tests (a module of its own:
`conftest` is a name several test folders share)."""

from __future__ import annotations

GiB = 2**30


def catalog_config(model_id: str) -> dict:
    from vramfit.models.catalog import resolve_model

    return dict(resolve_model(model_id).config)


def tiny(model_id: str, layers: int = 4, hidden: int = 128, vocab: int = 1024) -> dict:
    """The catalog config of ``model_id`` shrunk (same architecture, tiny sizes)."""
    cfg = catalog_config(model_id)
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg:  # Llama 4
        return {**cfg, "text_config": _shrink(dict(cfg["text_config"]), layers, hidden, vocab)}
    return _shrink(cfg, layers, hidden, vocab)


def _shrink(cfg: dict, layers: int, hidden: int, vocab: int) -> dict:
    heads = 4
    kv = 2 if cfg.get("num_key_value_heads", heads) not in (None, cfg.get("num_attention_heads")) else heads
    for key in ("num_hidden_layers", "n_layer"):
        if key in cfg:
            cfg[key] = layers
    for key in ("hidden_size", "n_embd"):
        if key in cfg:
            cfg[key] = hidden
    for key in ("num_attention_heads", "n_head"):
        if key in cfg:
            cfg[key] = heads
    if cfg.get("num_key_value_heads") is not None:
        cfg["num_key_value_heads"] = kv
    if "head_dim" in cfg:
        cfg["head_dim"] = hidden // heads
    for key in ("intermediate_size", "ffn_hidden_size", "n_inner"):
        if cfg.get(key) is not None:
            cfg[key] = 2 * hidden
    if cfg.get("moe_intermediate_size"):
        cfg["moe_intermediate_size"] = hidden
    cfg["vocab_size"] = vocab
    rope = cfg.get("rope_scaling")
    if isinstance(rope, dict) and rope.get("mrope_section"):  # Qwen2.5-VL: sections sum to head_dim / 2
        half = hidden // heads // 2
        cfg["rope_scaling"] = {**rope, "mrope_section": [half // 4, half * 3 // 8, half - half // 4 - half * 3 // 8]}
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(cfg.get(key), int) and cfg[key] >= vocab:
            cfg[key] = 0
    for key in ("layer_types",):
        cfg.pop(key, None)
    if isinstance(cfg.get("max_window_layers"), int):
        cfg["max_window_layers"] = layers
    if isinstance(cfg.get("sliding_window"), int):
        cfg["sliding_window"] = 4096
    return cfg


def titan_llama(folder, layers: int, hidden: int, vocab: int) -> str:
    """A tiny Llama as torchtitan runs it, written to ``folder``/config.json: torchtitan repeats k/v to every head
    before SDPA and unties the output layer, so with as many k/v heads as query heads and untied embeddings the
    transformers model runs the same tensors."""
    import json

    cfg = tiny("meta-llama/Llama-3.2-1B", layers=layers, hidden=hidden, vocab=vocab)
    cfg.update(num_key_value_heads=cfg["num_attention_heads"], tie_word_embeddings=False)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)
