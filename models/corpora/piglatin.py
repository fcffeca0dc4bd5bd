"""The Pig Latin demo's corpus of English words (the rule itself is models/text/piglatin.py).

The corpus holds distinct English words taken from the English side of a PAIRS.tsv file (the Bible
corpus), split by a hash of the word so a held-out word is never trained on, plus, in train only, short
phrases (2–4 consecutive words of a verse) made only of training words, so the model learns spaces::

    python -m models.corpora.piglatin --english data/en-es/train.tsv --out data/piglatin
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..errors import DataError
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
    splits["train"] = splits["train"] + training_phrases
    random.Random(seed).shuffle(splits["train"])  # words and phrases mixed, the same way every time
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:
        write_tsv(out / f"{name}.tsv", [(text, to_pig_latin(text)) for text in splits[name]])
    (out / "README.md").write_text(_readme(english_pairs, splits, len(training_phrases)), encoding="utf-8")
    return splits


def _readme(english_pairs: str | Path, splits: Mapping[str, list[str]], phrase_count: int) -> str:
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
        f"Built by `python -m models.corpora.piglatin` from the English side of `{english_pairs}`.",
        "One pair a line: `english<TAB>pig latin`, UTF-8.",
        "",
        "| split | lines | words | phrases |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {len(splits[name]):,} | {len(words[name]):,} | {len(splits[name]) - len(words[name]):,} |"
          for name in SPLITS],
        "",
        "Words are the distinct lower-cased words (letters, optionally hyphenated) of the English text, split",
        f"by a sha256 hash of the word ({TEST_SHARE:.0%} test, {VALID_SHARE:.0%} validation): no validation or",
        f"test word is ever trained on. Train also holds {phrase_count:,} phrases of 2–4 consecutive words of a",
        "verse, all of them training words, so the model learns that spaces separate words.",
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
    parser.add_argument("--english", type=Path, required=True,
                        help="a PAIRS.tsv whose source side is English (e.g. data/en-es/train.tsv)")
    parser.add_argument("--out", type=Path, required=True, help="folder for train/valid/test.tsv and README.md")
    parser.add_argument("--seed", type=int, default=0, help="which phrases are sampled, and the train order")
    args = parser.parse_args(argv)
    try:
        splits = build_corpus(args.english, args.out, args.seed)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.out}: " + ", ".join(f"{len(splits[name]):,} {name}" for name in SPLITS) + " lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
