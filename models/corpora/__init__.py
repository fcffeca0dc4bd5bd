"""Scripts that build the demos' corpora (not installed with the package)."""
