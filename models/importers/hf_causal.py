"""Hugging Face decoder-only language models: ``GPT2LMHeadModel``, ``LlamaForCausalLM``, ``MistralForCausalLM``,
``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``, ``Gemma2ForCausalLM`` folders (docs/checkpoint-formats.md#hf-causal).

Files: ``config.json``, ``model.safetensors``, a sharded ``model-0000N-of-0000M.safetensors`` set named by
``model.safetensors.index.json``, or ``pytorch_model.bin`` (read safely), ``tokenizer.json`` (run with the
``tokenizers`` library; prompts framed by its post-processor, as transformers frames them) and
``generation_config.json`` when present (its end tokens, a list or one, and bos come before config.json's).
Which projections have biases, and whether the output layer reads the token table, are read from the tensors the
file holds. What these families' code does that config.json does not say: Gemma 2 multiplies the token vectors by
√hidden and its RMS norms by ``1 + weight``; Qwen2 always has q/k/v biases; Qwen3 normalises each head's query
and key. Mixture-of-experts, state-space and multimodal models, and folders that name their own code
(``auto_map``), are refused: no code from a folder ever runs.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ..errors import CheckpointError
from ..nn.config import DecoderOnlyConfig
from ..storage.files import peek_json, read_json
from .common import Inspection, Settings, Source, WeightMap, read_safetensors
from .contract import Converted, Detection, Provenance, Tokenizers
from .formats import format_name
from .hf_common import HF_ACTIVATIONS, checked_family, read_hf_config, read_hf_weights, tokenizer_json_pair
from .layer_names import From, both, map_layers, map_names

NAME = format_name(__name__)  # its --format name, from the catalogue (formats.py)
DETECTION = Detection(folder=9, hf_folder=True)  # when detection asks this format (contract.py): after the others
MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma2")  # config.json's model_type
CLASSES = {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
           "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Gemma2ForCausalLM": "gemma2"}
ACCEPTED: dict[str, str] = {}  # config.json says everything

# Families refused by name, and what they are.
MIXTURE_OF_EXPERTS = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "jetmoe", "olmoe",
                      "granitemoe", "phimoe", "gpt_oss", "llama4_text")
STATE_SPACE = ("mamba", "mamba2", "falcon_mamba", "jamba", "rwkv", "zamba", "zamba2", "bamba", "falcon_h1")
MULTIMODAL = ("llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "mllama", "idefics", "idefics2", "idefics3",
              "paligemma", "gemma3", "llama4", "pixtral", "blip-2", "chameleon", "qwen2_audio")
SHARD_INDEX = "model.safetensors.index.json"


def claims(source: Source) -> bool:
    """A folder whose config.json names a causal language model (imported or refused with a reason)."""
    data = peek_json(source.path / "config.json") if source.path.is_dir() else None
    if not isinstance(data, dict):
        return False
    model_type = data.get("model_type")
    classes = data.get("architectures") if isinstance(data.get("architectures"), list) else []
    return (model_type in MODEL_TYPES + MIXTURE_OF_EXPERTS + STATE_SPACE + MULTIMODAL or "auto_map" in data
            or any(isinstance(name, str) and name.endswith(("ForCausalLM", "LMHeadModel")) for name in classes))


def _family(source: Source, path: Path, data: dict[str, Any]) -> str:
    """The family config.json describes, or one line refusing it."""
    model_type = data.get("model_type")
    if "auto_map" in data:
        named = ", ".join(str(value) for value in dict(data["auto_map"]).values())[:80] \
            if isinstance(data["auto_map"], dict) else "its own classes"
        raise CheckpointError(path, f"names its own model code (auto_map: {named}); attnviz never runs code from a "
                                    f"model folder")
    for kinds, what in ((MIXTURE_OF_EXPERTS, "a mixture-of-experts model"), (STATE_SPACE, "a state-space model"),
                        (MULTIMODAL, "a multimodal model")):
        if model_type in kinds:
            raise CheckpointError(path, f"{model_type} is {what}, which attnviz does not import (decoder-only model "
                                        f"types: {', '.join(MODEL_TYPES)})")
    if any(key in data for key in ("num_local_experts", "num_experts", "n_routed_experts")):
        raise CheckpointError(path, f"{model_type} is a mixture-of-experts model, which attnviz does not import")
    if "vision_config" in data or "audio_config" in data:
        raise CheckpointError(path, f"{model_type} is a multimodal model, which attnviz does not import")
    return checked_family(path, data, types=MODEL_TYPES, classes=CLASSES, imports="decoder-only",
                          model="the language model")


def inspect(source: Source, settings: Settings) -> Inspection:
    path, data = read_hf_config(source)
    family = _family(source, path, data)
    if not (source.path / "tokenizer.json").is_file():
        raise source.error("the folder has no tokenizer.json (attnviz reads a decoder-only model's tokenizer from it)")
    found = {**data, "family": family, "generation": read_json(source.path / "generation_config.json", missing={})}
    shown = {key: data[key] for key in ("model_type", "vocab_size", "hidden_size", "n_embd", "num_hidden_layers",
                                        "n_layer", "num_attention_heads", "n_head", "num_key_value_heads")
             if key in data}
    return Inspection(NAME, source.path, shown, accepted=ACCEPTED, found=found)


def convert(source: Source, settings: Settings, src_vocab: str | None, tgt_vocab: str | None) -> Converted:
    if src_vocab or tgt_vocab:
        raise source.error("a Hugging Face folder brings its own tokenizer (tokenizer.json); drop --src-vocab/"
                           "--tgt-vocab")
    inspection = inspect(source, settings)
    hf = inspection.found
    state, weights_file = _read_weights(source)
    prefix = _prefix(state, hf["family"])
    config = _our_config(source, hf, state, prefix=prefix)
    return Converted(config, state, weights_file=weights_file,
                     weights=partial(_map_weights, source, state, config=config, family=hf["family"], prefix=prefix,
                                     file=weights_file),
                     tokenizers=partial(language_model_tokenizers, source, config),
                     provenance=Provenance(source.path, inspection.inferred,
                                           vocabularies={"src": "tokenizer.json", "tgt": "tokenizer.json"},
                                           details={"family": hf["family"]}))


def _read_weights(source: Source) -> tuple[dict[str, Tensor], Path]:
    """One safetensors file, a sharded set named by its index, or pytorch_model.bin."""
    index = source.path / SHARD_INDEX
    if (source.path / "model.safetensors").is_file() or not index.is_file():
        return read_hf_weights(source)
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(index, "has no weight_map")
    state: dict[str, Tensor] = {}
    for name in sorted(set(map(str, weight_map.values()))):
        shard = source.path / name
        if Path(name).name != name or not shard.is_file():
            raise CheckpointError(index, f"names a shard {name[:60]!r} the folder does not hold")
        state.update(read_safetensors(shard))
    absent = sorted(set(weight_map) - set(state))
    if absent:
        raise CheckpointError(index, f"lists tensors no shard holds: {', '.join(absent[:3])}")
    return state, index


def _prefix(state: dict[str, Tensor], family: str) -> str:
    base = "transformer." if family == "gpt2" else "model."
    return base if any(key.startswith(base) for key in state) else ""


def _special_ids(source: Source, hf: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """bos, eos (the first end token), the other end tokens and pad: generation_config.json first, then
    config.json; pad falls back to the end token (these families have no padding token of their own)."""
    generation = hf["generation"] if isinstance(hf["generation"], dict) else {}

    def value(key: str) -> Any:
        found = generation.get(key)
        return hf.get(key) if found is None else found

    ends = value("eos_token_id")
    ends = [ends] if isinstance(ends, int) else list(ends or [])
    if not ends or not all(isinstance(end, int) and not isinstance(end, bool) and 0 <= end < vocab_size
                           for end in ends):
        raise source.error(f"no end token below the vocabulary size ({vocab_size}) in generation_config.json or "
                           f"config.json (eos_token_id: {str(value('eos_token_id'))[:40]})")
    bos, pad = value("bos_token_id"), value("pad_token_id")
    bos = bos if isinstance(bos, int) and 0 <= bos < vocab_size else ends[0]
    pad = pad if isinstance(pad, int) and 0 <= pad < vocab_size else ends[0]
    return {"bos_id": bos, "eos_id": ends[0], "stop_ids": tuple(ends[1:]), "pad_id": pad}


def _our_config(source: Source, hf: dict[str, Any], state: dict[str, Tensor], *, prefix: str) -> DecoderOnlyConfig:
    family = hf["family"]
    sizes = _gpt2_sizes(source, hf) if family == "gpt2" else _llama_sizes(source, hf, state, prefix=prefix)
    vocab_size = hf["vocab_size"]
    tied = _output_key(state, family, prefix) is None
    try:
        return DecoderOnlyConfig(arch="decoder-only", vocab_size=vocab_size, tie_output=tied, **sizes,
                                 **_special_ids(source, hf, vocab_size))
    except TypeError as error:
        raise source.error(f"config.json: {error}") from None


def _gpt2_sizes(source: Source, hf: dict[str, Any]) -> dict[str, Any]:
    if hf.get("scale_attn_by_inverse_layer_idx"):
        raise source.error("scale_attn_by_inverse_layer_idx is not supported")
    activation = HF_ACTIVATIONS.get(hf.get("activation_function", "gelu_new"))
    if activation is None:
        raise source.error(f"activation_function {hf.get('activation_function')!r} is not supported")
    d_model = hf["n_embd"]
    return {"d_model": d_model, "layers": hf["n_layer"], "heads": hf["n_head"],
            "d_ff": hf.get("n_inner") or 4 * d_model,
            "max_len": hf.get("n_positions", 1024), "positions": "learned", "norm_kind": "layer_norm",
            "norm_eps": float(hf.get("layer_norm_epsilon", 1e-5)), "activation": activation, "gated_ffn": False,
            "qkv_bias": True, "out_bias": True, "ffn_bias": True,
            "query_scalar": 0.0 if hf.get("scale_attn_weights", True) else 1.0}


def _rope(source: Source, hf: dict[str, Any]) -> dict[str, Any]:
    """RoPE's base and scaling from ``rope_parameters`` (transformers 5) or ``rope_theta``/``rope_scaling``."""
    parameters = dict(hf.get("rope_parameters") or {})
    scaling = dict(hf.get("rope_scaling") or {})
    theta = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
    merged = {**scaling, **parameters}
    partial = merged.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise source.error(f"partial_rotary_factor {str(partial)[:20]} is not supported (RoPE over whole heads only)")
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind == "default":
        return {"rope_theta": float(theta)}
    if kind != "llama3":
        raise source.error(f"rope scaling {str(kind)[:30]!r} is not supported (default, llama3)")
    return {"rope_theta": float(theta), "rope_scaling": "llama3", "rope_factor": float(merged["factor"]),
            "rope_low_freq_factor": float(merged["low_freq_factor"]),
            "rope_high_freq_factor": float(merged["high_freq_factor"]),
            "rope_original_max_len": int(merged["original_max_position_embeddings"])}


