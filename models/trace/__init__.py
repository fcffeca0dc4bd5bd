"""Attention traces as plain numpy data: what a run recorded, and summaries of it."""
