"""The reference pages under docs/reference/, generated from the code so they cannot drift.

The CLI comes from click's own objects (`workers.cli:main`); settings from `Settings` and
`OTHER_VARIABLES` (workers/runtime/settings.py); policy keys from the tables the policy's
validator reads (`pipeline.policy.document.SECTIONS` and `KEYS`, and the fields of each
section's config class); topics from `Topic` and the record classes of topics/schema.py;
metrics from each constructor call in workers/runtime/metrics.py. A meaning is the item's
own help text or attribute docstring (read with griffe, without importing torch), so a
new item without one shows as an empty meaning and tests/unit/test_docs_reference.py fails.

    python -m tools.docs_reference --write   # regenerate docs/reference/
    python -m tools.docs_reference --check   # exit 1, naming what is missing or stale
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import griffe

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
COMMAND = "python -m tools.docs_reference --write"


@dataclass(frozen=True, slots=True)
class Row:
    """One item of a table: its name (first cell), its other cells, and its meaning."""

    name: str
    cells: tuple[str, ...]
    meaning: str


@dataclass(frozen=True, slots=True)
class Table:
    """A `## heading`, a line about it, and one row per item."""

    heading: str
    intro: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class Page:
    """One generated page of docs/reference/."""

    file: str
    title: str
    intro: str
    tables: tuple[Table, ...]

    def items(self) -> dict[str, str]:
        """`heading: name` → meaning, for every row of the page."""
        return {f"{t.heading}: {r.name}": r.meaning for t in self.tables for r in t.rows}

    def render(self) -> str:
        out = [
            f"<!-- Generated from the code by `{COMMAND}`; do not edit by hand. -->",
            f"# {self.title}",
            "",
            f"Generated from the code by `{COMMAND}`. {self.intro}",
        ]
        for table in self.tables:
            out += ["", f"## {table.heading}", ""]
            out += [table.intro, ""] if table.intro else []
            out.append("| " + " | ".join(table.columns) + " |")
            out.append("|" + "---|" * len(table.columns))
            for row in table.rows:
                cells = (f"`{row.name}`", *row.cells, row.meaning)
                out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        return "\n".join(out) + "\n"


def items_of(text: str) -> dict[str, str]:
    """`heading: name` → meaning, read back from a rendered page (the drift check's view)."""
    heading, out = "", {}
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            unescaped = [c.replace("\\|", "|") for c in cells]  # as `_cell` escaped them
            out[f"{heading}: {unescaped[0].strip('`')}"] = unescaped[-1]
    return out


def _cell(text: str) -> str:
    """`text` on one line of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(value: object) -> str:
    """A default as it would be written: TOML-like for the policy, plain for settings."""
    if value is None or value == "":
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and math.isinf(value):
        return "`inf`"
    if isinstance(value, frozenset | set | tuple | list):
        value = sorted(value) if isinstance(value, frozenset | set) else list(value)
        return "`[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]`"
    return f"`{value}`"


def _docs(module: str, cls: str) -> Callable[[str], str]:
    """Attribute name → its docstring in `module.cls`, read from the source by griffe."""
    found = griffe.load(module, search_paths=[str(ROOT)], resolve_aliases=False)[cls]

    def doc(name: str) -> str:
        member = found.members.get(name)
        return member.docstring.value if member is not None and member.docstring else ""

    return doc


def _default(f: dataclasses.Field[Any]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _field_rows(
    cls: type, module: str, skip: Iterable[str] = (), kind: Callable[[str], str] | None = None
) -> tuple[Row, ...]:
    """A row per init field of a config or record dataclass: type (the annotation, or
    `kind` of it), default, docstring."""
    doc = _docs(module, cls.__name__)
    return tuple(
        Row(f.name, (kind(str(f.type)) if kind else f"`{f.type}`", _code(_default(f))), doc(f.name))
        for f in dataclasses.fields(cls)
        if f.init and f.name not in set(skip)
    )


TOML_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "Mode": "string",
    "SwitchAction": "string",
    "OverBudget": "string",
}
"""A config field's annotation as the TOML a policy writes (an enum is its value)."""


def _toml(annotation: str) -> str:
    base = annotation.removesuffix(" | None")
    if base.startswith(("tuple[str", "frozenset[")):
        return "list of strings"
    if base not in TOML_TYPES:
        raise ValueError(f"policy field type {annotation!r}: add its TOML type to TOML_TYPES")
    choices = _enum_choices().get(base)
    return f"{TOML_TYPES[base]}: {_one_of(choices)}" if choices else TOML_TYPES[base]


def _one_of(choices: Iterable[str]) -> str:
    return "one of " + ", ".join(f"`{c}`" for c in choices)


def _enum_choices() -> dict[str, tuple[str, ...]]:
    """An enum-typed policy field's annotation → the values its parser accepts, read from
    the enums and the parsers' own sets, so a value the code takes is never left out."""
    from pipeline.judge.budget import OverBudget
    from pipeline.policy.routing import Mode
    from pipeline.rungs.grounding_switch import ON_REJECT_ACTIONS

    return {
        "Mode": tuple(m.value for m in Mode),
        "SwitchAction": tuple(sorted(a.value for a in ON_REJECT_ACTIONS)),
        "OverBudget": tuple(o.value for o in OverBudget),
    }


# -- the CLI ------------------------------------------------------------------------------


def _param_row(param: click.Parameter) -> Row:
    if isinstance(param, click.Argument):
        many = " (one or more)" if param.nargs == -1 else ""
        kind = "required" if param.required else "optional"
        shown = param.type.name
        if isinstance(param.type, click.Choice):  # the choices the command itself takes
            shown = "one of " + ", ".join(f"`{c}`" for c in param.type.choices)
        return Row(param.human_readable_name, (shown, ""), f"{kind} argument{many}")
    assert isinstance(param, click.Option)
    names = ", ".join([*param.opts, *param.secondary_opts])
    kind = "flag" if param.is_flag else param.type.name
    if isinstance(param.type, click.Choice):
        kind = ", ".join(str(c) for c in param.type.choices)
    if param.multiple:
        kind += " (repeatable)"
    default = param.to_info_dict()["default"]  # None where click has none
    if param.required:
        shown = "required"
    elif default is None or (param.is_flag and not default) or default == ():
        shown = ""
    elif callable(default):
        shown = "computed"
    else:
        shown = _code(default)
    return Row(names, (kind, shown), param.help or "")


def _commands(group: click.Command, path: str) -> Iterable[Table]:
    summary = inspect.cleandoc(group.help or "").split("\n\n")[0]
    rows = tuple(_param_row(p) for p in group.params)
    yield Table(path, " ".join(summary.split()), ("option", "type", "default", "meaning"), rows)
    if isinstance(group, click.Group):
        for name in sorted(group.commands):
            yield from _commands(group.commands[name], f"{path} {name}")


def cli_page() -> Page:
    from pipeline.errors import EXIT_CODES
    from workers.cli import main

    exits = Table(
        "Exit status",
        "Every command and worker exits with one of these; a failure a user can cause is "
        "one line on stderr, never a traceback ([troubleshooting](../how-to/troubleshooting.md)).",
        ("status", "meaning"),
        tuple(Row(str(code), (), meaning) for code, meaning in EXIT_CODES.items()),
    )
    return Page(
        "cli.md",
        "Command line",
        "Every command and subcommand of `groundstream`, with its options: what "
        "`groundstream COMMAND --help` prints, from the same click objects.",
        (exits, *_commands(main, "groundstream")),
    )


# -- settings -----------------------------------------------------------------------------


def settings_page() -> Page:
    from workers.runtime import settings as s

    doc = _docs("workers.runtime.settings", "Settings")
    rows = []
    for f in dataclasses.fields(s.Settings):
        expected = s._PARSERS.get(f.name, (str, "a string"))[1]
        default = "unset" if f.name in s.SECRET_FIELDS else _code(_default(f))
        rows.append(Row(s.PREFIX + f.name.upper(), (default, expected), doc(f.name)))
    other = tuple(Row(name, (), meaning) for name, meaning in sorted(s.OTHER_VARIABLES.items()))
    return Page(
        "settings.md",
        "Settings",
        "Every `GROUNDSTREAM_*` environment variable groundstream reads. A worker checks "
        "them once at start-up and stops with one line naming the variable when a value is "
        "invalid; a `GROUNDSTREAM_*` variable nothing reads is warned about.",
        (
            Table(
                "Worker and command settings",
                "Read by every worker and command (`Settings.from_env`).",
                ("variable", "default", "accepted values", "meaning"),
                tuple(rows),
            ),
            Table(
                "Other variables",
                "Read elsewhere than the worker settings.",
                ("variable", "meaning"),
                other,
            ),
        ),
    )


# -- the policy ---------------------------------------------------------------------------


def policy_page() -> Page:
    from pipeline.bounds.thresholds import Thresholds
    from pipeline.judge.budget import ROUTE_KEYS, JudgeBudget
    from pipeline.judge.question import JudgeConfig
    from pipeline.policy import document
    from pipeline.policy.routing import BELOW_REVIEW_CHOICES, RouteConfig
    from pipeline.rungs.rule_checks import RulesConfig
    from pipeline.rungs.self_consistency import ConsistencyConfig

    columns = ("key", "type", "default", "meaning")
    sections = Table(
        "Sections",
        "The top-level tables a policy may have; any other is refused.",
        ("section", "meaning"),
        tuple(Row(f"[{name}]", (), meaning) for name, meaning in document.SECTIONS.items()),
    )
    loose: dict[str, list[Row]] = {}
    typed = {"switch.on_reject": _toml("SwitchAction")}  # a loose key parsed as an enum
    for dotted, key in document.KEYS.items():
        section, name = dotted.split(".", 1)
        kind = typed.get(dotted, key.type)
        loose.setdefault(section, []).append(Row(name, (kind, _code(key.default)), key.meaning))
    tables = [Table(f"[{section}]", "", columns, tuple(rows)) for section, rows in loose.items()]
    budget = {f.name: f for f in dataclasses.fields(JudgeBudget)}
    budget_doc = _docs("pipeline.judge.budget", "JudgeBudget")
    route_rows = tuple(
        # a string key its validator holds to a set of its own
        dataclasses.replace(row, cells=(f"string: {_one_of(BELOW_REVIEW_CHOICES)}", row.cells[1]))
        if row.name == "below_review_with_judge"
        else row
        for row in _field_rows(
            RouteConfig, "pipeline.policy.routing", skip=("name", "judge_budget"), kind=_toml
        )
    ) + tuple(
        Row(
            key, (_toml(str(budget[field].type)), _code(_default(budget[field]))), budget_doc(field)
        )
        for key, field in ROUTE_KEYS.items()
    )
    tables += [
        Table(
            "[thresholds]",
            "The cut-points; `[routes.NAME.thresholds]` overrides them for one route.",
            columns,
            _field_rows(Thresholds, "pipeline.bounds.thresholds", kind=_toml),
        ),
        Table(
            "[routes.NAME]",
            "One table per route; `[routes.NAME.thresholds]` and `[routes.NAME.grounding]` "
            "hold the route's own fit (`calibrate --route NAME`).",
            columns,
            route_rows,
        ),
        Table(
            "[routes.NAME.judge_band]",
            "The band of P(grounded) a judge is asked about, fitted by `calibrate --judge-share`."
            " Used only where a judge is configured: without one the route decides by its own"
            " cuts and settings. With one, nothing above or below the band is asked.",
            columns,
            tuple(
                Row(key, ("number", "none" if key == "judge_veto_cut" else "the route's cut"), text)
                for key, text in document.JUDGE_BAND_KEYS.items()
            ),
        ),
        Table(
            "[rules]",
            "",
            columns,
            _field_rows(RulesConfig, "pipeline.rungs.rule_checks", kind=_toml),
        ),
        Table(
            "[consistency]",
            "",
            columns,
            _field_rows(ConsistencyConfig, "pipeline.rungs.self_consistency", kind=_toml),
        ),
        Table(
            "[judge]", "", columns, _field_rows(JudgeConfig, "pipeline.judge.question", kind=_toml)
        ),
    ]
    tables += _attach_tables()
    return Page(
        "policy.md",
        "Policy file",
        "Every key of the policy TOML (`--policy`, `GROUNDSTREAM_POLICY`), from the tables "
        "its validator reads: an unknown key or a bad value stops a worker at start-up with "
        "one line naming `section.key`.",
        (sections, *tables),
    )


def _attach_tables() -> list[Table]:
    """`[attach]`: its keys, the fields it maps, a selector's keys and picks, and what each
    preset reads, from the tables `AttachMapping.parse` checks against."""
    import json

    from pipeline.policy import attach

    def rows(table: Mapping[str, str]) -> tuple[Row, ...]:
        return tuple(Row(name, (), meaning) for name, meaning in table.items())

    def selectors(specs: Any) -> str:
        return "; ".join(f"`{json.dumps(s, ensure_ascii=False)}`" for s in specs)

    return [
        Table(
            "[attach]",
            "How `groundstream attach --source TOPIC` turns your own messages into candidates: a"
            " `preset`, a `fields` table, or both.",
            ("key", "meaning"),
            rows(attach.ATTACH_KEYS),
        ),
        Table(
            "[attach.fields]",
            "One list of selectors per candidate field: a scalar field takes the first selector"
            " that yields a value; `question` and `response` are required (a preset gives them).",
            ("field", "meaning"),
            rows(attach.FIELD_MEANINGS),
        ),
        Table(
            "Attach selector",
            'One selector of a field\'s list: `{from = "/request/messages", where = {role ='
            ' ["user"]}, pick = "last", field = "/content"}`, or a bare pointer.',
            ("key", "meaning"),
            rows(attach.SELECTOR_KEYS),
        ),
        Table(
            "Attach pick",
            "The values of a selector's `pick`.",
            ("pick", "meaning"),
            rows(attach.PICK_MEANINGS),
        ),
        *(
            Table(
                f"Attach preset: {name}",
                f'`preset = "{name}"`: the selectors it gives each field (JSON).',
                ("field", "selectors"),
                tuple(Row(field, (), selectors(specs)) for field, specs in preset.items()),
            )
            for name, preset in attach.PRESETS.items()
        ),
    ]


# -- topics -------------------------------------------------------------------------------


def topics_page() -> Page:
    from topics import schema
    from topics.names import TERMINAL, TOPIC_SPECS

    doc = _docs("topics.names", "Topic")
    rows = []
    for spec in TOPIC_SPECS:
        kind = ["terminal"] if spec.topic in TERMINAL else []
        kind += ["compacted"] if spec.compacted else []
        partitions = str(spec.fixed_partitions or "GROUNDSTREAM_PARTITIONS")
        configs = ", ".join(f"`{k}={v}`" for k, v in sorted(spec.configs.items()))
        cells = (", ".join(kind), partitions, configs)
        rows.append(Row(spec.topic.value, cells, doc(spec.topic.name)))
    records = [
        Table(
            f"Record: {cls.__name__}",
            " ".join(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].split()),
            ("field", "type", "default", "meaning"),
            _field_rows(cls, "topics.schema"),
        )
        for cls in (schema.Candidate, schema.Envelope, schema.GeometryPayload, schema.HumanPayload)
    ]
    return Page(
        "topics.md",
        "Topics and records",
        "Every topic of the ladder (each physical name is `GROUNDSTREAM_TOPIC_PREFIX` plus "
        "the name below) and the fields of the records that travel on them.",
        (
            Table(
                "Topics",
                "",
                ("topic", "kind", "partitions", "configs", "meaning"),
                tuple(rows),
            ),
            *records,
        ),
    )


