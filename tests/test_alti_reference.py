"""ALTI+ (models/analysis/alti.py) against its authors' definition, transcribed here from the paper (Ferrando,
Gállego, Alastruey, Escolano and Costa-jussà 2022, §2–3) and checked for which terms their published code puts
where (stopes' ``transformer_wrapper.py``, the same as mt-upc/transformer-contributions-nmt).

Random-weight Hugging Face models (2 + 2 layers, non-zero biases everywhere, layer norms with gains and biases
far from 1 and 0) are built with ``transformers``, converted with attnviz's importer, and every block's map and
the rollout are computed twice: by attnviz, and below from the Hugging Face model's own tensors (its attention
weights, value projections, block inputs and outputs) in float64:

- a block's output y_i is split into one term per input token: T_i(x_j) = Σ_h α_ij^h v_j^h W_O^h, the value
  v_j = x_j W_V + b_V carrying the value bias (weighted by α, as in their code), plus the residual x_i: on its own
  token's term in self-attention, a term of its own in cross-attention (the target side's share);
- post-LN (Marian): LN(z) = γ ⊙ (z − μ(z)) / σ(z) + β is linear once μ and σ of the block's real input z are
  fixed, so each term goes through γ ⊙ (t − μ(t)) / σ(z); σ(z) = sqrt(var(z) + eps) as nn.LayerNorm computes it
  (where their code's 1/std(z + eps), the unbiased std, differs: the one departure attnviz keeps);
- the resultant y_i is the block's real output with its biases (the output projection's b_O and the norm's β),
  which no token's term carries: the authors' ``resultant``;
- c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), each row divided by its sum;
- rollout: the encoder's maps multiply; per decoder layer the joint map is [cross·R_enc, r ⊙ self] (r: the
  cross block's residual share of each row), and it is carried through the layers: source ← r ⊙ self · source +
  cross · R_enc, target ← r ⊙ self · target.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from models.analysis.contributions import alti, decoder_input  # noqa: E402
from models.importers import convert  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

BLOCK_TOLERANCE, ROLLOUT_TOLERANCE = 1e-4, 1e-5


def vary_norms(original, folder, *, cross_output: float = 1.0) -> None:
    """Every layer norm's gain and bias moved far from 1 and 0, the cross-attentions' W_O scaled by
    ``cross_output`` (so that the target side keeps a share), the model saved again into ``folder``."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, parameter in original.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
            elif "encoder_attn.out_proj.weight" in name:
                parameter.mul_(cross_output)
    original.save_pretrained(folder)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    from tests.test_import_marian import build_marian

    folder, original, _, _ = build_marian(tmp_path_factory.mktemp("opus-mt"))
    vary_norms(original, folder, cross_output=0.2)
    return original, convert(folder).model.eval(), [5, 9, 12, 7, 14, 3, 0], [7, 11, 6, 16, 0]


@pytest.fixture(scope="module")
def mbart(tmp_path_factory):
    from tests.test_import_hf_bart import build

    folder, original, tokenizer = build(tmp_path_factory.mktemp("mbart"), "mbart")
    vary_norms(original, folder)
    return original, convert(folder).model.eval(), tokenizer.encode("where is the dog").ids, [40, 71, 9, 55, 2]


# ----------------------------------------------------------------------------- the Hugging Face model's tensors


def hf_blocks(original, src: list[int], tgt_in: list[int]) -> dict[tuple[str, int], dict]:
    """Per (kind, layer) what the transcription needs, read from one eager forward of the Hugging Face model:
    the attention weights ``[H, Q, K]``, the value projection's output ``[K, H·D]``, the attention's output
    (after W_O and b_O) ``[Q, E]``, the norm's input and output ``[Q, E]``, and the attention's query input."""
    noted: dict[tuple[str, int], dict] = {}
    hooks = []
    stacks = {"enc_self": original.model.encoder.layers, "dec_self": original.model.decoder.layers,
              "cross": original.model.decoder.layers}
    names = {"enc_self": ("self_attn", "self_attn_layer_norm"), "dec_self": ("self_attn", "self_attn_layer_norm"),
             "cross": ("encoder_attn", "encoder_attn_layer_norm")}

    def keep(key, **named):
        def hook(_module, args, output):
            entry = noted.setdefault(key, {})
            for name, pick in named.items():
                entry[name] = pick(args, output).detach().double()[0]
        return hook

    for kind, layers in stacks.items():
        attention_name, norm_name = names[kind]
        for index, layer in enumerate(layers):
            attention, norm = getattr(layer, attention_name), getattr(layer, norm_name)
            hooks += [attention.register_forward_hook(keep((kind, index), attended=lambda a, o: o[0],
                                                           weights=lambda a, o: o[1])),
                      attention.v_proj.register_forward_hook(keep((kind, index), values=lambda a, o: o)),
                      norm.register_forward_hook(keep((kind, index), norm_input=lambda a, o: a[0],
                                                      norm_output=lambda a, o: o))]
            noted[kind, index] = {"attention": attention, "norm": norm}
    try:
        with torch.no_grad():
            original(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt_in]), output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    return noted


# ------------------------------------------------------------------------------------- the authors' formulas


