"""Pig Latin, the character-level demo task: the rule, and which source character each output character copies.

The rule, word by word on lower-cased text: a word that starts with a vowel gets ``way`` appended
(``impress`` → ``impressway``); any other word moves its leading consonant cluster, the letters before its
first vowel, to the end and appends ``ay`` (``shopping`` → ``oppingshay``). ``qu`` belongs to the cluster
(``queen`` → ``eenquay``) and ``y`` is a consonant only as a word's first letter (``yellow`` →
``ellowyay``, ``rhythm`` → ``ythmrhay``). A word without a vowel is all cluster (``hmm`` → ``hmmay``).
Hyphenated parts are words of their own (``well-known`` → ``ellway-ownknay``); spaces, hyphens and any
other non-letters stay where they are.
"""

from __future__ import annotations

import re

VOWELS = frozenset("aeiou")

_LETTER_RUN = re.compile(r"[a-z]+")


def to_pig_latin(text: str) -> str:
    """``text`` lower-cased, each run of letters a ∈ a–z translated by the rule in the module docstring."""
    return _LETTER_RUN.sub(lambda match: _word_to_pig_latin(match.group()), text.lower())


def copy_sources(text: str) -> list[int | None]:
    """For each character of ``to_pig_latin(text)``, the index of the source character it copies
    (``None`` for the added ``ay``/``way``). The ground truth an attention alignment is scored against."""
    lowered = text.lower()
    sources: list[int | None] = []
    position = 0
    for match in _LETTER_RUN.finditer(lowered):
        sources.extend(range(position, match.start()))  # spaces, hyphens and other characters copy over
        start, word = match.start(), match.group()
        cluster = _consonant_cluster_length(word)
        order = list(range(cluster, len(word))) + list(range(cluster))
        sources.extend(start + index for index in order)
        sources.extend([None] * (3 if cluster == 0 else 2))
        position = match.end()
    sources.extend(range(position, len(lowered)))
    return sources


def _word_to_pig_latin(word: str) -> str:
    cluster = _consonant_cluster_length(word)
    if cluster == 0:
        return word + "way"
    return word[cluster:] + word[:cluster] + "ay"


def _consonant_cluster_length(word: str) -> int:
    """How many letters come before the first vowel (``qu`` counted as consonants, ``y`` a vowel except
    as the first letter)."""
    index = 0
    while index < len(word):
        if word.startswith("qu", index):
            index += 2
        elif word[index] in VOWELS or (word[index] == "y" and index > 0):
            return index
        else:
            index += 1
    return len(word)