# -- metrics ------------------------------------------------------------------------------

METRIC_KINDS = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "CounterMetricFamily": "counter",
    "GaugeMetricFamily": "gauge",
}


def metric_calls(source: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(name, kind, help, labels) of every metric constructor call in `source`; a call
    whose name or help is not a literal string is an error, never skipped."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in METRIC_KINDS:
            continue
        args = {**dict(enumerate(node.args)), **{k.arg: k.value for k in node.keywords}}
        name, text = args.get(0), args.get(1, args.get("documentation"))
        labels = args.get(2, args.get("labelnames", args.get("labels")))
        if not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in (name, text)):
            raise ValueError(
                f"workers/runtime/metrics.py:{node.lineno}: a metric whose name "
                "and help are not literal strings cannot be documented"
            )
        names = ast.literal_eval(labels) if labels is not None else ()
        kind = METRIC_KINDS[node.func.id]
        out.append((name.value, kind, text.value, tuple(names)))  # type: ignore[union-attr]
    return out


def _exposed(name: str, kind: str) -> tuple[str, str]:
    """The name Prometheus shows and the type, with the series a histogram adds."""
    if kind == "counter":
        return name.removesuffix("_total") + "_total", kind
    if kind == "histogram":
        return name, "histogram (`_bucket`, `_sum`, `_count`)"
    return name, kind