def _windows(hf: dict[str, Any], layers: int) -> dict[str, Any]:
    """The sliding window and which layers use it: ``layer_types`` where config.json lists them, else every layer
    for Mistral, Gemma 2's even layers, Qwen's layers from ``max_window_layers`` on with ``use_sliding_window``."""
    window, family = hf.get("sliding_window"), hf["family"]
    if family in ("qwen2", "qwen3") and not hf.get("use_sliding_window"):
        window = None
    if not window:
        return {}
    types = hf.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        pattern = "".join("L" if kind == "sliding_attention" else "G" for kind in types)
    elif family == "gemma2":
        pattern = "".join("G" if layer % 2 else "L" for layer in range(layers))
    elif family in ("qwen2", "qwen3"):
        start = hf.get("max_window_layers", layers)
        pattern = "".join("L" if layer >= start else "G" for layer in range(layers))
    else:
        pattern = ""
    return {"sliding_window": int(window), "window_layers": pattern} if "L" in pattern or not pattern else {}


def _llama_sizes(source: Source, hf: dict[str, Any], state: dict[str, Tensor], *, prefix: str) -> dict[str, Any]:
    family = hf["family"]
    gemma = family == "gemma2"
    act_key = "hidden_activation" if gemma and hf.get("hidden_activation") else "hidden_act"
    activation = HF_ACTIVATIONS.get(hf.get(act_key, "silu"))
    if activation is None:
        raise source.error(f"{act_key} {hf.get(act_key)!r} is not supported")
    layers, heads, d_model = hf["num_hidden_layers"], hf["num_attention_heads"], hf["hidden_size"]
    attention = f"{prefix}layers.0.self_attn."
    sizes = {"d_model": d_model, "layers": layers, "heads": heads,
             "kv_heads": hf.get("num_key_value_heads") or heads, "d_head": hf.get("head_dim") or d_model // heads,
             "d_ff": hf["intermediate_size"], "max_len": hf.get("max_position_embeddings", 2048),
             "positions": "rotary", **_rope(source, hf), "norm_kind": "rms",
             "norm_eps": float(hf.get("rms_norm_eps", 1e-6)), "activation": activation, "gated_ffn": True,
             "qkv_bias": f"{attention}q_proj.bias" in state, "out_bias": f"{attention}o_proj.bias" in state,
             "ffn_bias": f"{prefix}layers.0.mlp.gate_proj.bias" in state, "qk_norm": family == "qwen3",
             **_windows(hf, layers)}
    if gemma:
        sizes.update(norm_offset=1.0, scale_embedding=True, sandwich_norms=True,
                     query_scalar=float(hf.get("query_pre_attn_scalar") or sizes["d_head"]),
                     attention_softcap=float(hf.get("attn_logit_softcapping") or 0.0),
                     logit_softcap=float(hf.get("final_logit_softcapping") or 0.0))
    return sizes


