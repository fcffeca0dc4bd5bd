"""The Pig Latin demos' corpora of English words (the rule itself is models/text/piglatin.py).

The corpus holds distinct English words, split by a hash of the word so a held-out word is never trained on,
plus, in train only, short phrases made only of training words, so the model learns spaces. The GRU demos' words
come from the English side of a PAIRS.tsv file (the Bible corpus, built from SWORD modules), their phrases are 2–4
consecutive words of a verse::

    python -m models.corpora.piglatin --english data/en-es/train.tsv --out data/piglatin

The decoder-only demo's corpus is built from files in the repository alone: the whole-word pieces of the
English→Spanish demo's sentencepiece vocabulary (shared by both languages: Spanish words without accents are in
it too; the rule applies to letters alike) and the words of the demos' English inputs (demos.json); its phrases
are 2–4 training words drawn at random (seeded)::

    python -m models.corpora.piglatin --vocabulary resources/checkpoints/en-es-transformer.safetensors \
        --demos resources/checkpoints/demos.json --out data/piglatin-words
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..errors import AttnvizError, DataError
from ..storage.metadata import read_metadata
from ..text.pairs import read_pairs
from ..text.piglatin import to_pig_latin
from ..text.splits import SPLITS, split_of
from .bible import write_tsv

TEST_SHARE = 0.10  # of ~12,000 distinct words: ~1,200 test words
VALID_SHARE = 0.08  # ~1,000
PHRASE_SHARE = 0.3  # phrases added to train, per training word
PHRASE_LENGTHS = (2, 3, 4)
# A corpus word: ASCII letters, hyphenated parts allowed, not glued to an apostrophe (``don’t``) or digit.
_CORPUS_WORD = re.compile(r"(?<![\w’'-])[A-Za-z]+(?:-[A-Za-z]+)*(?![\w’'-])")
_CLAUSE_BREAK = re.compile(r"[^\w\s’'-]+")  # punctuation ends a phrase: phrases never span it
WORD_PIECE_START = "▁"  # sentencepiece's mark of a piece that begins a word


def corpus_words(texts: Iterable[str]) -> list[str]:
    """The distinct lower-cased words of ``texts`` (letters, optionally hyphenated), sorted."""
    return sorted({word.lower() for text in texts for word in _CORPUS_WORD.findall(text)})


def split_words(words: Iterable[str]) -> dict[str, list[str]]:
    """``words`` sorted into ``SPLITS`` by a hash of each word alone: a word's split never changes."""
    splits: dict[str, list[str]] = {name: [] for name in SPLITS}
    for word in words:
        splits[split_of(word, VALID_SHARE, TEST_SHARE)].append(word)
    return splits


def phrases(texts: Iterable[str], allowed: set[str], count: int, seed: int = 0) -> list[str]:
    """``count`` distinct phrases of 2–4 consecutive words within a clause of ``texts`` (lower-cased),
    every word of them in ``allowed``; a seeded sample, so the same inputs give the same phrases."""
    candidates = set()
    for text in texts:
        for clause in _CLAUSE_BREAK.split(text.lower()):
            words = clause.split()
            for length in PHRASE_LENGTHS:
                for start in range(len(words) - length + 1):
                    window = words[start:start + length]
                    if all(word in allowed for word in window):
                        candidates.add(" ".join(window))
    ordered = sorted(candidates)
    return random.Random(seed).sample(ordered, min(count, len(ordered)))


def build_corpus(english_pairs: str | Path, out: str | Path, seed: int = 0) -> dict[str, list[str]]:
    """Words (and training phrases) from the English side of ``english_pairs``; writes ``train.tsv``,
    ``valid.tsv``, ``test.tsv`` (``english<TAB>pig latin``) and ``README.md`` into ``out``. Returns the
    English side of each split."""
    texts = [source for source, _ in read_pairs(english_pairs)]
    splits = split_words(corpus_words(texts))
    if not splits["train"]:
        raise DataError(f"{english_pairs}: no English words to build a Pig Latin corpus from")
    training_phrases = phrases(texts, set(splits["train"]), count=round(PHRASE_SHARE * len(splits["train"])), seed=seed)
    return _write_corpus(out, splits, training_phrases, seed=seed,
                         described=(f"the English side of `{english_pairs}`", "consecutive words of a verse"))


def vocabulary_words(checkpoint: str | Path) -> list[str]:
    """The whole words among a checkpoint's source-side sentencepiece pieces (``▁`` then letters, optionally
    hyphenated), lower-cased, distinct and sorted; read from its header (no weights, no torch)."""
    from ..text.tokenizers import Tokenizer  # sentencepiece: only when a vocabulary is read

    try:
        tokenizer = Tokenizer.from_dict(read_metadata(checkpoint)["tokenizers"]["source"])
    except (KeyError, TypeError) as error:
        raise DataError(f"{checkpoint}: no source tokenizer in its metadata ({error})") from None
    pieces = (tokenizer.token(token_id) for token_id in range(tokenizer.vocab_size))
    return corpus_words(piece[1:] for piece in pieces
                        if piece.startswith(WORD_PIECE_START) and _CORPUS_WORD.fullmatch(piece[1:]))


def demo_inputs(records: str | Path) -> list[str]:
    """The inputs of every demo's recorded examples and references in ``demos.json`` (its English side)."""
    try:
        demos = json.loads(Path(records).read_text(encoding="utf-8"))
        return [text for record in demos.values() for part in ("examples", "references")
                for text in record.get(part, {})]
    except (OSError, ValueError, AttributeError) as error:
        raise DataError(f"{records}: not a readable demos.json ({error})") from None


