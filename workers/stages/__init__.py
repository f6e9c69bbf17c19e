"""Stage adapters: one module per rung of the ladder, each a thin shell over `pipeline/`."""
