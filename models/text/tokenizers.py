"""Every tokenizer kind under one import path (the importers, training, storage and tests import from here)."""

from .char_tokenizer import CharTokenizer
from .moses import MOSES_STYLES
from .sentencepiece_tokenizers import SentencePieceTokenizer, SentencePieceVocabTokenizer
from .tokenizer import (
    BOS_ID, EOS_ID, KINDS, PAD_ID, SPACE_LABEL, SPECIAL_TOKENS, UNK_ID, UNKNOWN_MODES, UNKNOWN_SURFACE, Tokenizer,
)
from .tokenizer_json import TokenizerJsonTokenizer, byte_level_label
from .vocabulary import SPECIAL_ROLES, VocabularyTokenizer
from .word_tokenizer import WORD_SPLITS, WordTokenizer

__all__ = [
    "BOS_ID", "EOS_ID", "KINDS", "MOSES_STYLES", "PAD_ID", "SPACE_LABEL", "SPECIAL_ROLES", "SPECIAL_TOKENS", "UNK_ID",
    "UNKNOWN_MODES", "UNKNOWN_SURFACE", "WORD_SPLITS", "CharTokenizer", "SentencePieceTokenizer",
    "SentencePieceVocabTokenizer", "Tokenizer", "TokenizerJsonTokenizer", "VocabularyTokenizer", "WordTokenizer",
    "byte_level_label",
]