def metrics_page() -> Page:
    source = (ROOT / "workers" / "runtime" / "metrics.py").read_text(encoding="utf-8")
    rows = []
    for name, kind, text, labels in sorted(metric_calls(source)):
        shown, kind_cell = _exposed(name, kind)
        rows.append(Row(shown, (kind_cell, ", ".join(f"`{x}`" for x in labels)), text))
    return Page(
        "metrics.md",
        "Metrics",
        "Every Prometheus metric a worker serves on `/metrics` when "
        "`GROUNDSTREAM_METRICS_PORT` is set (each stage on that port plus its ladder index, "
        "the audit recorder on the port after the last stage's).",
        (Table("Metrics", "", ("metric", "type", "labels", "meaning"), tuple(rows)),),
    )


# -- records and schemas ------------------------------------------------------------------

SCHEMA_DIR = "schemas"
"""docs/reference/schemas/: the JSON Schema files, data beside the pages."""


def _json_type(schema: Mapping[str, Any]) -> str:
    """A field's JSON Schema in a few words for a table cell."""
    if "const" in schema:
        return f"`{schema['const']}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    text = " or ".join(str(k) for k in kinds)
    return text + (" (date-time)" if schema.get("format") == "date-time" else "")


def records_page() -> Page:
    from pipeline.trail.records import OPTIONAL_RECORD_FIELDS, RECORD_FIELDS
    from topics import contracts
    from topics.names import Topic

    missing = [t.value for t in Topic if t not in contracts.CARRIES]
    if missing:
        raise ValueError(f"topics/contracts.py CARRIES: say what {', '.join(missing)} carries")
    outcome = contracts.outcome_schema()["properties"]
    files = tuple(
        Row(name, (f"`docs/reference/{SCHEMA_DIR}/{name}`",), make()["description"])
        for name, make in contracts.SCHEMAS.items()
    )
    return Page(
        "records.md",
        "Records and messages",
        "What a consumer of groundstream's topics reads: which message each topic carries, "
        "the decision and outcome records, the headers, and JSON Schema files to validate "
        "them against. The candidate's and the envelope's fields are on [topics](topics.md).",
        (
            Table(
                "Which topic carries what",
                "The value of each topic's messages. On the topics a candidate travels, "
                "`decisions` and `deadletter`, the key is the candidate's session id, so a "
                "session stays in order on one partition.",
                ("topic", "value"),
                tuple(Row(t.value, (), contracts.CARRIES[t]) for t in Topic),
            ),
            Table(
                "JSON Schema files",
                "Draft 2020-12, generated with these pages; in the repository beside them "
                "(data, not pages of this site). The records are open: a consumer should "
                "ignore a field it does not know.",
                ("file", "path", "what it validates"),
                files,
            ),
            Table(
                "Decision record",
                "Every message of `decisions`: one per stage per candidate, JSON, hash-chained "
                "per candidate (`prev_hash` → `hash`).",
                ("field", "JSON type", "meaning"),
                tuple(
                    Row(
                        name,
                        (
                            _json_type(schema)
                            + (" (some records)" if name in OPTIONAL_RECORD_FIELDS else ""),
                        ),
                        meaning,
                    )
                    for name, (schema, meaning) in RECORD_FIELDS.items()
                ),
            ),
            Table(
                "Outcome record",
                "Each candidate's one terminal outcome is a decision record (above) with these "
                "fields held; `action` is what the caller should do (`accept`: it is on "
                "`state`).",
                ("field", "value", "meaning"),
                tuple(
                    Row(name, (_json_type(outcome[name]),), outcome[name]["description"])
                    for name in ("stage", "topic", "write_to_state")
                ),
            ),
            Table(
                "Headers",
                "Kafka message headers a consumer may read.",
                ("header", "on", "meaning"),
                tuple(
                    Row(name, (where,), meaning)
                    for name, (where, meaning) in contracts.HEADERS.items()
                ),
            ),
        ),
    )


