"""Checkpoint files: reading, writing, snapshots."""