def reference_block(block: dict, *, pre_ln: bool, cross: bool) -> np.ndarray:
    """One block's ALTI+ map: ``[Q, K]`` (self-attention) or ``[Q, K + 1]`` (cross: last column the residual)."""
    attention, norm = block["attention"], block["norm"]
    weights, values = block["weights"], block["values"]  # [H, Q, K], [K, H·D]
    heads, queries, keys = weights.shape
    w_out = attention.out_proj.weight.detach().double()  # [E, H·D]
    per_head = values.view(keys, heads, -1).transpose(0, 1)  # [H, K, D]
    moved = torch.einsum("hkd,ehd->hke", per_head, w_out.view(w_out.shape[0], heads, -1))  # v_j^h W_O^h
    terms = torch.einsum("hqk,hke->qke", weights, moved)  # T_i(x_j) before the residual and the norm
    if pre_ln:
        x = block["norm_input"]  # the block's input: the norm reads it, the residual adds it
        output = x + block["attended"]  # the block's real output, b_O included
    else:
        x = block["norm_input"] - block["attended"]  # z = x + Attention(x): the residual is the block's input
        z, output = block["norm_input"], block["norm_output"]
        gain = norm.weight.detach().double()
        sigma = torch.sqrt(z.var(dim=-1, unbiased=False, keepdim=True) + norm.eps)  # [Q, 1]

        def through_norm(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return gain * (t - t.mean(dim=-1, keepdim=True)) / scale

        terms = through_norm(terms, sigma[:, None])
        x = through_norm(x, sigma)
    if cross:
        terms = torch.cat([terms, x[:, None]], dim=1)
    else:
        terms = terms + torch.diag_embed(torch.ones(queries, dtype=x.dtype))[..., None] * x[:, None]
    length = output.abs().sum(dim=-1, keepdim=True)  # ‖y_i‖₁
    closeness = (length - (output[:, None] - terms).abs().sum(dim=-1)).clamp(min=0)
    return (closeness / closeness.sum(dim=-1, keepdim=True)).numpy()


def reference_alti(noted: dict, *, pre_ln: bool, layers: tuple[int, int]) -> dict:
    encoder_layers, decoder_layers = layers
    maps = {"enc_self": [], "dec_self": [], "cross": []}
    rollout = None
    for layer in range(encoder_layers):
        block = reference_block(noted["enc_self", layer], pre_ln=pre_ln, cross=False)
        maps["enc_self"].append(block)
        rollout = block if rollout is None else block @ rollout
    source = target = None
    for layer in range(decoder_layers):
        own = reference_block(noted["dec_self", layer], pre_ln=pre_ln, cross=False)
        mixed = reference_block(noted["cross", layer], pre_ln=pre_ln, cross=True)
        maps["dec_self"].append(own)
        maps["cross"].append(mixed)
        kept = mixed[:, -1:] * own  # r ⊙ self: the target side's mixing, scaled by the residual's share
        from_source = mixed[:, :-1] @ rollout
        source, target = (from_source, kept) if source is None else (kept @ source + from_source, kept @ target)
        total = source.sum(1, keepdims=True) + target.sum(1, keepdims=True)
        source, target = source / total, target / total
    return {"maps": maps, "source": source, "target": target}


def assert_alti_is_the_authors(original, model, src: list[int], out: list[int], *, pre_ln: bool) -> None:
    tgt_in = decoder_input(model, out)
    noted = hf_blocks(original, src, tgt_in)
    expected = reference_alti(noted, pre_ln=pre_ln, layers=(len(model.encoder_layers), len(model.decoder_layers)))
    ours = alti(model, src, out)
    assert ours.target.max() > 0.05 and ours.source.max() > 0.05  # both sides of the rollout are checked
    for kind in ("enc_self", "dec_self"):
        for layer, block in enumerate(expected["maps"][kind]):
            assert np.abs(ours.layers[kind][layer] - block).max() < BLOCK_TOLERANCE, (kind, layer)
    for layer, block in enumerate(expected["maps"]["cross"]):
        assert np.abs(ours.layers["cross"][layer] - block[:, :-1]).max() < BLOCK_TOLERANCE, ("cross", layer)
        assert np.abs(ours.cross_residual[layer] - block[:, -1]).max() < BLOCK_TOLERANCE, ("cross residual", layer)
    assert np.abs(ours.source - expected["source"]).max() < ROLLOUT_TOLERANCE
    assert np.abs(ours.target - expected["target"]).max() < ROLLOUT_TOLERANCE


# ------------------------------------------------------------------------------------------------------ tests


def test_a_post_ln_marian_models_alti_is_the_authors(marian):
    original, model, src, out = marian
    assert not model.decoder_layers[0].self_attention.pre_norm
    assert_alti_is_the_authors(original, model, src, out, pre_ln=False)


def test_a_pre_ln_mbart_models_alti_is_the_authors(mbart):
    original, model, src, out = mbart
    assert model.decoder_layers[0].self_attention.pre_norm and model.encoder_layers[0].self_attention.pre_norm
    assert_alti_is_the_authors(original, model, src, out, pre_ln=True)


def test_the_models_have_biases_and_norms_that_count(marian, mbart):
    """Every bias the definition is about is far from 0 and every norm far from the identity, in both models."""
    for original, model, src, out in (marian, mbart):
        noted = hf_blocks(original, src, decoder_input(model, out))
        for block in noted.values():
            attention, norm = block["attention"], block["norm"]
            assert attention.v_proj.bias.abs().min() > 0 and attention.out_proj.bias.abs().max() > 0.5
            assert (norm.weight - 1).abs().max() > 0.3 and norm.bias.abs().max() > 0.3
