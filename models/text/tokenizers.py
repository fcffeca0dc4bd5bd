"""Every tokenizer kind under one import path (the importers, training, storage and tests import from here)."""

from .tokenizer import (
    BOS_ID, EOS_ID, MOSES_STYLES, PAD_ID, SPACE_LABEL, SPECIAL_ROLES, SPECIAL_TOKENS, UNK_ID, UNKNOWN_MODES,
    UNKNOWN_SURFACE, WORD_SPLITS, CharTokenizer, SentencePieceTokenizer, SentencePieceVocabTokenizer, Tokenizer,
    TokenizerJsonTokenizer, VocabularyTokenizer, WordTokenizer, byte_level_label,
)

__all__ = [
    "BOS_ID", "EOS_ID", "MOSES_STYLES", "PAD_ID", "SPACE_LABEL", "SPECIAL_ROLES", "SPECIAL_TOKENS", "UNK_ID",
    "UNKNOWN_MODES", "UNKNOWN_SURFACE", "WORD_SPLITS", "CharTokenizer", "SentencePieceTokenizer",
    "SentencePieceVocabTokenizer", "Tokenizer", "TokenizerJsonTokenizer", "VocabularyTokenizer", "WordTokenizer",
    "byte_level_label",
]
