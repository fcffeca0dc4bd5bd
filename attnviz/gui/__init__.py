"""The Qt app: the window, the worker thread, rendering."""
