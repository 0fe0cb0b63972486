"""`python -m app` behaves like the `llamadesk` command."""

from app.cli import main

raise SystemExit(main())
