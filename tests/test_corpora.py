"""Demo corpora builders: the Pig Latin rule, Bible verse cleaning and alignment, hash splits, TSV round trips.

Nothing here needs the SWORD modules: the verse strings are written out below in the markup the two
modules really use (OSIS with Strong's ``<w>`` tags, notes, poetry milestones, ``<transChange>``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from models.corpora import bible, piglatin
from models.corpora.bible import (
    VersePair, align_verses, clean_verse, neighbour_matches, restore_drop_capitals, shifted_chapters, split_by_hash,
    without_training_repeats, write_tsv,
)
from models.text.splits import split_of
from models.text.pairs import read_pairs
from models.text.piglatin import to_pig_latin
from models.errors import DataError

# --- Pig Latin --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("english", "expected"), [
    ("impress", "impressway"),
    ("team", "eamtay"),
    ("shopping", "oppingshay"),
    ("queen", "eenquay"),
    ("rhythm", "ythmrhay"),
    ("the air conditioning is working", "ethay airway onditioningcay isway orkingway"),
    # y: a consonant only at the start
    ("yellow", "ellowyay"),
    ("my", "ymay"),
    ("style", "ylestay"),
    # qu inside a cluster
    ("square", "aresquay"),
    ("quiet", "ietquay"),
    # no vowel at all: the whole word is the cluster
    ("hmm", "hmmay"),
    ("shh", "shhay"),
    # hyphenated parts are words of their own
    ("well-known", "ellway-ownknay"),
    ("father-in-law", "atherfay-inway-awlay"),
    ("apple", "appleway"),
    ("a", "away"),
    ("i go to", "iway ogay otay"),
])
def test_pig_latin_rule(english, expected):
    assert to_pig_latin(english) == expected


def test_pig_latin_lower_cases_and_leaves_non_letters_in_place():
    assert to_pig_latin("The Queen,  working!") == "ethay eenquay,  orkingway!"


# --- Cleaning verse markup ------------------------------------------------------------------------------

# World English Bible, Genesis 1:1: Strong's <w> tags, and a footnote glued between two words.
GENESIS_1_1 = (
    '<w lemma="strong:H0430">In</w> <w lemma="strong:H0853">the</w> <w lemma="strong:H7225">beginning</w>, '
    '<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 </reference>The '
    'Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note><w lemma="strong:H1254">created</w> '
    '<w lemma="strong:H0853">the</w> <w lemma="strong:H8064">heavens</w> <w lemma="strong:H0430">and</w> '
    '<w lemma="strong:H0853">the</w> <w lemma="strong:H0776">earth</w>. <div eID="gen25" type="x-p"/>'
)
# Psalm 3:1-2: a canonical title (kept: the Spanish has it in verse 1), poetry lines on two "lines".
PSALM_3_1 = (
    '<div type="x-milestone" subType="x-preverse" sID="pv4877"/><title canonical="true" type="psalm">A Psalm '
    'by David, when he fled from Absalom his son.</title> <lg sID="gen7860"/> <l level="1" sID="gen7861"/>'
    '<div type="x-milestone" subType="x-preverse" eID="pv4877"/>Yahweh, how <w lemma="strong:H1732">my</w> '
    'adversaries <w lemma="strong:H1121">have</w> increased!<l eID="gen7861" level="1"/>\n'
    '<l level="2" sID="gen7862"/>Many <w lemma="strong:H1121">are</w> those who rise up against me. '
    '<l eID="gen7862" level="2"/>'
)
PSALM_3_2 = (
    '<l level="1" sID="gen7863"/><w lemma="strong:H7227">Many</w> there are who say of my soul,'
    '<l eID="gen7863" level="1"/> <l level="2" sID="gen7864"/>“There is no help for him in '
    '<w lemma="strong:H3068">God</w>.”<note placement="foot"><reference type="annotateRef">3:2 </reference>'
    'The Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note><l eID="gen7864" level="2"/> '
    '<l sID="gen7865" type="selah"/>Selah.<l eID="gen7865" type="selah"/>'
)


@pytest.mark.parametrize(("markup", "expected"), [
    (GENESIS_1_1, "In the beginning, God created the heavens and the earth."),
    (PSALM_3_1, ("A Psalm by David, when he fled from Absalom his son. Yahweh, how my adversaries have "
                "increased! Many are those who rise up against me.")),
    (PSALM_3_2, "Many there are who say of my soul, “There is no help for him in God.” Selah."),
    # a cross reference before a comma, a section heading, a speaker label
    (('<title type="section">The Fall</title>He said,<note type="crossReference"><reference>Exodus 30:12'
     '</reference></note> “Who?”'), "He said, “Who?”"),
    ('<speaker>Beloved</speaker> <lg sID="g1"/> <l level="1" sID="g2"/>Let him kiss me', "Let him kiss me"),
    # Reina-Valera: words the translators added sit between <w> tags with no space; a suffix does not
    (('<w lemma="strong:G5046">perfecta</w><transChange type="added">su</transChange>'
     '<w lemma="strong:G2041">obra</w>, <w lemma="strong:G0178">al pythón</w>, '
     'preguntándo<transChange type="added">le</transChange>.'), "perfecta su obra, al pythón, preguntándole."),
    # GBF Strong's numbers and footnote, ThML cross reference, pilcrow, editorial brackets, entities
    ("¶ In the beginning<WH07225> God<WH0430> <RF>Or, gods<Rf>created [the heavens] &amp; the earth.",
     "In the beginning God created the heavens & the earth."),
    ("Jesus<G2424> wept<G1145>.<scripRef passage='Jn 11:35'>Jn 11:35</scripRef><br/>Then", "Jesus wept. Then"),
    # whatever follows the end of a book (the WEB appends its glossary to Revelation 22:21) is not the verse
    (('Amen. <div eID="gen35575" osisID="Rev" type="book"/> <div sID="g" type="glossary"/> '
     '<title level="1" type="main">Glossary</title> Abba: Father.'), "Amen."),
    ('<div type="x-p" sID="g9"/> <chapter eID="Ps.3"/>', ""),
    # WEB puts a space between nested closing quotes; a sentence does not need it
    ("you say, ‘Who touched me?’ ”", "you say, ‘Who touched me?’”"),
    # a note between two bare words stands for a space, before punctuation for nothing (1 Maccabees 5:13)
    (('in the land of<note placement="foot"><reference type="annotateRef">5:13 </reference>Gr. '
      '<rdg type="alternate">Tob.</rdg></note>Tubias, a<note placement="foot">or, one</note>.'),
     "in the land of Tubias, a."),
])
def test_clean_verse(markup, expected):
    assert clean_verse(markup) == expected


def test_restore_drop_capitals_uses_each_words_usual_casing():
    verses = {
        ("Gen", 1, 1): "EN el principio crió Dios los cielos y la tierra.",
        ("Gen", 1, 2): "Y la tierra estaba desordenada y vacía, y el Espíritu de Dios en el abismo.",
        ("Gen", 2, 1): "Y DESPUÉS JEHOVÁ habló á Moisés, y después dijo: SANTIDAD A JEHOVÁ.",
        ("Ps", 3, 1): "Salmo de David, cuando huía. ¡OH Jehová, cuánto se han multiplicado!",
        ("Ps", 3, 2): "Tú, oh Jehová, eres escudo: AMÉN está en mayúsculas en medio del versículo.",
    }
    restored = restore_drop_capitals(verses)
    assert restored[("Gen", 1, 1)] == "En el principio crió Dios los cielos y la tierra."
    assert restored[("Gen", 2, 1)] == "Y después Jehová habló á Moisés, y después dijo: SANTIDAD A JEHOVÁ."
    assert restored[("Ps", 3, 1)] == "Salmo de David, cuando huía. ¡Oh Jehová, cuánto se han multiplicado!"
    assert restored[("Ps", 3, 2)] == verses[("Ps", 3, 2)]  # only a chapter's first verse has drop capitals


def test_drop_subscriptions_only_from_a_books_last_verse():
    verses = {
        ("Phil", 4, 22): "Todos los santos os saludan. Amén. Escrita de Roma, dice alguien.",
        ("Phil", 4, 23): "La gracia de nuestro Señor Jesucristo sea con todos vosotros. Amén. Escrita de Roma con "
                         "Epafrodito.",
        ("2Tim", 4, 22): "La gracia sea con vosotros. Amén. La segunda epístola á Timoteo, el cual fué el primer "
                         "obispo ordenado en Efeso, fué escrita de Roma, cuando Pablo fué presentado á César.",
        ("Rev", 22, 21): "La gracia de nuestro Señor Jesucristo sea con todos vosotros. Amén.",
    }
    kept = bible.drop_subscriptions(verses)
    assert kept == {("Phil", 4, 22): verses[("Phil", 4, 22)],
                    ("Phil", 4, 23): "La gracia de nuestro Señor Jesucristo sea con todos vosotros. Amén.",
                    ("2Tim", 4, 22): "La gracia sea con vosotros. Amén.",
                    ("Rev", 22, 21): verses[("Rev", 22, 21)]}


# --- Aligning -------------------------------------------------------------------------------------------


def test_align_verses_drops_missing_empty_renumbered_and_lopsided_verses():
    english = {("Gen", 1, v): f"English verse number {v} of chapter one." for v in range(1, 6)}
    english |= {("Gen", 2, v): f"English verse number {v} of chapter two." for v in range(1, 4)}
    english |= {("Gen", 3, 1): "English verse one of chapter three.", ("Tob", 1, 1): "Only in English."}
    spanish = {ref: text.replace("English", "Español") for ref, text in english.items() if ref[0] == "Gen"}
    spanish[("Gen", 1, 2)] = ""  # empty on the Spanish side, in the middle: chapter 1 and 2 renumbered
    english[("Gen", 3, 1)] = "Short."  # 6 characters against 36
    pairs, dropped = align_verses(english, spanish)
    assert pairs == []
    assert dropped["only in the English canon (deuterocanon, extra verses)"] == 1
    assert dropped["empty on one side"] == 1
    assert dropped["in a chapter the two texts number differently"] == 7
    assert dropped["extreme length ratio"] == 1

    spanish[("Gen", 1, 2)] = english[("Gen", 1, 2)].replace("English", "Español")
    english[("Gen", 3, 1)] = "English verse one of chapter three."
    pairs, dropped = align_verses(english, spanish)
    assert [pair.ref for pair in pairs] == [ref for ref in spanish]  # all kept, in order
    assert pairs[0] == VersePair(("Gen", 1, 1), english[("Gen", 1, 1)], spanish[("Gen", 1, 1)])


def _toy_bible(chapters: int = 6, verses: int = 30, seed: int = 0) -> list[VersePair]:
    """A parallel text whose Spanish words are the English ones in disguise (``sol`` ↔ ``sola``)."""
    rng = random.Random(seed)
    # 250 words, 8 a verse: each word in ~3% of the verses, so none counts as a function word
    vocabulary = sorted({"".join(rng.choice("bcdfglmnprst") + rng.choice("aeiou") for _ in range(3))
                         for _ in range(250)})
    pairs = []
    for chapter in range(1, chapters + 1):
        for verse in range(1, verses + 1):
            words = rng.sample(vocabulary, 8)
            pairs.append(VersePair(("Gen", chapter, verse), " ".join(words), " ".join(w + "a" for w in words)))
    return pairs


def test_a_chapter_one_verse_off_is_found_and_dropped():
    pairs = _toy_bible()
    spanish = {pair.ref: pair.spanish for pair in pairs}
    shifted = [VersePair(pair.ref, pair.english, spanish.get((pair.ref[0], 4, pair.ref[2] + 1), "fin"))
               if pair.ref[1] == 4 else pair for pair in pairs]
    assert shifted_chapters(neighbour_matches(pairs)) == set()
    matches = neighbour_matches(shifted)
    assert {ref[1] for ref in matches} == {4}
    assert {offset for offset, _ in matches.values()} == {-1}  # verse v's own Spanish now sits at v - 1
    assert shifted_chapters(matches) == {("Gen", 4)}


def test_a_lone_verse_that_matches_its_neighbour_is_dropped_alone():
    pairs = _toy_bible()
    english = {pair.ref: pair.english for pair in pairs}
    spanish = {pair.ref: pair.spanish for pair in pairs}
    english[("Gen", 3, 10)] = english[("Gen", 3, 11)]  # the Spanish verse 10 has other words entirely
    kept, dropped = align_verses(english, spanish)
    assert {pair.ref for pair in kept} == set(spanish) - {("Gen", 3, 10)}
    assert dropped["matches a neighbouring verse much better"] == 1


def test_only_a_run_of_verses_one_way_off_marks_a_chapter():
    matches = {("Gen", 1, 5): (1, 0.5),  # alone
               ("Gen", 2, 3): (1, 0.4), ("Gen", 2, 4): (1, 0.5),  # a run
               ("Gen", 3, 1): (-1, 0.5), ("Gen", 3, 2): (1, 0.5),  # two neighbours, two directions
               ("Gen", 4, 1): (2, 0.5), ("Gen", 4, 3): (2, 0.5)}  # not consecutive
    assert shifted_chapters(matches) == {("Gen", 2)}


# --- Splitting ------------------------------------------------------------------------------------------


def test_split_is_fixed_by_the_key_alone_and_disjoint():
    keys = [f"Gen.{chapter}.{verse}" for chapter in range(1, 101) for verse in range(1, 101)]
    splits = split_by_hash(keys, key=str)
    shuffled = keys[:]
    random.Random(1).shuffle(shuffled)
    again = split_by_hash(shuffled, key=str)
    assert {name: set(part) for name, part in splits.items()} == {name: set(part) for name, part in again.items()}
    assert sum(len(part) for part in splits.values()) == len(keys)
    assert not (set(splits["train"]) & set(splits["valid"]) or set(splits["train"]) & set(splits["test"])
                or set(splits["valid"]) & set(splits["test"]))
    assert len(splits["test"]) == pytest.approx(bible.TEST_SHARE * len(keys), rel=0.2)
    assert len(splits["valid"]) == pytest.approx(bible.VALID_SHARE * len(keys), rel=0.2)
    # Pinned: a change to the hashing would silently move verses between train and test of built corpora.
    shares = bible.VALID_SHARE, bible.TEST_SHARE
    assert [split_of(key, *shares) for key in ("Gen.1.1", "Gen.2.6", "Gen.3.19", "Gen.4.1", "Gen.4.4")] == \
        ["train", "valid", "test", "valid", "test"]
    assert split_of("x", valid_share=0.0, test_share=1.0) == "test"
    assert split_of("x", valid_share=1.0, test_share=0.0) == "valid"
    assert split_of("x", valid_share=0.0, test_share=0.0) == "train"


def test_pig_latin_corpus_never_trains_on_held_out_words(tmp_path):
    rng = random.Random(0)
    words = ["".join(rng.choice("bcdfglmnprstaeiouy") for _ in range(rng.randint(2, 9))) for _ in range(300)]
    verses = [" ".join(words[i:i + 6]) + f", the well-known word{'s' * (i % 7)} don’t." for i in range(300)]
    english = tmp_path / "en.tsv"
    write_tsv(english, [(verse, "x") for verse in verses])
    splits = piglatin.build_corpus(english, tmp_path / "pig")
    train_words = {word for text in splits["train"] for word in text.split()}
    held_out = set(splits["valid"]) | set(splits["test"])
    assert held_out and not train_words & held_out
    assert "don" not in train_words | held_out and "well-known" in train_words | held_out
    assert any(" " in text for text in splits["train"])  # phrases, made of training words only
    for name in bible.SPLITS:
        assert read_pairs(tmp_path / "pig" / f"{name}.tsv") == [(text, to_pig_latin(text))
                                                                 for text in splits[name]]
    again = piglatin.build_corpus(english, tmp_path / "pig-again")
    assert again == splits
    assert "| train |" in (tmp_path / "pig" / "README.md").read_text(encoding="utf-8")


def test_validation_and_test_never_repeat_a_training_verse():
    def pair(ref, english):
        return VersePair(ref, english, "x")
    splits = {"train": [pair(("Exod", 20, 15), "You shall not steal.")],
              "valid": [pair(("Deut", 5, 19), "You shall not steal."), pair(("Deut", 5, 20), "Other.")],
              "test": [pair(("Lev", 19, 11), "You shall not steal.")]}
    kept, dropped = without_training_repeats(splits)
    assert kept == {"train": splits["train"], "valid": splits["valid"][1:], "test": []}
    assert dropped == {"valid": 1, "test": 1}


def _markup(words: list[str]) -> str:
    return " ".join(f'<w lemma="strong:H{i:04d}">{word}</w>' for i, word in enumerate(words)) + "."


def test_write_corpus_end_to_end(tmp_path):
    """Two small Bibles in OSIS markup, as read from SWORD modules, to the three TSV files and README."""
    rng = random.Random(0)
    vocabulary = sorted({rng.choice("bdfglmnprst") + rng.choice("aeiou") + rng.choice("bdfglmnprst")
                         for _ in range(400)})
    english, spanish = {}, {}
    for chapter in range(1, 41):
        for verse in range(1, 31):
            words = rng.sample(vocabulary, 7)
            english[("Gen", chapter, verse)] = _markup(words) + '<note placement="foot">a note</note>'
            spanish[("Gen", chapter, verse)] = _markup([word.upper() if verse == 1 else word + "o"
                                                        for word in words])
    english[("Tob", 1, 1)] = _markup(["only", "english"])
    splits = bible.write_corpus(tmp_path / "en-es", bible.SwordText("EN", "English", "1", english),
                                bible.SwordText("ES", "Español", "2", spanish))
    assert sum(len(pairs) for pairs in splits.values()) >= 1190
    assert min(len(splits["valid"]), len(splits["test"])) > 20
    for name in bible.SPLITS:
        written = read_pairs(tmp_path / "en-es" / f"{name}.tsv")
        assert written == [(pair.english, pair.spanish) for pair in splits[name]]
        assert all("<" not in text and "note" not in text for pair in written for text in pair)
        shares = bible.VALID_SHARE, bible.TEST_SHARE
        assert all(split_of(bible.osis_ref(pair.ref), *shares) == name for pair in splits[name])
    first = next(pair for pair in splits["train"] if pair.ref[2] == 1)
    assert first.spanish[0].isupper() and first.spanish[1:].islower()  # the drop capitals undone
    readme = (tmp_path / "en-es" / "README.md").read_text(encoding="utf-8")
    assert f"| train | {len(splits['train']):,} |" in readme and "`EN` (English, version 1)" in readme


# --- Writing --------------------------------------------------------------------------------------------


def test_tsv_round_trip(tmp_path):
    pairs = [("In the beginning, God created the heavens.", "EN el principio crió Dios los cielos."),
             ("“Who?” he said—", "¿Quién? dijo: ¡Oh Jehová!"), ("eenquay", "queen")]
    path = tmp_path / "pairs.tsv"
    assert write_tsv(path, pairs) == 3
    assert read_pairs(path) == pairs
    assert path.read_bytes().count(b"\n") == 3


@pytest.mark.parametrize("bad", ["two\tcolumns", "two\nlines", "", " padded", "line\u2028separator"])
def test_write_tsv_refuses_what_would_not_read_back(tmp_path, bad):
    with pytest.raises(DataError, match="pair 2"):
        write_tsv(tmp_path / "bad.tsv", [("fine", "bien"), ("fine", bad)])


# --- Command lines --------------------------------------------------------------------------------------


def test_bible_builder_without_the_modules_says_which_packages_to_install(tmp_path, capsys):
    (tmp_path / "mods.d").mkdir()
    (tmp_path / "mods.d" / "kjv.conf").write_text("[KJV]\nDataPath=./modules/texts/ztext/kjv/\n")
    assert bible.main(["--out", str(tmp_path / "out"), "--sword-path", str(tmp_path)]) == 1
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and error.startswith("error: ")
    assert "engWEB2015eb, spaRV1909eb" in error and "apt-get install sword-text-web sword-text-sparv" in error
    assert not (tmp_path / "out").exists()


def test_pig_latin_builder_command_line(tmp_path, capsys):
    english = tmp_path / "en.tsv"
    write_tsv(english, [(f"the {word} is working", "x") for word in ("queen", "team", "rhythm", "apple")])
    assert piglatin.main(["--english", str(english), "--out", str(tmp_path / "pig")]) == 0
    assert "train" in capsys.readouterr().out
    assert piglatin.main(["--english", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "p")]) == 1
    assert capsys.readouterr().err.startswith("error: ")


def test_pig_latin_word_corpus_command_line(tmp_path, capsys):
    folder = Path(__file__).resolve().parent.parent / "resources" / "checkpoints"
    vocabulary, demos = folder / "en-es-transformer.safetensors", folder / "demos.json"
    assert piglatin.main(["--vocabulary", str(vocabulary), "--demos", str(demos), "--out", str(tmp_path / "w")]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'w'}: ")
    assert piglatin.main(["--vocabulary", str(vocabulary), "--demos", str(tmp_path / "none.json"),
                          "--out", str(tmp_path / "x")]) == 1
    assert "not a readable demos.json" in capsys.readouterr().err
    assert piglatin.main(["--vocabulary", str(demos), "--demos", str(demos), "--out", str(tmp_path / "y")]) == 1
    assert capsys.readouterr().err.startswith("error: ")
    with pytest.raises(SystemExit):
        piglatin.main(["--vocabulary", str(vocabulary), "--out", str(tmp_path / "z")])
    assert "--vocabulary and --demos go together" in capsys.readouterr().err


def test_copy_sources_point_at_the_copied_characters():
    from models.text.piglatin import copy_sources, to_pig_latin

    for text in ("team", "apple", "queen", "the air-conditioning", "rhythm", "well-known words"):
        output, sources = to_pig_latin(text), copy_sources(text)
        assert len(sources) == len(output), text
        for character, source in zip(output, sources):
            if source is not None:
                assert text.lower()[source] == character, (text, character, source)
    assert copy_sources("team") == [1, 2, 3, 0, None, None]
    assert copy_sources("apple")[-3:] == [None, None, None]


def test_the_decoder_only_demos_corpus_is_built_from_the_repository_alone(tmp_path):
    """The whole-word pieces of the English→Spanish demo's vocabulary and the demos' inputs, split by the hash of
    each word; phrases of training words only; the same files again on a second build."""
    folder = Path(__file__).resolve().parent.parent / "resources" / "checkpoints"
    vocabulary, demos = folder / "en-es-transformer.safetensors", folder / "demos.json"
    splits = piglatin.build_word_corpus(vocabulary, demos, tmp_path / "pig")
    pieces = set(piglatin.vocabulary_words(vocabulary))
    assert {"shepherd", "earth", "father"} <= pieces and not any(" " in word or "▁" in word for word in pieces)
    words = {name: {text for text in splits[name] if " " not in text} for name in bible.SPLITS}
    demo_words = {"the", "air", "conditioning", "is", "working", "rhythm", "queen", "hello", "world", "jesus", "wept"}
    assert demo_words <= set(piglatin.corpus_words(piglatin.demo_inputs(demos)))
    assert words["train"] | words["valid"] | words["test"] == pieces | set(
        piglatin.corpus_words(piglatin.demo_inputs(demos))) >= pieces | demo_words
    for name in ("valid", "test"):
        assert words[name] and all(split_of(word, piglatin.VALID_SHARE, piglatin.TEST_SHARE) == name
                                   for word in words[name])
    phrases = [text for text in splits["train"] if " " in text]
    assert phrases and all(word in words["train"] for phrase in phrases for word in phrase.split())
    for name in bible.SPLITS:
        assert read_pairs(tmp_path / "pig" / f"{name}.tsv") == [(text, to_pig_latin(text)) for text in splits[name]]
    piglatin.build_word_corpus(vocabulary, demos, tmp_path / "again")
    for name in (*(f"{split}.tsv" for split in bible.SPLITS), "README.md"):
        assert (tmp_path / "pig" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
