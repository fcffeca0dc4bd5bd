"""What a decoder-only model's run adds to the decoding loop (models/inference/decoding.py): the prompt plays the
source's part (models/nn/decoder_only.py), so the run prefills all of it but its last token, which is fed first, in
the start token's role; the continuation must fit in the model's context after the prompt; its end tokens are the
end token and the ``stop_ids`` generation_config.json lists; hypotheses are ranked as transformers ranks a decoder-only
model's beams (the summed log-probability over the generated length to the power ``length_penalty``), and a beam is
searched as transformers searches it (models/inference/finished_beams.py).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import EmptyInputError, InputError
from ..nn.config import DECODER_ARCHS


def prompted(config) -> bool:
    """Whether ``config`` is a decoder-only model's: its source is a prompt that the output continues."""
    return config.arch in DECODER_ARCHS


def end_ids(config) -> tuple[int, ...]:
    """The tokens that end an output: the end token first, then the model's other ones (``stop_ids``)."""
    return (config.eos_id, *getattr(config, "stop_ids", ()))


def continuation_room(config, prompt_len: int) -> int:
    """How many tokens may follow a prompt of ``prompt_len`` tokens in the model's context (prompt and continuation
    together); one line when the prompt leaves no room."""
    if prompt_len == 0:
        raise EmptyInputError("the prompt has no tokens")
    room = config.max_len - prompt_len
    if room < 1:
        raise InputError(f"the prompt has {prompt_len} tokens; this model's context holds {config.max_len} positions, "
                         f"prompt and continuation together")
    return room


def split_prompt(prompt: Sequence[int]) -> tuple[list[int], int]:
    """What the model's ``start`` prefills (the prompt but its last token) and the token fed first (the last)."""
    return list(prompt[:-1]), int(prompt[-1])


def generated_length_score(log_prob: float, length: int, length_penalty: float) -> float:
    """transformers' score of a finished beam of a decoder-only model: ``log_prob / length ** length_penalty``,
    ``length`` the tokens generated (the end token included), as its ``_update_finished_beams`` divides by
    ``cur_len + 1 - decoder_prompt_len``."""
    return log_prob / (length ** length_penalty) if length_penalty else log_prob
