"""Widgets. Each is built once and updated with new data; none touches torch."""
