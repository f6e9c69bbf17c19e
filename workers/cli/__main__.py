"""`python -m workers.cli`: the same command as the `groundstream` entry point."""

from workers.cli import main

main()
