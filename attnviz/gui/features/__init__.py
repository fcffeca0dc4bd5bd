"""One controller per feature of the window: it builds its widgets and owns their wiring."""
