"""attnviz: the desktop app and command line over the models core (``models``)."""

__version__ = "0.1.0"
