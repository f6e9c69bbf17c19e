"""`pip install groundstream` from the built wheel works without the checkout.

`python -m build` makes the sdist and then the wheel from the unpacked sdist, so a file the
sdist lacks is missing from the wheel too; both are built once per session, with
`--no-isolation` (the test extra's `build` and `setuptools`), so no package index is asked.

The wheel goes into a fresh virtualenv. Its dependencies (torch among them, gigabytes) are
not installed again: after the wheel is in, a `.pth` file adds this interpreter's
site-packages to the fresh venv's path, behind the venv's own site-packages. That is the
fastest honest route: groundstream itself comes only from the wheel (the test asserts each
of its packages imports from the fresh venv), and a path added by a `.pth` line is not a
site directory, so the main venv's editable install (a `.pth` of its own, naming a
checkout) is never processed. The wheel is installed before the `.pth` is written, so pip
sees an empty venv and cannot touch the main one's groundstream.

Then, with the working directory outside the checkout and no PYTHONPATH: `groundstream
--help`, `groundstream verify` on the packaged example (the tutorial's line), and
`groundstream topics create` on the test broker under this test's topic prefix. Every file
the packages hold besides their modules (the shipped policy, the claim head, the dashboard's
static files, the example files) must be in the wheel. The Grafana dashboard is not package
data: no code loads it (deploy/grafana/ is for Grafana to read).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from .harness import REPO_ROOT

PACKAGES = ("pipeline", "topics", "workers")
TUTORIAL_SUMMARY = "verified: deadletter=2, escalations.fallback=6, escalations.review=3, state=1"


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel `python -m build` makes of this checkout, built once."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO_ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("groundstream-*.whl")
    (sdist,) = out.glob("groundstream-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="session")
def installed(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding groundstream from the wheel only; its `bin/`."""
    home = tmp_path_factory.mktemp("fresh-venv")
    venv.create(home, with_pip=False, symlinks=True)
    python = home / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    done = subprocess.run(
        [*pip, "--no-deps", "--no-index", str(dist["wheel"])],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # Only now the dependencies: this interpreter's site-packages, after the venv's own.
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (Path(own) / "zz_dependencies.pth").write_text("\n".join(deps) + "\n")
    return home / "bin"


def run(
    bin_dir: Path, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A command of the fresh venv, outside the checkout, with no PYTHONPATH."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    clean = {k: v for k, v in clean.items() if not k.startswith("GROUNDSTREAM_")}
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=300,
        check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def tree_data() -> set[str]:
    """Every file of the source packages that is not a module, as a wheel names it."""
    return {
        path.relative_to(REPO_ROOT).as_posix()
        for top in PACKAGES
        for path in (REPO_ROOT / top).rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }


def test_the_wheel_and_sdist_hold_every_data_file_of_the_packages(dist: dict[str, Path]) -> None:
    wheel = set(zipfile.ZipFile(dist["wheel"]).namelist())
    expected = tree_data()
    assert {
        "pipeline/data/default_policy.toml",
        "pipeline/data/claims/head.npz",
        "pipeline/data/claims/head.json",
        "workers/web/static/index.html",
        "workers/examples/candidates.jsonl",
    } <= expected  # the check is not vacuous
    assert expected - wheel == set()
    with tarfile.open(dist["sdist"]) as sdist:
        root = dist["sdist"].name.removesuffix(".tar.gz")
        assert expected - {n.removeprefix(root + "/") for n in sdist.getnames()} == set()
    assert "groundstream-0.1.0.dist-info/entry_points.txt" in wheel
    assert not any(name.startswith(("tests/", "tools/", "docs/")) for name in wheel)


def test_the_installed_wheel_runs_help_verify_and_topics_create(
    installed: Path, tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    where = run(
        installed,
        tmp_path,
        "python",
        "-c",
        "import pipeline, topics, workers, workers.web.app as app;"
        "print(pipeline.__file__, topics.__file__, workers.__file__, app.STATIC_DIR)",
    )
    assert where.returncode == 0, where.stderr
    venv_home = installed.parent.resolve()
    for path in where.stdout.split():
        assert Path(path).resolve().is_relative_to(venv_home), where.stdout
        assert not Path(path).resolve().is_relative_to(REPO_ROOT)

    helped = run(installed, tmp_path, "groundstream", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "verify" in helped.stdout and "topics" in helped.stdout

    example = Path(where.stdout.split()[2]).parent / "examples" / "candidates.jsonl"
    verified = run(
        installed, tmp_path, "groundstream", "verify", str(example), "--out", "decisions.jsonl"
    )
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert TUTORIAL_SUMMARY in verified.stderr
    assert (tmp_path / "decisions.jsonl").read_text().count('"stage":"outcome"') == 12

    env = {"GROUNDSTREAM_BOOTSTRAP_SERVERS": kafka_bootstrap}
    env["GROUNDSTREAM_TOPIC_PREFIX"] = topic_prefix
    created = run(installed, tmp_path, "groundstream", "topics", "create", env=env)
    assert created.returncode == 0, created.stdout + created.stderr
    assert f"created  {topic_prefix}candidates" in created.stdout
    assert f"created  {topic_prefix}state" in created.stdout
