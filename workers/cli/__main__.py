"""`python -m workers.cli`: the same command as the `groundstream` entry point."""

from workers.cli import main

if __name__ == "__main__":  # tests import every module (test_error_tree): run only as -m
    main()
