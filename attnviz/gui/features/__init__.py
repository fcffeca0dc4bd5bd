"""The window's features, each a controller that builds its widgets or docks and owns their signal wiring.

A feature is handed what it uses, and uses nothing else: the ``session`` (attnviz/state/session.py), the ``views``
(``layout.Views``: the widgets it shows states in and takes choices from, the docks and the status bar), the
``worker`` (its signals, and the slots its own request signals connect to), the few features it reaches (made before
it: the feature graph has no cycle, tests/test_feature_graph.py), and where it needs them the settings (``stored``)
and the window as a ``parent`` widget for its dialogs. A feature reaches a later one only through a signal the later
one connects. It never reaches into a widget's children. docs/ARCHITECTURE.md, "The window's features", has the
table of what each may touch.
"""
