"""One error tree: every exception the project defines derives from `GroundstreamError`,
so a caller can catch everything groundstream raises on purpose with one clause; and the
tree drawn in pipeline/errors.py names each, marking those that may be retried."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import pipeline
import topics
import workers
from pipeline import errors
from pipeline.errors import GroundstreamError

# Modules that need an optional extra (matplotlib) or a model at import are still walked:
# they are importable in the test environment.
PACKAGES = (pipeline, topics, workers)


def _modules():
    for package in PACKAGES:
        yield package
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            yield importlib.import_module(info.name)


def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    for module in _modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__ and issubclass(obj, BaseException):
                found.append(obj)
    return found


def test_the_walk_finds_the_known_errors():
    names = {e.__name__ for e in _defined_exceptions()}
    assert {"PolicyError", "MalformedMessage", "TopicsMissing"} <= names


@pytest.mark.parametrize(
    "error", _defined_exceptions(), ids=lambda e: f"{e.__module__}.{e.__name__}"
)
def test_every_project_error_is_a_groundstream_error(error: type[BaseException]):
    assert issubclass(error, GroundstreamError), (
        f"{error.__module__}.{error.__name__} is outside the error tree: derive it from "
        "pipeline.errors.GroundstreamError (and the standard type callers may also catch)"
    )


def _drawn() -> dict[str, bool]:
    """Class name → marked ↻ (retryable), from the tree drawn in pipeline/errors.py."""
    drawn = {"GroundstreamError": False}
    for line in (errors.__doc__ or "").splitlines():
        found = re.search(r"── (\w+)(?: \([^)]*\))?( ↻)?", line)
        if found:
            drawn[found.group(1)] = bool(found.group(2))
    return drawn


def test_the_drawing_marks_some_errors_retryable() -> None:
    assert {n for n, marked in _drawn().items() if marked} >= {"StaleBatch", "TopicsMissing"}


@pytest.mark.parametrize(
    "error", _defined_exceptions(), ids=lambda e: f"{e.__module__}.{e.__name__}"
)
def test_the_drawing_names_each_error_and_whether_it_may_be_retried(
    error: type[GroundstreamError],
) -> None:
    drawn = _drawn()
    assert error.__name__ in drawn, f"draw {error.__name__} in pipeline/errors.py's tree"
    assert error.retryable is drawn[error.__name__], (
        f"{error.__name__}.retryable is {error.retryable}; the tree marks it otherwise"
    )
