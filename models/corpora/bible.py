"""English→Spanish verse pairs from two public-domain Bibles (the World English Bible and the
Reina-Valera 1909, aligned by verse), for the demo checkpoints.

The World English Bible (SWORD module ``engWEB2015eb``, Debian ``sword-text-web``) and the Reina-Valera
1909 (``spaRV1909eb``, Debian ``sword-text-sparv``) are read verse by verse with ``pysword``, cleaned of
their OSIS markup, paired by reference (book, chapter, verse) and split into train/validation/test by a
hash of the reference, so a verse's split never depends on what else the corpus holds::

    python -m models.corpora.bible --out data/en-es [--show 10]

Pairing by reference is not enough on its own: the Spanish module keeps the Hebrew chapter and verse
breaks in a few places (Numbers 13, 1 Samuel 24, Job 39–40, Jonah 2, 1 Kings 22, …) inside the KJV verse
grid, so there a run of verses sits one or more places away from the English. :func:`align_verses` finds
those runs and drops their chapters (see :func:`renumbered_chapters` and :func:`shifted_chapters`).
"""

from __future__ import annotations

import argparse
import functools
import html
import itertools
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..errors import DataError
from ..text.pairs import Pair
from ..text.splits import SPLITS, split_of

ENGLISH_MODULE = "engWEB2015eb"
SPANISH_MODULE = "spaRV1909eb"
DEBIAN_PACKAGES = {ENGLISH_MODULE: "sword-text-web", SPANISH_MODULE: "sword-text-sparv"}
SWORD_PATHS = (Path("/usr/share/sword"), Path.home() / ".sword")

TEST_SHARE = 0.045  # of ~29,000 pairs: ~1,300 test pairs, safely above the 1,000 the demo needs
VALID_SHARE = 0.035  # ~1,000
MAX_LENGTH_RATIO = 2.0  # characters, either way round; the 0.1% of pairs beyond it are misaligned

VerseRef = tuple[str, int, int]  # (OSIS book name, chapter, verse)
T = TypeVar("T")


# --- Cleaning: one verse of OSIS (or ThML, or GBF) markup → plain text ---------------------------------

# Elements whose content is not part of the verse: notes and cross references, headings, speaker labels
# (Song of Songs), variant readings. A canonical title (a psalm's superscription) is kept: the Spanish
# text prints it as part of verse 1.
_DROPPED_ELEMENTS = re.compile(
    r"<(note|speaker|rdg|catchWord|figure|index|scripRef|scripCom)\b[^>]*(?<!/)>.*?</\1\s*>"
    r"|<title\b(?![^>]*canonical=\"true\")[^>]*(?<!/)>.*?</title\s*>"
    r"|<(RF|TS)>.*?<(Rf|Ts)>",  # GBF footnote and heading
    re.DOTALL,
)
# An OSIS book ends in a closing milestone; whatever follows in the same entry is back matter (the WEB
# appends its whole glossary to Revelation 22:21).
_BOOK_END = re.compile(r"<div\b[^>]*\beID=\"[^\"]*\"[^>]*\btype=\"book\"[^>]*/>.*", re.DOTALL)
# Tags that separate what is on either side of them (poetry lines, paragraphs, list items); any other tag
# wraps or tags a word in place (``<w lemma=...>``, ``<q>``, ``<transChange>``, Strong's ``<G1520>``) and
# goes without a trace.
_BREAK_TAG_NAMES = frozenset(
    "l lg lb p br div chapter verse milestone item list row cell table head CM CL".lower().split())
# ``<w>`` wraps whole words, so where one touches another element without a space (``</w><transChange>``
# in the Reina-Valera) there is a word boundary; a bare ``preguntándo<transChange>le</transChange>`` is not.
_WORD_EDGE = re.compile(r"</w\s*>(?=<[^/])|</[A-Za-z]+\s*>(?=<w[\s>])")
_TAG = re.compile(r"</?\s*([A-Za-z][\w:-]*)[^<>]*>")
_NOTE_GAP = "\x00"  # where a note was: a space between two words, nothing before punctuation
_SPACE_BEFORE_CLOSER = re.compile(r"\s+(?=[,.;:!?)\]”’»])")
_EDITORIAL = re.compile(r"[¶§\[\]{}⸢⸣⌊⌋]")