def random_phrases(words: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """``count`` distinct phrases of 2–4 of ``words`` drawn at random (seeded: the same words and seed give the
    same phrases)."""
    rng, ordered, chosen = random.Random(seed), sorted(words), set()
    while len(ordered) >= 2 and len(chosen) < count:
        chosen.add(" ".join(rng.choice(ordered) for _ in range(rng.choice(PHRASE_LENGTHS))))
    return sorted(chosen)


def build_word_corpus(vocabulary: str | Path, demos: str | Path, out: str | Path,
                      seed: int = 0) -> dict[str, list[str]]:
    """The decoder-only demo's corpus: the whole-word pieces of ``vocabulary``'s tokenizer and the words of the
    demos' inputs in ``demos``, split by the hash of each word, training phrases of random training words; written
    as :func:`build_corpus` writes. Returns the English side of each split."""
    splits = split_words(set(vocabulary_words(vocabulary)) | set(corpus_words(demo_inputs(demos))))
    if not splits["train"]:
        raise DataError(f"{vocabulary}: no whole words in its vocabulary to build a Pig Latin corpus from")
    training_phrases = random_phrases(splits["train"], round(PHRASE_SHARE * len(splits["train"])), seed)
    source = (f"the whole-word pieces of `{Path(vocabulary).name}`'s sentencepiece vocabulary and the words of "
              f"the demos' inputs in `{Path(demos).name}`")
    return _write_corpus(out, splits, training_phrases, seed=seed, described=(source, "words drawn at random"))


def _write_corpus(out: str | Path, splits: dict[str, list[str]], training_phrases: list[str], *, seed: int,
                  described: tuple[str, str]) -> dict[str, list[str]]:
    """Train gets the phrases, mixed with its words in a seeded order; each split is written as
    ``english<TAB>pig latin`` lines, with a README (``described``: where the words and the phrases come from)."""
    splits["train"] = splits["train"] + training_phrases
    random.Random(seed).shuffle(splits["train"])  # words and phrases mixed, the same way every time
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:
        write_tsv(out / f"{name}.tsv", [(text, to_pig_latin(text)) for text in splits[name]])
    (out / "README.md").write_text(_readme(*described, splits, len(training_phrases)), encoding="utf-8")
    return splits


def _readme(source: str, phrase_origin: str, splits: Mapping[str, list[str]], phrase_count: int) -> str:
    words = {name: [text for text in splits[name] if " " not in text] for name in SPLITS}
    lengths = sorted({len(word) for name in SPLITS for word in words[name]})
    counted = {name: Counter(len(word) for word in words[name]) for name in SPLITS}
    histogram = [f"| {length} | " + " | ".join(f"{counted[name][length]:,}" for name in SPLITS) + " |"
                 for length in lengths]
    examples = ["impress", "team", "shopping", "queen", "rhythm", "yellow", "well-known",
                "the air conditioning is working"]
    return "\n".join([
        "# English → Pig Latin (attnviz demo corpus, character level)",
        "",
        f"Built by `python -m models.corpora.piglatin` from {source}.",
        "One pair a line: `english<TAB>pig latin`, UTF-8.",
        "",
        "| split | lines | words | phrases |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {len(splits[name]):,} | {len(words[name]):,} | {len(splits[name]) - len(words[name]):,} |"
          for name in SPLITS],
        "",
        "Words are the distinct lower-cased words (letters, optionally hyphenated) of that text, split",
        f"by a sha256 hash of the word ({TEST_SHARE:.0%} test, {VALID_SHARE:.0%} validation): no validation or",
        f"test word is ever trained on. Train also holds {phrase_count:,} phrases of 2–4 {phrase_origin},",
        "all of them training words, so the model learns that spaces separate words.",
        "",
        "The rule: " + "; ".join(f"`{text}` → `{to_pig_latin(text)}`" for text in examples) + ".",
        "",
        "Word lengths (letters and hyphens):",
        "",
        "| length | " + " | ".join(SPLITS) + " |",
        "|---:|" + "---:|" * len(SPLITS),
        *histogram,
        "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.corpora.piglatin", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--english", type=Path,
                        help="a PAIRS.tsv whose source side is English (e.g. data/en-es/train.tsv)")
    source.add_argument("--vocabulary", type=Path, help="an attnviz checkpoint whose source tokenizer's whole-word "
                                                        "pieces are taken (with --demos)")
    parser.add_argument("--demos", type=Path, help="a demos.json whose demos' inputs give more words (with "
                                                   "--vocabulary)")
    parser.add_argument("--out", type=Path, required=True, help="folder for train/valid/test.tsv and README.md")
    parser.add_argument("--seed", type=int, default=0, help="which phrases are sampled, and the train order")
    args = parser.parse_args(argv)
    if (args.vocabulary is None) != (args.demos is None):
        parser.error("--vocabulary and --demos go together")
    try:
        if args.english:
            splits = build_corpus(args.english, args.out, args.seed)
        else:
            splits = build_word_corpus(args.vocabulary, args.demos, args.out, seed=args.seed)
    except (DataError, AttnvizError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.out}: " + ", ".join(f"{len(splits[name]):,} {name}" for name in SPLITS) + " lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
