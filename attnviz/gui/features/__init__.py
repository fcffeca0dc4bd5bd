"""The window's features, each a controller that builds its widgets or docks and owns their signal wiring.

A feature talks to the window through its public parts only: ``session``, ``worker`` (the worker object; its
signals and slots cross to the worker thread), ``statusBar()``, ``docks`` (the dock area), the views that
``layout.setup_views`` made, and the other features by name (``window.viewing.run()``). It never reaches into a
widget's children.
"""