def clean_verse(markup: str) -> str:
    """The plain text of one verse entry: markup, notes, headings, pilcrows and editorial brackets gone,
    whitespace (line breaks included) collapsed to single spaces. Entity references are decoded."""
    text = _BOOK_END.sub("", markup)
    text = _WORD_EDGE.sub(lambda match: match.group() + " ", text)
    text = _DROPPED_ELEMENTS.sub(_NOTE_GAP, text)
    text = _TAG.sub(_tag_replacement, text)
    text = re.sub(_NOTE_GAP + r"+(?=[\s,.;:!?)\]”’»]|$)", "", text).replace(_NOTE_GAP, " ")
    text = _decode_entities(_EDITORIAL.sub("", text))
    text = re.sub(r"\s+", " ", text)
    return _SPACE_BEFORE_CLOSER.sub("", text).strip()


def _tag_replacement(match: re.Match) -> str:
    return " " if match.group(1).lower() in _BREAK_TAG_NAMES else ""


def _decode_entities(text: str) -> str:
    return html.unescape(text) if "&" in text else text


_LETTERS = re.compile(r"[^\W\d_]+")
_SENTENCE_OPENING = re.compile(r"(?:^|[.!?:]\s+)[¿¡“‘(]*$")


def restore_drop_capitals(verses: Mapping[VerseRef, str]) -> dict[VerseRef, str]:
    """The Reina-Valera prints the opening word(s) of each chapter in capitals (``EN el principio``, ``DE
    DOCE años era Manasés``; in a psalm, after its title: ``… su hijo. ¡OH Jehová``). In verse 1 of each
    chapter the first run of such words gets back the casing each word has most often elsewhere in the
    text (``En el principio``, ``De doce años``), so a name stays a name (``JEHOVÁ`` → ``Jehová``)."""
    casing = _usual_casing(verses.values())
    return {ref: _recase_first_capitals(text, casing) if ref[2] == 1 else text
            for ref, text in verses.items()}


def _usual_casing(texts: Iterable[str]) -> dict[str, str]:
    counts: Counter[str] = Counter()
    for text in texts:
        for word in _LETTERS.findall(text)[1:]:  # a verse's first word is capitalised by position: no vote
            if not (len(word) > 1 and word.isupper()):
                counts[word] += 1
    casing: dict[str, str] = {}
    for word, _ in counts.most_common():  # the most frequent form comes first, so it wins
        casing.setdefault(word.lower(), word)
    return casing


def _recase_first_capitals(text: str, casing: Mapping[str, str]) -> str:
    first = next((m for m in _LETTERS.finditer(text) if len(m.group()) > 1 and m.group().isupper()), None)
    if first is None:
        return text
    run = []  # the capitalised words from ``first`` on, with only spaces, commas or semicolons between
    position = first.start()
    for match in _LETTERS.finditer(text, first.start()):
        if not match.group().isupper() or text[position:match.start()].strip(" ,;"):
            break
        run.append(match)
        position = match.end()
    pieces, cursor = [], 0
    for index, match in enumerate(run):
        usual = casing.get(match.group().lower(), match.group().lower())
        if index == 0 and _SENTENCE_OPENING.search(text[:match.start()]):
            usual = usual[0].upper() + usual[1:]
        pieces += [text[cursor:match.start()], usual]
        cursor = match.end()
    return "".join(pieces) + text[cursor:]


_SUBSCRIPTION = re.compile(r"(?<=Amén\.) [^.]*\b(?:[Ee]scrita|[Ee]nviada)\b.*$")


