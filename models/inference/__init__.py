"""Running a model: decoding (greedy, beam, forced) and the translator."""
