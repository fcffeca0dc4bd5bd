"""Reading the app's settings (a QSettings INI file the user may have edited or damaged) through one typed
reader: a value of the wrong type or out of range falls back to its default and is noted, so the app
always starts. No Qt here: the reader takes any object with QSettings' ``value(key, default)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SettingsReader:
    store: Any  # a QSettings
    problems: list[str] = field(default_factory=list)

    def _raw(self, key: str) -> Any:
        try:
            return self.store.value(key)
        except Exception as error:  # noqa: BLE001 (a damaged file can make QSettings raise anything)
            self.problems.append(f"{key}: unreadable ({type(error).__name__})")
            return None

    def _bad(self, key: str, value: Any, default: Any) -> Any:
        shown = repr(value) if len(repr(value)) < 40 else repr(value)[:37] + "…"
        self.problems.append(f"{key}={shown} is not valid; using {default!r}")
        return default

    def integer(self, key: str, default: int, minimum: int, maximum: int) -> int:
        value = self._raw(key)
        if value is None:
            return default
        text = str(value).strip()
        integer = text.isdigit() or (text[:1] == "-" and text[1:].isdigit())
        if isinstance(value, bool) or not integer or len(text) > 12:
            return self._bad(key, value, default)
        number = int(text)
        return number if minimum <= number <= maximum else self._bad(key, value, default)

    def choice(self, key: str, default: str, choices: tuple[str, ...] | list[str]) -> str:
        value = self._raw(key)
        if value is None:
            return default
        return str(value) if str(value) in choices else self._bad(key, value, default)

    def text(self, key: str, default: str = "", limit: int = 100_000) -> str:
        value = self._raw(key)
        if value is None:
            return default
        return value if isinstance(value, str) and len(value) <= limit else self._bad(key, value, default)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._raw(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "1"):
            return True
        if str(value).lower() in ("false", "0"):
            return False
        return self._bad(key, value, default)

    def strings(self, key: str, limit: int = 100) -> list[str]:
        value = self._raw(key)
        if value is None:
            return []
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
            return self._bad(key, value, [])
        return list(items)[:limit]

    def blob(self, key: str) -> Any:
        """Bytes a Qt object saved (window geometry, dock state), or None when missing or not bytes."""
        value = self._raw(key)
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray)) or type(value).__name__ == "QByteArray":
            return value
        return self._bad(key, value, None)