def drop_subscriptions(verses: Mapping[VerseRef, str]) -> dict[VerseRef, str]:
    """The Reina-Valera ends each epistle from Romans to Hebrews with the old note of where it was written,
    after the closing ``Amén.`` of its last verse (``… Amén. Escrita de Roma con Epafrodito.``): not part of
    the verse, and absent from the English. Dropped there."""
    last_verses = {ref[0]: ref for ref in verses}  # canon order: the last one seen of a book is its last
    return {ref: _SUBSCRIPTION.sub("", text) if last_verses[ref[0]] == ref else text
            for ref, text in verses.items()}


# --- Reading the SWORD modules -----------------------------------------------------------------------


@dataclass(frozen=True)
class SwordText:
    """One Bible module: its name, description and version (from its ``.conf``) and the raw markup of each
    verse, in canon order."""

    name: str
    description: str
    version: str
    verses: dict[VerseRef, str]


def read_bibles(names: Sequence[str] = (ENGLISH_MODULE, SPANISH_MODULE),
                sword_paths: Sequence[Path] = SWORD_PATHS) -> dict[str, SwordText]:
    """The installed SWORD Bible modules ``names``; a :class:`DataError` naming the Debian packages to
    install when any is missing (or the ``pysword`` package to install when that is)."""
    missing = [name for name in names if name not in installed_modules(sword_paths)]
    if missing:
        packages = " ".join(DEBIAN_PACKAGES.get(name, name) for name in missing)
        where = " or ".join(str(path) for path in sword_paths)
        raise DataError(f"SWORD module(s) {', '.join(missing)} not found under {where}; "
                        f"install them with: apt-get install {packages}")
    try:  # only here: cleaning and splitting do not need pysword
        from pysword.modules import SwordModules
    except ImportError:
        raise DataError("reading SWORD modules needs the Python package pysword: pip install pysword") from None
    modules = SwordModules([str(path) for path in sword_paths if (Path(path) / "mods.d").is_dir()])
    configs = modules.parse_modules()
    return {name: SwordText(name, configs[name].get("description", name), version=configs[name].get("version", "?"),
                            verses=_read_verses(name, modules.get_bible_from_module(name))) for name in names}


def installed_modules(sword_paths: Sequence[Path] = SWORD_PATHS) -> set[str]:
    """Names of the modules whose ``.conf`` (``[NAME]`` on a line of its own) is in a ``mods.d/`` folder."""
    names = set()
    for conf in (path for root in sword_paths for path in sorted(Path(root).glob("mods.d/*.conf"))):
        header = re.search(r"^\[([^\]\n]+)\]\s*$", conf.read_text(encoding="utf-8", errors="replace"), re.MULTILINE)
        if header:
            names.add(header.group(1))
    return names


