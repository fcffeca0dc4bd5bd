"""What the status bar says while a run decodes (no Qt): the step and the token it produced. A beam's best row
may have ended already (its row is then padding, "<pad>", which is no token the model chose): the line names the
token of the best hypothesis still growing and how many still grow, or says that every hypothesis has ended."""

from __future__ import annotations

from models.trace.records import DecodeStep


def decoding_progress(step: DecodeStep) -> str:
    rows = len(step.tokens)
    if rows <= 1:
        return f"decoding… step {step.step + 1}: {' '.join(step.tokens[:1])}"
    growing = [row for row in range(rows) if not step.finished[row]]
    if not growing:
        return f"decoding… step {step.step + 1}: every hypothesis of the beam has ended"
    return (f"decoding… step {step.step + 1}: ‘{step.tokens[growing[0]]}’ ({len(growing)} of {rows} hypotheses "
            "still growing)")