def schema_files() -> dict[str, str]:
    """docs/reference/schemas/NAME → its text, as --write writes it."""
    import json

    from topics import contracts

    return {
        f"{SCHEMA_DIR}/{name}": json.dumps(make(), indent=2, ensure_ascii=False) + "\n"
        for name, make in contracts.SCHEMAS.items()
    }


# -- the Python client ---------------------------------------------------------------------

CLIENT_MODULE = "workers.clients.agent"
CLIENT_CLASSES = ("Client", "AgentClient", "Outcome")
CLIENT_ERRORS = ("CandidateConflict", "OutcomeTimeout")


def _signature(func: Any) -> str:
    """`name(param: type = default, ...) -> returns`, from griffe's reading of the source."""
    params = []
    for p in func.parameters:
        if p.name in ("self", "cls"):
            continue
        text = p.name + (f": {p.annotation}" if p.annotation is not None else "")
        if p.default is not None:
            text += f" = {p.default}"
        if str(p.kind.value) == "keyword-only" and not any(x.startswith("*") for x in params):
            params.append("*")
        params.append(text)
    returns = f" -> {func.returns}" if func.returns is not None else ""
    prefix = "async " if "async" in getattr(func, "labels", set()) else ""
    return f"{prefix}{func.name}({', '.join(params)}){returns}"


