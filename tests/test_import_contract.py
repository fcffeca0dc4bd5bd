"""The importer contract: every registered format module is an ``Importer`` (the same names, parameters and return
types), its ``inspect`` answers one ``Inspection`` type, and every conversion ends in the one pipeline, whose
provenance has the same keys whatever the format."""

from __future__ import annotations

import inspect as signatures
import re
from pathlib import Path

import pytest
import torch

from models.importers import FORMATS, MissingSettingsError, convert, inspect
from models.importers.common import Inspection, Settings, Source
from models.importers.contract import PROVENANCE_KEYS, Converted, Importer
from tests.test_import_nn_transformer import HEADS, SRC_WORDS, TGT_WORDS, Seq2SeqTransformer, write_vocab

DATA = Path(__file__).parent / "data"
IMPORTERS = Path(__file__).parents[1] / "models" / "importers"


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_module_keeps_the_importer_contract(name):
    module = FORMATS[name]
    assert isinstance(module, Importer) and module.NAME == name
    assert isinstance(module.ACCEPTED, dict) and all(isinstance(value, str) for value in module.ACCEPTED.values())
    for function in ("claims", "inspect", "convert"):
        theirs, declared = signatures.signature(getattr(module, function)), signatures.signature(getattr(Importer,
                                                                                                         function))
        assert list(theirs.parameters) == list(declared.parameters)[1:], function  # the protocol's, less self
        assert theirs.return_annotation == declared.return_annotation, function


def test_only_the_pipeline_builds_models_and_writes_provenance():
    """A format module describes its conversion; building, loading and the provenance record are the pipeline's."""
    for path in sorted(IMPORTERS.glob("*.py")):
        if path.name in ("contract.py", "__init__.py"):
            continue
        text = path.read_text(encoding="utf-8")
        for written in ("imported_from", "Checkpoint(", "Seq2Seq(", "check_against_weights(", "load_into(model"):
            assert written not in text, f"{path.name} writes {written}"
        assert not re.search(r"from \.hf_bart import", text), f"{path.name} imports a sibling format's helpers"


def test_inspect_answers_one_type_without_what_it_read(tmp_path):
    folder = DATA / "sockeye" / "transformer-preln"
    found = FORMATS["sockeye"].inspect(Source(folder), Settings({}, {}, "sockeye"))
    assert type(found) is Inspection and found.found is not None  # handed to convert
    answered = inspect(folder)
    assert type(answered) is Inspection and answered.found is None and answered.inferred == found.inferred


def test_a_question_for_the_user_holds_no_weights(nn_transformer):
    """The import dialog keeps the MissingSettingsError's inspection while it is open: the state dict stays out."""
    path, src_vocab, tgt_vocab = nn_transformer
    with pytest.raises(MissingSettingsError) as raised:
        convert(path, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    assert raised.value.inspection.found is None and set(raised.value.inspection.missing) == {"nhead", "norm_first"}


@pytest.fixture(scope="module")
def nn_transformer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("contract")
    torch.manual_seed(0)
    torch.save(Seq2SeqTransformer(4 + len(SRC_WORDS), 4 + len(TGT_WORDS), False).state_dict(), folder / "model.pt")
    return folder / "model.pt", write_vocab(folder / "src.txt", SRC_WORDS), write_vocab(folder / "tgt.txt", TGT_WORDS)


def test_provenance_has_one_shape_for_every_format(nn_transformer):
    path, src_vocab, tgt_vocab = nn_transformer
    checkpoints = {
        "nn-transformer": convert(path, settings={"nhead": HEADS, "norm_first": False}, src_vocab=src_vocab,
                                  tgt_vocab=tgt_vocab),
        "sockeye": convert(DATA / "sockeye" / "transformer-postln"),
        "fairseq transformer": convert(DATA / "fairseq" / "transformer-preln" / "checkpoint_last.pt"),
        "fairseq lstm": convert(DATA / "fairseq" / "lstm"),
    }
    for name, checkpoint in checkpoints.items():
        record = checkpoint.provenance["imported_from"]
        assert list(checkpoint.provenance) == ["imported_from"] and tuple(record) == PROVENANCE_KEYS, name
        assert Path(record["file"]).exists() and record["weights"] and record["tokenization"], name
        assert set(record["vocabularies"]) == {"src", "tgt"}, name
    nn_record = checkpoints["nn-transformer"].provenance["imported_from"]
    assert nn_record["weights"] == "model.pt" and nn_record["vocabularies"] == {"src": str(src_vocab),
                                                                               "tgt": str(tgt_vocab)}
    assert nn_record["supplied"] == {"nhead": HEADS, "norm_first": False} and nn_record["details"] == {}
    assert checkpoints["sockeye"].provenance["imported_from"]["weights"] == "params.best"


def test_the_pipeline_turns_a_description_into_a_checkpoint(nn_transformer):
    """The same conversion through the module and the pipeline by hand: the description holds everything."""
    from models.importers.contract import checkpoint_from

    path, src_vocab, tgt_vocab = nn_transformer
    module = FORMATS["nn-transformer"]
    settings = Settings({"nhead": HEADS, "norm_first": False}, module.ACCEPTED, module.NAME)
    described = module.convert(Source(path), settings, src_vocab=str(src_vocab), tgt_vocab=str(tgt_vocab))
    assert isinstance(described, Converted) and described.weights_file == path
    checkpoint = checkpoint_from(described, format_name=module.NAME, settings=settings)
    direct = convert(path, settings={"nhead": HEADS, "norm_first": False}, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    for (name, ours), theirs in zip(checkpoint.model.state_dict().items(), direct.model.state_dict().values()):
        assert torch.equal(ours, theirs), name
    assert checkpoint.provenance == direct.provenance