def _read_verses(name: str, bible) -> dict[VerseRef, str]:
    _decompress_each_block_once(bible)
    verses: dict[VerseRef, str] = {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            refs = [(book.osis_name, chapter, verse)
                    for chapter, length in enumerate(book.chapter_lengths, start=1)
                    for verse in range(1, length + 1)]
            texts = list(bible.get_iter(books=book.name, clean=False))
            if len(texts) != len(refs):  # pysword skips nothing today; a silent shift would be far worse
                raise DataError(f"{name}: {book.name} gave {len(texts)} verse entries for {len(refs)} verses")
            verses.update(zip(refs, texts))
    return verses


def _decompress_each_block_once(bible) -> None:
    """pysword inflates a whole compressed block (a book, in these modules) for every verse it returns,
    which makes one Bible take a minute; remembering the last few blocks makes it a fraction of a second.
    (A private method: if a later pysword renames it, reading is slow again, never wrong.)"""
    inflate = getattr(bible, "_decompressed_text", None)
    if inflate is not None:
        bible._decompressed_text = functools.lru_cache(maxsize=4)(inflate)


# --- Aligning -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersePair:
    ref: VerseRef
    english: str
    spanish: str


def osis_ref(ref: VerseRef) -> str:
    """``Gen.1.1``: the reference as OSIS writes it, and the key the split is hashed from."""
    return f"{ref[0]}.{ref[1]}.{ref[2]}"


def align_verses(english: Mapping[VerseRef, str], spanish: Mapping[VerseRef, str],
                 ) -> tuple[list[VersePair], Counter[str]]:
    """The clean verse pairs of two Bibles (clean texts by reference), in the Spanish canon's order, and how
    many verses were left out for each reason."""
    dropped: Counter[str] = Counter()
    dropped["only in the English canon (deuterocanon, extra verses)"] = sum(ref not in spanish for ref in english)
    candidates = []
    for ref, target in spanish.items():
        source = english.get(ref)
        if source is None:
            dropped["only in the Spanish canon"] += 1
        elif not source or not target:
            dropped["empty on one side"] += 1
        else:
            candidates.append(VersePair(ref, source, target))
    better_elsewhere = neighbour_matches(candidates)
    unreliable = renumbered_chapters(english, spanish) | shifted_chapters(better_elsewhere)
    pairs = []
    for pair in candidates:
        if pair.ref[:2] in unreliable:
            dropped["in a chapter the two texts number differently"] += 1
        elif better_elsewhere.get(pair.ref, (0, 0.0))[1] >= 0.6:
            dropped["matches a neighbouring verse much better"] += 1
        elif not 1 / MAX_LENGTH_RATIO <= len(pair.spanish) / len(pair.english) <= MAX_LENGTH_RATIO:
            dropped["extreme length ratio"] += 1
        else:
            pairs.append(pair)
    return pairs, dropped


def renumbered_chapters(english: Mapping[VerseRef, str], spanish: Mapping[VerseRef, str],
                        ) -> set[tuple[str, int]]:
    """Chapters (book, chapter) around a verse that the Spanish text leaves empty while the English has it.

    Where the Reina-Valera's own numbering has fewer verses than the KJV grid it was poured into, the grid's
    last verses stay empty and the text runs on into the next chapter (English Numbers 12:16 is Spanish
    13:1), or an earlier verse holds two (2 Samuel 20:25–26). Either way the chapter and the next one are not
    trusted. (The English side is different: the WEB keeps a verse it omits, such as Acts 8:37, as an empty
    entry without renumbering anything.)
    """
    chapters = set()
    for (book, chapter, verse), text in spanish.items():
        if not text and english.get((book, chapter, verse)):
            chapters |= {(book, chapter), (book, chapter + 1)}
    return chapters


def shifted_chapters(better_elsewhere: Mapping[VerseRef, tuple[int, float]]) -> set[tuple[str, int]]:
    """Chapters where two consecutive verses both match the Spanish verse at the same offset better than
    their own (1 Chronicles 21:16–29, 1 Kings 22:44–53 are one verse off in the Spanish grid)."""
    return {(book, chapter) for (book, chapter, verse), (offset, _) in better_elsewhere.items()
            if better_elsewhere.get((book, chapter, verse + 1), (None,))[0] == offset}


def neighbour_matches(pairs: Sequence[VersePair]) -> dict[VerseRef, tuple[int, float]]:
    """For each verse whose English matches a Spanish verse one or two places away clearly better than its
    own Spanish verse: ``(offset, gain)``. A match is the share of the English words (those the lexicon
    knows, at least 4 of them) whose usual translation occurs in the Spanish verse; clearly is +0.3."""
    lexicon = translation_lexicon(pairs)
    spanish_words = {pair.ref: _words(pair.spanish) for pair in pairs}
    matches = {}
    for pair in pairs:
        translations = [lexicon[word] for word in _words(pair.english) if word in lexicon]
        if len(translations) < 4:
            continue  # too few known words to tell a match from chance
        book, chapter, verse = pair.ref
        own = _coverage(translations, spanish_words[pair.ref])
        best = (0, 0.3)
        for offset in (-2, -1, 1, 2):
            other = spanish_words.get((book, chapter, verse + offset))
            if other is not None and _coverage(translations, other) - own >= best[1]:
                best = (offset, _coverage(translations, other) - own)
        if best[0]:
            matches[pair.ref] = best
    return matches


def translation_lexicon(pairs: Sequence[VersePair], min_dice: float = 0.3) -> dict[str, str]:
    """English word → the Spanish word that most often shares a verse with it (Dice coefficient over
    verses, at least ``min_dice``). Function words (in more than 5% of verses) and rare words (fewer than
    3) take no part: they are noise for telling neighbouring verses apart."""
    english = [_words(pair.english) for pair in pairs]
    spanish = [_words(pair.spanish) for pair in pairs]
    english_counts = Counter(itertools.chain.from_iterable(english))
    spanish_counts = Counter(itertools.chain.from_iterable(spanish))
    ceiling = 0.05 * len(pairs)
    together: Counter[tuple[str, str]] = Counter()
    for source, target in zip(english, spanish):
        source_words = [word for word in source if 3 <= english_counts[word] <= ceiling]
        target_words = [word for word in target if 3 <= spanish_counts[word] <= ceiling]
        together.update(itertools.product(source_words, target_words))
    best: dict[str, tuple[str, float]] = {}
    for (source_word, target_word), count in together.items():
        dice = 2 * count / (english_counts[source_word] + spanish_counts[target_word])
        if dice >= max(min_dice, best.get(source_word, ("", 0.0))[1]):
            best[source_word] = (target_word, dice)
    return {word: translation for word, (translation, _) in best.items()}


def _words(text: str) -> frozenset[str]:
    return frozenset(word.lower() for word in _LETTERS.findall(text))


def _coverage(translations: Sequence[str], words: frozenset[str]) -> float:
    return sum(translation in words for translation in translations) / len(translations)


# --- Splitting and writing ----------------------------------------------------------------------------


def split_by_hash(items: Iterable[T], key: Callable[[T], str], valid_share: float = VALID_SHARE,
                  test_share: float = TEST_SHARE) -> dict[str, list[T]]:
    """``items`` sorted into ``SPLITS`` by :func:`models.text.splits.split_of` of ``key(item)``, each keeping
    their order."""
    splits: dict[str, list[T]] = {name: [] for name in SPLITS}
    for item in items:
        splits[split_of(key(item), valid_share, test_share)].append(item)
    return splits


_LINE_BREAKS = frozenset("\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def write_tsv(path: str | Path, pairs: Iterable[Pair]) -> int:
    """Write ``source<TAB>target`` lines (UTF-8, ``\\n``), the ``PAIRS.tsv`` format; returns the count.
    A side that is empty, padded or holds a tab or line break would not read back the same: DataError."""
    lines = []
    for number, (source, target) in enumerate(pairs, start=1):
        for text in (source, target):
            if not text or text != text.strip() or _LINE_BREAKS.intersection(text):
                raise DataError(f"{path}: pair {number} cannot be written as one TSV line: {text!r}")
        lines.append(f"{source}\t{target}\n")
    Path(path).write_text("".join(lines), encoding="utf-8")
    return len(lines)


# --- The corpus --------------------------------------------------------------------------------------


def build_corpus(out: str | Path, sword_paths: Sequence[Path] = SWORD_PATHS) -> dict[str, list[VersePair]]:
    """Read the two Bibles from the SWORD library and :func:`write_corpus` them into ``out``."""
    bibles = read_bibles((ENGLISH_MODULE, SPANISH_MODULE), sword_paths)
    return write_corpus(out, bibles[ENGLISH_MODULE], bibles[SPANISH_MODULE])


def write_corpus(out: str | Path, english: SwordText, spanish: SwordText) -> dict[str, list[VersePair]]:
    """Clean, align and split two Bibles; write ``train.tsv``, ``valid.tsv``, ``test.tsv`` and
    ``README.md`` into ``out``. Returns the splits."""
    english_verses = {ref: clean_verse(markup) for ref, markup in english.verses.items()}
    spanish_verses = drop_subscriptions(restore_drop_capitals(
        {ref: clean_verse(markup) for ref, markup in spanish.verses.items()}))
    pairs, dropped = align_verses(english_verses, spanish_verses)
    splits, repeats = without_training_repeats(split_by_hash(pairs, lambda pair: osis_ref(pair.ref)))
    for name, count in repeats.items():
        dropped[f"{name} pair whose English is also a training verse"] = count
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:
        write_tsv(out / f"{name}.tsv", [(pair.english, pair.spanish) for pair in splits[name]])
    (out / "README.md").write_text(_readme(english, spanish, splits=splits, dropped=dropped), encoding="utf-8")
    return splits


def without_training_repeats(splits: Mapping[str, list[VersePair]],
                             ) -> tuple[dict[str, list[VersePair]], dict[str, int]]:
    """The splits without the validation and test pairs whose English is word for word a training verse
    too ("You shall not steal." is Exodus 20:15 and Deuteronomy 5:19), and how many each lost: a model
    must not be tested on what it was trained on."""
    seen = {pair.english for pair in splits["train"]}
    kept = {name: [pair for pair in pairs if name == "train" or pair.english not in seen]
            for name, pairs in splits.items()}
    return kept, {name: len(splits[name]) - len(kept[name]) for name in splits if name != "train"}


def _readme(english: SwordText, spanish: SwordText, splits: Mapping[str, list[VersePair]],
            dropped: Counter[str]) -> str:
    rows = [f"| {name} | {len(splits[name]):,} | "
            f"{_mean(len(pair.english.split()) for pair in splits[name]):.1f} | "
            f"{_mean(len(pair.spanish.split()) for pair in splits[name]):.1f} |" for name in SPLITS]
    reasons = [f"| {reason} | {count:,} |" for reason, count in dropped.items() if count]
    return "\n".join([
        "# English → Spanish Bible verses (attnviz demo corpus)",
        "",
        "Built by `python -m models.corpora.bible` from two public-domain SWORD modules:",
        f"`{english.name}` ({english.description}, version {english.version}) and",
        f"`{spanish.name}` ({spanish.description}, version {spanish.version}).",
        "One verse a line: `English<TAB>Spanish`, UTF-8.",
        "",
        "| split | pairs | English words per verse | Spanish words per verse |",
        "|---|---:|---:|---:|",
        *rows,
        "",
        "Cleaning: OSIS markup (Strong's numbers, word and quote tags), footnotes, cross references, section",
        "headings, speaker labels, pilcrows and editorial brackets removed; psalm superscriptions kept (the",
        "Spanish prints them in verse 1); poetry lines joined with single spaces; the Spanish chapter-opening",
        "capitals (`EN el principio`) given their usual casing back and the notes closing the epistles",
        "(`Amén. Escrita de Roma …`) dropped. The Spanish keeps its 1909 spelling (`á`, `fué`, `Achâb`).",
        "",
        "Split: sha256 of the OSIS reference (`Gen.1.1`) below 0.045 is test, below 0.08 validation, the",
        "rest train; validation and test pairs whose English also occurs in train are left out.",
        "",
        "| left out | verses |",
        "|---|---:|",
        *reasons,
        "",
    ])


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.corpora.bible", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for train/valid/test.tsv and README.md")
    parser.add_argument("--sword-path", type=Path, action="append", metavar="DIR",
                        help="a SWORD library (the folder holding mods.d/); default: "
                             + ", ".join(str(path) for path in SWORD_PATHS))
    parser.add_argument("--show", type=int, default=0, metavar="N", help="print N random training pairs")
    args = parser.parse_args(argv)
    try:
        splits = build_corpus(args.out, args.sword_path or SWORD_PATHS)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.out}: " + ", ".join(f"{len(splits[name]):,} {name}" for name in SPLITS) + " pairs")
    shown = splits["train"]
    for pair in random.Random(0).sample(shown, min(args.show, len(shown))):
        print(f"\n{osis_ref(pair.ref)}\n  en: {pair.english}\n  es: {pair.spanish}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