def _output_key(state: dict[str, Tensor], family: str, prefix: str) -> str | None:
    """The output layer's own tensor, or None when the model reads the token table (none saved, or a saved
    copy equal to it)."""
    table = f"{prefix}wte.weight" if family == "gpt2" else f"{prefix}embed_tokens.weight"
    output = state.get("lm_head.weight")
    if output is None or (table in state and output.shape == state[table].shape
                          and (output.data_ptr() == state[table].data_ptr() or bool((output == state[table]).all()))):
        return None
    return "lm_head.weight"


def _map_weights(source: Source, state: dict[str, Tensor], *, config: DecoderOnlyConfig, family: str, prefix: str,
                 file: Path) -> WeightMap:
    weights = WeightMap(Source(file), state, NAME)
    if family == "gpt2":
        _map_gpt2(weights, prefix, config)
    else:
        _map_llama(weights, prefix, config)
    if config.tie_output:
        table = f"{prefix}wte.weight" if family == "gpt2" else f"{prefix}embed_tokens.weight"
        weights.ignore_copies(table, "lm_head.weight")
    else:
        weights.copy("output.weight", "lm_head.weight")
    return weights


def _transposed(weight: Tensor) -> Tensor:
    return weight.t().contiguous()


def _map_gpt2(weights: WeightMap, prefix: str, config: DecoderOnlyConfig) -> None:
    """GPT-2's Conv1D layers store ``[in, out]``: transposed into ours; ``c_attn`` holds q, k, v side by side."""
    d = config.d_model
    layer: dict[str, str | From] = {**both("attention_norm", "ln_1"), **both("feed_forward_norm", "ln_2")}
    for part, name in enumerate(("query", "key", "value")):
        layer[f"attention.{name}.weight"] = From("attn.c_attn.weight",
                                                 lambda w, part=part: w[:, part * d:(part + 1) * d].t().contiguous())
        layer[f"attention.{name}.bias"] = From("attn.c_attn.bias",
                                               lambda b, part=part: b[part * d:(part + 1) * d].clone())
    for mine, theirs in (("attention.output", "attn.c_proj"), ("feed_forward.linear_in", "mlp.c_fc"),
                         ("feed_forward.linear_out", "mlp.c_proj")):
        layer |= {f"{mine}.weight": From(f"{theirs}.weight", _transposed), f"{mine}.bias": f"{theirs}.bias"}
    map_layers(weights, layer, ours="layers.{layer}.", theirs=prefix + "h.{layer}.", count=config.layers)
    for index in range(config.layers):  # causal-mask buffers of old files
        weights.ignore(f"{prefix}h.{index}.attn.bias", f"{prefix}h.{index}.attn.masked_bias")
    map_names(weights, {"tokens.weight": f"{prefix}wte.weight", "positions.weight": f"{prefix}wpe.weight",
                        **both("norm", f"{prefix}ln_f")})


