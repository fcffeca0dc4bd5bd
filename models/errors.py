"""Exception types of the models core.

Every user-facing failure (bad input text, a bad checkpoint file, an impossible configuration) raises a
subclass of :class:`AttnvizError`; its message is one line that a CLI can print as is, naming the file or
input and what is wrong. Anything else escaping the core is a bug.
"""

from __future__ import annotations


class AttnvizError(Exception):
    """Base of every error the core raises on purpose."""


class ConfigError(AttnvizError, ValueError):
    """An architecture or training configuration that cannot be built."""


class InputError(AttnvizError, ValueError):
    """Text the model cannot run on."""


class EmptyInputError(InputError):
    """The text is empty or only whitespace."""


class UnknownCharactersError(InputError):
    """The text holds characters that the model's vocabulary cannot represent."""

    def __init__(self, characters: list[str]):
        self.characters = characters
        shown = " ".join(repr(c) for c in characters[:10])
        more = f" and {len(characters) - 10} more" if len(characters) > 10 else ""
        super().__init__(f"the model's vocabulary has no token for {shown}{more}")


class ChatTemplateError(AttnvizError, ValueError):
    """A model's chat template that cannot be read, or that refuses the conversation it is given (its own words)."""


class CheckpointError(AttnvizError):
    """A checkpoint file that is missing, unreadable, foreign or inconsistent."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ForeignCheckpointError(CheckpointError):
    """A readable file, but not in the attnviz format: the importers (``attnviz convert``) may read it."""


class DataError(AttnvizError):
    """A training corpus that cannot be read."""


class NumericalWarning(UserWarning):
    """The model computed NaN or infinite numbers: results go on but may be meaningless (a CLI prints it
    as ``attnviz: warning: ...``)."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is a device running out of memory, as torch says it (``torch.cuda.OutOfMemoryError`` is
    a RuntimeError saying "CUDA out of memory"; other devices say "out of memory" too): the one rule the command
    line and the window answer it by."""
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()
