"""Foreign files are read without running code from them, and every bad file gets one line naming the
problem: hostile pickles (with and without trust, library and CLI), truncated files, foreign safetensors
files, state dicts with missing, extra or misshapen weights."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from attnviz.cli import main
from models.errors import CheckpointError
from models.importers import convert, detect_format, safe_load
from models.importers.safe_load import load, pickle_globals, python3_name, refuse_hostile
from tests.test_import_nn_transformer import HEADS, SRC_WORDS, TGT_WORDS, Seq2SeqTransformer, write_vocab

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor")


class CreatesAFile:
    """What a hostile checkpoint does: unpickling it calls ``open(target, "w")``."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return open, (self.target, "w")


class RunsAShellCommand:
    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


class CallsEval:
    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return eval, (f"open({self.target!r}, 'w')",)


HOSTILE = {"open": CreatesAFile, "os.system": RunsAShellCommand, "eval": CallsEval}


@pytest.fixture(params=[f"{name}-{layout}" for name in HOSTILE for layout in ("torch.save", "pickle")])
def hostile(request, tmp_path):
    """A checkpoint-looking file (real weights around the payload) and the file its payload would create."""
    name, layout = request.param.rsplit("-", 1)
    target = tmp_path / "pwned"
    payload = {"model": {"weight": torch.ones(2, 2)}, "settings": HOSTILE[name](target)}
    path = tmp_path / ("model.pt" if layout == "torch.save" else "model.pkl")
    if layout == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=4))
    assert not target.exists()
    return path, target


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trusted"])
def test_a_hostile_pickle_is_refused_by_the_library(hostile, trust):
    path, target = hostile
    for attempt in (lambda: load(path, trust=trust), lambda: convert(path, trust=trust),
                    lambda: detect_format(path, trust=trust)):
        with pytest.raises(CheckpointError,
                           match=r"refused: unpickling it would call .*nothing from it was run") as error:
            attempt()
        assert "\n" not in str(error.value) and not target.exists()


@pytest.mark.parametrize("trust", [[], ["--trust"]], ids=["untrusted", "trusted"])
def test_a_hostile_pickle_is_refused_by_the_cli(hostile, trust, tmp_path, capsys):
    path, target = hostile
    output = tmp_path / "out.safetensors"
    code = main(["convert", str(path), "-o", str(output), *trust])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and "refused" in err and "Traceback" not in err
    assert not target.exists() and not output.exists()


def test_trusted_stubs_never_call_what_they_stand_for(tmp_path):
    """An unknown class in a trusted file becomes a stub: called by the pickle, it only stores its
    arguments (here: a foreign class whose reconstruction would write a file)."""
    target = tmp_path / "written"
    path = tmp_path / "model.pt"
    torch.save({"state": {"w": torch.zeros(1)}, "extra": WritesWhenRebuilt(target)}, path)
    loaded = load(path, trust=True)
    assert not target.exists()
    assert type(loaded["extra"]).__name__ == "WritesWhenRebuilt" and loaded["extra"].stub_args == (str(target), True)
    WritesWhenRebuilt(target, armed=True)  # what the real class would have done
    assert target.exists()


class WritesWhenRebuilt:
    def __init__(self, target, armed: bool = False):
        self.target = str(target)
        if armed:
            open(self.target, "w").close()

    def __reduce__(self):
        return WritesWhenRebuilt, (self.target, True)


