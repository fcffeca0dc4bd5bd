"""Corpus chrF and BLEU of outputs against references, as sacrebleu computes them.

BLEU counts word n-grams (sacrebleu's 13a tokenization): the outputs of a model whose target side is
characters (a Pig Latin word, a reversed string) are one or two words each, with no 4-gram to match, so their
word BLEU is 0 even when every output is right. Their BLEU is computed on characters (``tokenize="char"``), and
says so (``bleu_name``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sacrebleu

CHARACTER_BLEU = "char_bleu"  # the metric's name where BLEU counts character n-grams


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], *, characters: bool) -> tuple[float, float]:
    """Corpus chrF and BLEU (0..100); BLEU on character n-grams when ``characters`` (a character-level target)."""
    references_ = [list(references)]
    chrf = sacrebleu.corpus_chrf(list(hypotheses), references_).score
    bleu = sacrebleu.corpus_bleu(list(hypotheses), references_, tokenize="char" if characters else "13a").score
    return chrf, bleu


def bleu_name(characters: bool) -> str:
    """What the BLEU of such a target is called where it is reported: ``bleu``, or ``char_bleu`` on characters."""
    return CHARACTER_BLEU if characters else "bleu"
