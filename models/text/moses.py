"""Moses text preparation, shared by the ``word`` and ``tokenizer-json`` kinds (fairseq's WMT models, JoeyNMT's
Moses pretokenizer)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from ..errors import ConfigError
from .normalize import joeynmt_normalize, tidy_spaces

# Moses' replace-unicode-punctuation rules (as fairseq's WMT'19 preprocessing applied them): characters → ASCII
_MOSES_UNICODE_PUNCTUATION = str.maketrans({
    "，": ",", "、": ",", "”": '"', "“": '"', "∶": ":", "：": ":", "？": "?", "《": '"', "》": '"', "）": ")",
    "！": "!", "（": "(", "；": ";", "」": '"', "「": '"', "～": "~", "’": "'", "…": "...", "━": "-", "〈": "<",
    "〉": ">", "【": "[", "】": "]", "％": "%", **{chr(0xFF10 + digit): str(digit) for digit in range(10)}})
_MOSES_FULL_STOPS = re.compile(r"[。．]\s*")  # an ideographic or full-width full stop and the space after it


MOSES_STYLES = ("fairseq", "joeynmt")


class Moses:
    """Moses text preparation for one language, with ``sacremoses`` (imported when first needed).

    ``style`` ``fairseq`` (fairseq's WMT models): optionally lower case first, Unicode punctuation to ASCII,
    Moses' punctuation normaliser, control and format characters dropped, Moses' tokenizer with aggressive
    dash splits and its XML escapes. ``joeynmt`` (JoeyNMT's ``pretokenizer: moses``): with ``normalize``,
    NFKC, curly quotes to straight ones, runs of spaces to one and no space before ``?!,.:``, then Moses'
    punctuation normaliser (its English rules); Moses' tokenizer with its XML escapes; then lower case if
    asked. Both join output words with Moses' detokenizer (``joeynmt`` with ``normalize``: spaces tidied as
    before).
    """

    def __init__(self, settings: Any):
        if not isinstance(settings, dict) or not isinstance(settings.get("lang"), str):
            raise ConfigError("tokenizer 'moses' settings need a 'lang' string")
        style = settings.get("style", "fairseq")
        if style not in MOSES_STYLES:
            raise ConfigError(f"tokenizer 'moses' style must be one of {', '.join(MOSES_STYLES)}; got {style!r}")
        self.settings = {"lang": settings["lang"], "lowercase": bool(settings.get("lowercase", False))}
        if style == "joeynmt":  # absent: fairseq's, as files written before there were two styles say
            self.settings.update(style=style, normalize=bool(settings.get("normalize", False)))
        self.style = style
        try:
            import sacremoses
        except ImportError:
            raise ConfigError("this tokenizer needs the 'sacremoses' package: pip install sacremoses") from None
        lang = self.settings["lang"]
        self._normalizer = sacremoses.MosesPunctNormalizer(lang=lang if style == "fairseq" else "en")
        self._tokenizer = sacremoses.MosesTokenizer(lang=lang)
        self._detokenizer = sacremoses.MosesDetokenizer(lang=lang)

    def words(self, text: str) -> list[str]:
        if self.style == "joeynmt":
            if self.settings["normalize"]:
                text = self._normalizer.normalize(joeynmt_normalize(text))
            text = self._tokenizer.tokenize(text, return_str=True, escape=True)
            return (text.lower() if self.settings["lowercase"] else text).split()
        if self.settings["lowercase"]:
            text = text.lower()
        text = _MOSES_FULL_STOPS.sub(". ", text).translate(_MOSES_UNICODE_PUNCTUATION)
        text = self._normalizer.normalize(text)
        text = "".join(c for c in text if not unicodedata.category(c).startswith("C"))
        return [word for word in self._tokenizer.tokenize(text, aggressive_dash_splits=True, return_str=False,
                                                          escape=True) if word]

    def detokenize(self, words: list[str]) -> str:
        text = self._detokenizer.detokenize(words)
        return tidy_spaces(text) if self.style == "joeynmt" and self.settings["normalize"] else text