def _first_paragraph(doc: Any) -> str:
    return " ".join(doc.value.split("\n\n")[0].split()) if doc is not None else ""


def api_page() -> Page:
    module = griffe.load(CLIENT_MODULE, search_paths=[str(ROOT)], resolve_aliases=False)
    tables = []
    for name in CLIENT_CLASSES:
        cls = module[name]
        rows = []
        for member in cls.members.values():
            public = not member.name.startswith("_") or member.name == "__init__"
            if not public or member.is_alias:
                continue
            if member.is_function and not (member.name == "__init__" and "dataclass" in cls.labels):
                shown = _signature(member).replace("__init__(", f"{name}(", 1)
                if "classmethod" in member.labels:
                    shown = f"{name}.{shown}"
                rows.append(Row(shown, (), _first_paragraph(member.docstring)))
            elif member.is_attribute and "dataclass" in cls.labels:  # a record's fields
                rows.append(
                    Row(
                        f"{member.name}: {member.annotation}",
                        (),
                        _first_paragraph(member.docstring),
                    )
                )
        tables.append(
            Table(name, _first_paragraph(cls.docstring), ("member", "meaning"), tuple(rows))
        )
    errors = tuple(
        Row(
            name,
            (", ".join(str(b) for b in module[name].bases),),
            _first_paragraph(module[name].docstring),
        )
        for name in CLIENT_ERRORS
    )
    tables.append(
        Table("Errors", "What `submit` and `outcome` raise.", ("error", "is a", "meaning"), errors)
    )
    return Page(
        "api.md",
        "Python client",
        f"`{CLIENT_MODULE}`: {_first_paragraph(module.docstring)} How it is used: [the "
        "tutorial](../getting-started/tutorial.md) and [on an existing "
        "cluster](../getting-started/existing-cluster.md#5-submit-or-attach).",
        tuple(tables),
    )


