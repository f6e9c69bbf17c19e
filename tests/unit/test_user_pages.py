"""The user pages say only what is true of this repository: every repository path they
name exists, every `groundstream …` command line in their shell blocks parses with the
real CLI (subcommands and options, no broker), and every `GROUNDSTREAM_*` name is a
variable groundstream reads. The user pages are docs/ without the development logs
(docs/lab/), README.md and deploy/README.md. A page that drifts from the code fails here,
naming the page, the line and what is wrong; the last tests show each check bites on a
small page made up for it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from workers.cli import main
from workers.runtime.settings import known_variables

ROOT = Path(__file__).resolve().parents[2]

ROOTS = ("deploy", "docs", "examples", "pipeline", "topics", "workers", "tools", "tests")
"""The repository's top-level folders: a path written from one of these is checked."""

PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(ROOTS)})/[\w./-]*)")
"""A repository path in prose or code: not part of a URL, a container path (`/examples/…`)
or a longer path (`../shared/data/…`, `~/.cache/…`)."""

PLACEHOLDER = re.compile(r"[<>*{}…]|\.\.\.|[A-Z]{4,}")
"""A path with a placeholder in it (`<stage>`, `*.jsonl`, `DIR`, `…`) names no one file."""

VARIABLE = re.compile(r"GROUNDSTREAM_[A-Z0-9_]*\*?")

SHELL = re.compile(r"^( *)```(sh|bash|shell|console)\s*$")

SEPARATORS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", ")", "("})


def user_pages() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "lab" not in p.parts]
    return [ROOT / "README.md", ROOT / "deploy" / "README.md", *docs]


def path_problems(text: str) -> list[str]:
    """Each repository path of `text` that names nothing in the repository."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            path = match.group(1).rstrip(".")
            if PLACEHOLDER.search(path) or path.endswith("/-"):
                continue
            if not (ROOT / path).exists() and not (ROOT / f"{path}.py").is_file():  # a module
                found.append(f"line {n}: {path} does not exist")
    return found


def variable_problems(text: str, known: frozenset[str]) -> list[str]:
    """Each `GROUNDSTREAM_*` name of `text` that groundstream does not read (a prefix
    written as `GROUNDSTREAM_KAFKA_*` or `GROUNDSTREAM_` is a family, not a name)."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for name in VARIABLE.findall(line):
            if name.endswith(("*", "_")):
                continue
            if name not in known:
                found.append(f"line {n}: {name} is not a setting groundstream reads")
    return found


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, command line) of every line of the page's shell blocks, with
    backslash continuations joined and a `$ ` prompt dropped."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    pending, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if fence is None:
            opened = SHELL.match(line)
            fence = opened.group(1) + "```" if opened else None
            continue
        if line.strip() == "```":
            fence = None
            continue
        stripped = line.strip().removeprefix("$ ")
        if not pending:
            start = n
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        out.append((start, pending + stripped))
        pending = ""
    return out


def groundstream_args(line: str) -> list[str] | None:
    """The arguments of the `groundstream` command a shell line runs (after any
    `VAR=value` assignments), up to a pipe, redirection or the next command; None when
    the line runs something else."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: a fragment, not a command
        return None
    while tokens and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
        tokens.pop(0)
    if not tokens or tokens[0] != "groundstream":
        return None
    args = []
    for token in tokens[1:]:
        if token in SEPARATORS:
            break
        args.append(token)
    return args


def command_problem(args: list[str]) -> str | None:
    """Why `groundstream ARGS` does not parse (an unknown command, an unknown option, an
    option without its value), else None. Each command's own click parser reads its
    options, as `groundstream … --help` would; values and required arguments are not
    checked, since pages write placeholders (`DATA...`, `YOUR_LABELLED.jsonl`) for them."""
    command: click.Command = main
    path = ["groundstream"]
    while True:
        ctx = click.Context(command, info_name=path[-1])
        try:
            _, rest, _ = command.make_parser(ctx).parse_args(list(args))
        except click.UsageError as exc:
            return f"{' '.join(path)}: {exc.format_message()}"
        if not isinstance(command, click.Group) or not rest:
            return None
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            return f"{' '.join(path)}: no command {rest[0]!r}"
        command, args = sub, rest[1:]
        path.append(rest[0])


def command_problems(text: str) -> list[str]:
    found = []
    for n, line in shell_lines(text):
        args = groundstream_args(line)
        if args is None:
            continue
        problem = command_problem(args)
        if problem is not None:
            found.append(f"line {n}: {problem}")
    return found


def page_problems(text: str) -> list[str]:
    return [
        *path_problems(text),
        *command_problems(text),
        *variable_problems(text, known_variables()),
    ]


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_user_page_names_only_what_exists(page: Path) -> None:
    problems = page_problems(page.read_text(encoding="utf-8"))
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_user_pages_are_checked_and_hold_commands() -> None:
    """The check reads the pages it means to (the Lab left out) and finds commands in them:
    a checker that parsed nothing would pass every page."""
    pages = user_pages()
    assert ROOT / "deploy" / "README.md" in pages
    assert not any("lab" in p.parts for p in pages)
    commands = [
        args
        for page in pages
        for _, line in shell_lines(page.read_text(encoding="utf-8"))
        if (args := groundstream_args(line)) is not None
    ]
    assert len(commands) > 50


SYNTHETIC = """# A page

The manifests are in `deploy/k8s/` and the example in examples/candidates.jsonl; the
policy in `pipeline/data/no_such_policy.toml`.

```sh
groundstream topics create
GROUNDSTREAM_PARTITIONS=6 groundstream worker geometry
groundstream acls --stage client --principal User:a --no-such-option
groundstream no-such-command --help
groundstream review decide ID accept --by me | tee out.txt
```

Set `GROUNDSTREAM_BOOTSTRAP_SERVERS` (not `GROUNDSTREAM_BOOTSTRAP_SERVER`); every
`GROUNDSTREAM_KAFKA_*` setting is in the reference.
"""


def test_the_checker_names_a_broken_path() -> None:
    assert path_problems(SYNTHETIC) == ["line 4: pipeline/data/no_such_policy.toml does not exist"]


def test_the_checker_names_an_unknown_option_and_command() -> None:
    problems = command_problems(SYNTHETIC)
    assert len(problems) == 2, problems
    assert (
        problems[0].startswith("line 9: groundstream acls:") and "--no-such-option" in problems[0]
    )
    assert problems[1] == "line 10: groundstream: no command 'no-such-command'"


def test_the_checker_names_an_unknown_variable() -> None:
    problems = variable_problems(SYNTHETIC, known_variables())
    assert problems == [
        "line 14: GROUNDSTREAM_BOOTSTRAP_SERVER is not a setting groundstream reads"
    ]


def test_the_checker_reads_continued_lines_and_assignments() -> None:
    text = "```sh\nGROUNDSTREAM_X=1 groundstream acls --stage client \\\n    --no-such-flag\n```\n"
    assert shell_lines(text) == [
        (2, "GROUNDSTREAM_X=1 groundstream acls --stage client --no-such-flag")
    ]
    (problem,) = command_problems(text)
    assert problem.startswith("line 2: groundstream acls:") and "--no-such-flag" in problem
