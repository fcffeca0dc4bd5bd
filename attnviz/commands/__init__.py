"""One module per ``attnviz`` subcommand: each has ``NAME``, ``add_parser(subparsers)`` and ``run(args)``."""