PAGES: tuple[Callable[[], Page], ...] = (
    cli_page,
    settings_page,
    policy_page,
    topics_page,
    records_page,
    api_page,
    metrics_page,
)


def drift(pages: Iterable[Page], read: Callable[[str], str | None]) -> list[str]:
    """One line per difference between the code's pages and the committed ones (`read`
    gives a committed page's text, None when it is missing): items the reference lacks or
    names without the code, items without a meaning, and a page otherwise out of date."""
    problems = []
    for page in pages:
        code, text = page.items(), read(page.file)
        where = f"docs/reference/{page.file}"
        found = [f"{where}: {item} has no meaning" for item, m in code.items() if not m]
        if text is None:
            problems += [*found, f"{where} is missing"]
            continue
        committed = items_of(text)
        found += [f"{where} lacks {item}" for item in sorted(set(code) - set(committed))]
        found += [
            f"{where} names {item}, which the code does not have"
            for item in sorted(set(committed) - set(code))
        ]
        if not found and text != page.render():
            found.append(f"{where} is out of date (an item's text changed)")
        problems += found
    return problems


def schema_drift(read: Callable[[str], str | None]) -> list[str]:
    """One line per JSON Schema file that is missing or differs from the code's."""
    return [
        f"docs/reference/{file} is {'missing' if read(file) is None else 'out of date'}"
        for file, text in schema_files().items()
        if read(file) != text
    ]


def _committed(file: str) -> str | None:
    path = REFERENCE / file
    return path.read_text(encoding="utf-8") if path.is_file() else None


@click.command()
@click.option("--write", "mode", flag_value="write", help="Regenerate docs/reference/.")
@click.option("--check", "mode", flag_value="check", help="Exit 1 naming what is stale.")
def main(mode: str | None) -> None:
    """Regenerate or check the reference pages under docs/reference/."""
    try:
        pages = [make() for make in PAGES]
    except ValueError as exc:  # a metric the page cannot name: one line, no traceback
        raise click.ClickException(str(exc)) from None
    if mode == "write":
        (REFERENCE / SCHEMA_DIR).mkdir(parents=True, exist_ok=True)
        for page in pages:
            (REFERENCE / page.file).write_text(page.render(), encoding="utf-8")
        for file, text in schema_files().items():
            (REFERENCE / file).write_text(text, encoding="utf-8")
        return
    if mode != "check":
        raise click.UsageError("give --write or --check")
    problems = drift(pages, _committed) + schema_drift(_committed)
    if problems:
        click.echo("\n".join(problems) + f"\nregenerate with: {COMMAND}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