@pytest.fixture(scope="module")
def tutorial_state(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("safety")
    model = Seq2SeqTransformer(4 + len(SRC_WORDS), 4 + len(TGT_WORDS), norm_first=False)
    return model.state_dict(), write_vocab(folder / "src.txt", SRC_WORDS), write_vocab(folder / "tgt.txt", TGT_WORDS)


def convert_state(state, path, vocabs):
    torch.save(state, path)
    return convert(path, settings={"nhead": HEADS, "norm_first": False}, src_vocab=vocabs[0], tgt_vocab=vocabs[1])


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_truncated_file_is_named(tutorial_state, tmp_path, legacy):
    path = tmp_path / "cut.pt"
    torch.save(tutorial_state[0], path, _use_new_zipfile_serialization=not legacy)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut.pt: .*truncated or damaged"):
        convert(path)


def test_a_foreign_safetensors_file_is_named(tmp_path, random_checkpoint):
    path = tmp_path / "foreign.safetensors"
    save_file({"backbone.conv1.weight": torch.zeros(2, 3), "head.bias": torch.zeros(2)}, str(path))
    with pytest.raises(CheckpointError, match=r"a safetensors file whose weights \(backbone.conv1.weight, head.bias, "
                                              r"\.\.\.\) match no format this version imports"):
        convert(path)
    with pytest.raises(CheckpointError, match="already an attnviz checkpoint"):
        convert(random_checkpoint)


def test_not_a_checkpoint_at_all(tmp_path):
    path = tmp_path / "notes.pt"
    path.write_text("hello\n")
    with pytest.raises(CheckpointError, match=r"notes.pt: not a PyTorch or pickle file"):
        convert(path)
    with pytest.raises(CheckpointError, match=r"holding list: no state dict"):
        torch.save([1, 2, 3], path)
        convert(path)


def test_missing_extra_and_misshapen_weights_are_named(tutorial_state, tmp_path):
    state, *vocabs = tutorial_state
    path = tmp_path / "model.pt"
    missing = {k: v for k, v in state.items() if k != "transformer.decoder.layers.1.linear2.bias"}
    with pytest.raises(CheckpointError, match=r"missing weights for the nn-transformer layout: "
                                              r"transformer.decoder.layers.1.linear2.bias$"):
        convert_state(missing, path, vocabs)
    extra = {**state, "classifier.weight": torch.zeros(3, 3), "classifier.bias": torch.zeros(3)}
    with pytest.raises(CheckpointError, match=r"unexpected weights, not part of the nn-transformer layout: "
                                              r"classifier.bias, classifier.weight$"):
        convert_state(extra, path, vocabs)
    misshapen = {**state, "generator.bias": torch.zeros(5)}
    with pytest.raises(CheckpointError, match=r"weight generator.bias has shape \(5,\); the hyper-parameters "
                                              r"imply \(12,\)"):
        convert_state(misshapen, path, vocabs)


def test_unknown_settings_and_formats_are_named(tutorial_state, tmp_path):
    state, *vocabs = tutorial_state
    path = tmp_path / "model.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"no setting named n_heads; this format takes nhead, norm_first"):
        convert(path, settings={"n_heads": 4}, src_vocab=vocabs[0], tgt_vocab=vocabs[1])
    with pytest.raises(CheckpointError,
                       match=r"--set norm_first: nn-transformer needs true or false here; got 'maybe'"):
        convert(path, settings={"nhead": 4, "norm_first": "maybe"}, src_vocab=vocabs[0], tgt_vocab=vocabs[1])
    with pytest.raises(CheckpointError, match=r"unknown format; known: marian, nn-transformer"):
        convert(path, format="tensor2tensor")


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_the_opcode_scan_finds_a_hostile_name_behind_tensors(tmp_path, protocol):
    """The first guard: every name a pickle would look up, read from its opcodes without running it."""
    data = pickle.dumps({"weights": [1.0, 2.0], "later": RunsAShellCommand(tmp_path / "x")}, protocol=protocol)
    names = [".".join(python3_name(*pair)) for pair in pickle_globals(data)]
    assert any(name.endswith(".system") for name in names), names
    with pytest.raises(CheckpointError, match="refused"):
        refuse_hostile(tmp_path / "scanned.pkl", data)


def test_the_unpickler_refuses_on_its_own(hostile, monkeypatch):
    """The second guard: with the opcode scan switched off, the unpicklers' find_class still refuses."""
    path, target = hostile
    monkeypatch.setattr(safe_load, "refuse_hostile", lambda path, data: None)
    for trust in (False, True):
        with pytest.raises(CheckpointError, match="refused: unpickling it would call"):
            load(path, trust=trust)
    assert not target.exists()


def test_tied_weights_given_different_tensors_are_refused_after_mapping(tmp_path):
    """The check after mapping: when our model ties two weights, giving them different source tensors would
    let the last one win unseen; a mapping that leaves a weight unequal to its source is refused too."""
    from models.nn.config import make_config
    from models.importers.common import Source, WeightMap
    from models.nn.transformer import TransformerSeq2Seq

    model = TransformerSeq2Seq(make_config("transformer-postln", 12, 12, d_model=8, heads=2, d_ff=16, encoder_layers=1,
                                           decoder_layers=1, share_embeddings=True, tie_output=True))
    state = {f"theirs.{name}": tensor.clone() + 1.0 for name, tensor in model.state_dict().items()}
    state["theirs.tgt_embedding.tokens.weight"] += 1.0  # the file's target table is its own
    weights = WeightMap(Source(tmp_path / "file.pt"), state, "test")
    for name in model.state_dict():
        weights.copy(name, f"theirs.{name}")
    with pytest.raises(CheckpointError, match=r"weights theirs.src_embedding.tokens.weight and "
                                              r"theirs.tgt_embedding.tokens.weight differ, but the converted model "
                                              r"ties src_embedding.tokens.weight and tgt_embedding.tokens.weight"):
        weights.load_into(model)
