"""One error tree: every exception the project defines derives from `GroundstreamError`,
so a caller can catch everything groundstream raises on purpose with one clause."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import pipeline
import topics
import workers
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