def _map_llama(weights: WeightMap, prefix: str, config: DecoderOnlyConfig) -> None:
    """Llama's layout (Mistral, Qwen2, Qwen3 and Gemma 2 name their layers alike)."""
    layer: dict[str, str] = {"attention_norm.weight": "input_layernorm.weight"}
    for name, theirs, bias in (("query", "q_proj", config.qkv_bias), ("key", "k_proj", config.qkv_bias),
                               ("value", "v_proj", config.qkv_bias), ("output", "o_proj", config.out_bias)):
        layer |= both(f"attention.{name}", f"self_attn.{theirs}", kinds=("weight", "bias") if bias else ("weight",))
    if config.qk_norm:
        layer |= {"attention.q_norm.weight": "self_attn.q_norm.weight",
                  "attention.k_norm.weight": "self_attn.k_norm.weight"}
    if config.sandwich_norms:
        layer |= {"post_attention_norm.weight": "post_attention_layernorm.weight",
                  "feed_forward_norm.weight": "pre_feedforward_layernorm.weight",
                  "post_feed_forward_norm.weight": "post_feedforward_layernorm.weight"}
    else:
        layer["feed_forward_norm.weight"] = "post_attention_layernorm.weight"
    for mine, theirs in (("linear_in", "gate_proj"), ("linear_gate", "up_proj"), ("linear_out", "down_proj")):
        layer |= both(f"feed_forward.{mine}", f"mlp.{theirs}", kinds=("weight", "bias") if config.ffn_bias
                      else ("weight",))
    map_layers(weights, layer, ours="layers.{layer}.", theirs=prefix + "layers.{layer}.", count=config.layers)
    for index in range(config.layers):
        weights.ignore(f"{prefix}layers.{index}.self_attn.rotary_emb.inv_freq")  # rebuilt from the config
    map_names(weights, {"tokens.weight": f"{prefix}embed_tokens.weight", "norm.weight": f"{prefix}norm.weight"})
    weights.ignore(f"{prefix}rotary_emb.inv_freq")


def language_model_tokenizers(source: Source, config: DecoderOnlyConfig) -> Tokenizers:
    """tokenizer.json for both sides: the prompt framed by its post-processor (Llama's bos first), the continuation
    decoded as it is. A tokenizer whose ids reach beyond the model's token table is refused."""
    path = source.path / "tokenizer.json"
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
        vocab = definition["model"]["vocab"]
        added = definition.get("added_tokens") or []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(path, f"cannot be read as a tokenizer.json ({error})") from None
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    ids += [token.get("id") for token in added if isinstance(token, dict)]
    largest = max((index for index in ids if isinstance(index, int)), default=-1)
    if largest >= config.vocab_size:
        raise CheckpointError(path, f"has token id {largest}, beyond the model's vocabulary of {config.vocab_size} "
                                    f"(the tokenizer does not belong to these weights)")
    source_side, target_side = tokenizer_json_pair(source, config, source_bos=config.bos_id)
    return Tokenizers(source_side, target_side, "tokenizer.json (the tokenizers library)")
