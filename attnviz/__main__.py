"""`python -m attnviz`: the same as the `attnviz` command."""

from attnviz.cli import main

raise SystemExit(main())
