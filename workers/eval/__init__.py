"""Offline work on labelled data: dataset loaders, `calibrate`, `eval` and its reports."""
