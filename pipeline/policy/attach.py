"""Attach: a user's own messages mapped to candidates by a declarative mapping.

`groundstream attach --source TOPIC` gates an existing bus without changing the agents
that write it. Each message is read through a mapping kept in the policy (`[attach]`):
for every candidate field — id, session, turn, initiator, question, context, response,
route — a list of selectors, each a JSON pointer (RFC 6901) into the message, optionally
narrowed when it points at a list:

    question = [{from = "/request/messages", where = {role = ["user"]}, pick = "last",
                 field = "/content"}]

`where` keeps the list items whose keys hold one of the values given; `pick` is `first`,
`last`, `all` (context) or `count` (turn); `field` is a pointer into each picked item;
`values` renames what was read (e.g. a role to an initiator). The pointer `$key` reads
the Kafka message key. A scalar field takes the first selector that yields a value; the
context takes everything every selector yields. Message contents in OpenAI's part-list
form (`[{"type": "text", "text": …}]`) are joined into text.

Presets cover the two OpenAI shapes as request/response pairs on one message —
`openai-chat` (`{"request": chat.completions request, "response": chat.completion}`) and
`openai-responses` (the Responses API) — with the question taken from the last user
message, the context from the tool (and retrieval) messages, the response from the
assistant's message.

What a message becomes (`map_message`):
* a candidate, when a response is found and the rest of the mapping reads;
* pass-through, when it carries no response (a system message, a user turn, a tool call):
  it is copied untouched to the pass-through topic;
* unreadable, with the reason, when it is not a JSON object or a response is found but the
  question or session is not: it goes to `deadletter`.

Ids are deterministic, so attaching the same offsets twice yields the same candidates:
the message's own id where the mapping finds one (a completion's `id`), else
`attach:<topic>/<partition>/<offset>`. Pure: no Kafka; the schema check is the shell's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from pipeline.errors import PolicyError

KEY = "$key"
INITIATORS = ("user", "agent")

ATTACH_KEYS: Mapping[str, str] = {
    "preset": "A mapping for a known message shape, one of the presets below.",
    "fields": "A table of candidate field = [selectors]; a field given here replaces the preset's.",
}
"""The keys of `[attach]` (docs/reference/policy.md prints these tables)."""

FIELD_MEANINGS: Mapping[str, str] = {
    "id": "The candidate id; unset or not found: `attach:<topic>/<partition>/<offset>`.",
    "session": "The session id (required: a message without one is dead-lettered); "
    f"`{KEY}` reads the Kafka message key.",
    "turn": 'The turn number, an integer (`pick = "count"` counts the user messages).',
    "initiator": f"Who started the turn: {' or '.join(INITIATORS)} (`values` renames what is "
    "read); anything else is a user.",
    "question": "The question (required: a message with a response but none is dead-lettered).",
    "context": "The sources the answer must rest on: everything every selector yields.",
    "response": "The answer to verify; a message without one is passed through, not a candidate.",
    "route": "The route the candidate is decided by; not found: as for any candidate (the "
    "route serving its task, else the default).",
}
"""Each candidate field `[attach.fields]` may map, and what it becomes."""
FIELDS = tuple(FIELD_MEANINGS)

SELECTOR_KEYS: Mapping[str, str] = {
    "from": f"A JSON pointer (RFC 6901, `/a/0/b`) into the message, or `{KEY}` for its key; "
    "a selector written as a bare string is this key alone.",
    "where": "Where `from` is a list: keep the items whose keys hold one of the values given "
    '(`{role = ["user"]}`).',
    "pick": "Which of the kept items: one of the picks below.",
    "field": "A JSON pointer read in each picked item (`/content`).",
    "values": 'A table renaming what was read (`{tool = "agent"}`).',
}
"""The keys of one selector (see the module docstring)."""

PICK_MEANINGS: Mapping[str, str] = {
    "first": "The first item (the default).",
    "last": "The last item.",
    "all": "Every item (for `context`).",
    "count": "How many items there are (for `turn`).",
}
PICKS = tuple(PICK_MEANINGS)


class Kind(StrEnum):
    CANDIDATE = "candidate"
    PASS_THROUGH = "pass_through"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Selector:
    """One way to read a field; see the module docstring."""

    pointer: str
    where: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    pick: str = "first"
    item: str = ""
    """The `field` pointer, read in each picked item."""
    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: Any, where: str) -> Selector:
        if isinstance(spec, str):
            spec = {"from": spec}
        if not isinstance(spec, Mapping) or not isinstance(spec.get("from"), str):
            raise PolicyError(where, spec, "a JSON pointer, or a table with `from`")
        unknown = sorted(set(spec) - set(SELECTOR_KEYS))
        if unknown:
            raise PolicyError(f"{where}.{unknown[0]}", spec[unknown[0]], ", ".join(SELECTOR_KEYS))
        pick = spec.get("pick", "first")
        if pick not in PICKS:
            raise PolicyError(f"{where}.pick", pick, f"one of {', '.join(PICKS)}")
        raw_where = spec.get("where", {})
        if not isinstance(raw_where, Mapping):
            raise PolicyError(f"{where}.where", raw_where, "a table of key = [values]")
        narrowed = {
            str(k): tuple(v) if isinstance(v, list | tuple) else (v,) for k, v in raw_where.items()
        }
        values = spec.get("values", {})
        if not isinstance(values, Mapping):
            raise PolicyError(f"{where}.values", values, "a table of read = written")
        for name in ("from", "field"):
            pointer = spec.get(name, "")
            if not isinstance(pointer, str) or (
                pointer and pointer != KEY and not pointer.startswith("/")
            ):
                raise PolicyError(f"{where}.{name}", pointer, "a JSON pointer ('/a/0/b') or $key")
        return cls(spec["from"], narrowed, pick, str(spec.get("field", "")), dict(values))


@dataclass(frozen=True, slots=True)
class AttachMapping:
    """Selectors per candidate field."""

    fields: Mapping[str, tuple[Selector, ...]]

    @classmethod
    def parse(cls, spec: Mapping[str, Any], where: str = "attach") -> AttachMapping:
        """From the policy's `[attach]`: a `preset`, a `fields` table, or both (the
        table's fields replace the preset's)."""
        preset = spec.get("preset")
        base: dict[str, Any] = {}
        if preset is not None:
            if preset not in PRESETS:
                raise PolicyError(f"{where}.preset", preset, f"one of {', '.join(PRESETS)}")
            base = dict(PRESETS[preset])
        own = spec.get("fields", {})
        if not isinstance(own, Mapping):
            raise PolicyError(f"{where}.fields", own, "a table of field = [selectors]")
        merged = {**base, **own}
        unknown = sorted(set(merged) - set(FIELDS))
        if unknown:
            raise PolicyError(f"{where}.fields.{unknown[0]}", merged[unknown[0]], ", ".join(FIELDS))
        for required in ("question", "response"):
            if required not in merged:
                raise PolicyError(f"{where}.fields.{required}", None, "a selector (or a preset)")
        parsed = {}
        for name, selectors in merged.items():
            items = selectors if isinstance(selectors, list | tuple) else [selectors]
            parsed[name] = tuple(
                Selector.parse(s, f"{where}.fields.{name}[{i}]") for i, s in enumerate(items)
            )
        return cls(parsed)


_MISSING = object()


def resolve(doc: Any, pointer: str) -> Any:
    """RFC 6901: the value at `pointer`, or _MISSING."""
    if pointer == "":
        return doc
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, Mapping):
            if token not in doc:
                return _MISSING
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            return _MISSING
    return doc


def text_of(value: Any) -> str | None:
    """Message content as text: a string, or the text parts of an OpenAI part list."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return text_of(value["text"])
    if isinstance(value, list):
        parts = [t for t in (text_of(p) for p in value) if t is not None]
        return "\n".join(parts) if parts else None
    return None


def _matches(item: Any, where: Mapping[str, tuple[Any, ...]]) -> bool:
    return isinstance(item, Mapping) and all(item.get(k) in v for k, v in where.items())


def read(selector: Selector, doc: Any, key: bytes | None) -> list[Any]:
    """What one selector yields (empty when nothing is there)."""
    if selector.pointer == KEY:
        found: Any = key.decode("utf-8", "replace") if key else _MISSING
    else:
        found = resolve(doc, selector.pointer)
    if found is _MISSING or found is None:
        return []
    if selector.where or selector.pick != "first" or (isinstance(found, list) and selector.item):
        items = (
            [i for i in found if _matches(i, selector.where)]
            if isinstance(found, list)
            else [found]
        )
        if selector.pick == "count":
            return [len(items)]
        if selector.pick == "first":
            items = items[:1]
        elif selector.pick == "last":
            items = items[-1:]
        values = [resolve(i, selector.item) if selector.item else i for i in items]
    else:
        values = [found]
    values = [selector.values.get(v, v) if isinstance(v, str) else v for v in values]
    return [v for v in values if v is not _MISSING and v is not None]


def _first(selectors: Sequence[Selector], doc: Any, key: bytes | None) -> Any:
    for selector in selectors:
        for value in read(selector, doc, key):
            return value
    return None


@dataclass(frozen=True, slots=True)
class Mapped:
    kind: Kind
    candidate: dict[str, Any] | None = None
    reason: str = ""


def map_message(
    value: bytes | None,
    key: bytes | None,
    mapping: AttachMapping,
    *,
    topic: str,
    partition: int,
    offset: int,
) -> Mapped:
    """One message of the user's topic: a candidate, pass-through, or unreadable."""
    try:
        doc = orjson.loads(value) if value else None
    except orjson.JSONDecodeError as exc:
        return Mapped(Kind.UNREADABLE, reason=f"not JSON: {exc}")
    if not isinstance(doc, dict):
        return Mapped(Kind.UNREADABLE, reason="not a JSON object")
    f = mapping.fields
    response = text_of(_first(f["response"], doc, key))
    if response is None:
        return Mapped(Kind.PASS_THROUGH, reason="no response: not a candidate")
    question = text_of(_first(f["question"], doc, key))
    if question is None:
        return Mapped(Kind.UNREADABLE, reason="attach mapping: no question in the message")
    session = _first(f.get("session", ()), doc, key)
    if not isinstance(session, str | int) or isinstance(session, bool) or not str(session).strip():
        return Mapped(Kind.UNREADABLE, reason="attach mapping: no session id in the message")
    own_id = _first(f.get("id", ()), doc, key)
    cid = str(own_id) if isinstance(own_id, str | int) and str(own_id).strip() else None
    candidate: dict[str, Any] = {
        "id": cid or f"attach:{topic}/{partition}/{offset}",
        "session_id": str(session),
        "question": question,
        "response": response,
    }
    turn = _first(f.get("turn", ()), doc, key)
    if isinstance(turn, int) and not isinstance(turn, bool):
        candidate["turn"] = turn
    initiator = _first(f.get("initiator", ()), doc, key)
    if initiator in INITIATORS:  # anything else (a system role) is the default, a user
        candidate["initiator"] = initiator
    context = [
        t
        for selector in f.get("context", ())
        for t in (text_of(v) for v in read(selector, doc, key))
        if t is not None
    ]
    if context:
        candidate["context"] = context
    route = _first(f.get("route", ()), doc, key)
    if isinstance(route, str) and route.strip():
        candidate["route"] = route
    return Mapped(Kind.CANDIDATE, candidate)


def _items(source: str, pick: str, field: str = "", **where: list[str]) -> dict[str, Any]:
    """A list selector, written short for the presets."""
    spec: dict[str, Any] = {"from": source, "pick": pick, "where": where}
    return {**spec, "field": field} if field else spec


_SESSION = ["/metadata/session_id", "/request/metadata/session_id", "/request/user", KEY]
_ROUTE = ["/metadata/route", "/request/metadata/route"]
_CHAT = "/request/messages"
_INPUT = "/request/input"

PRESETS: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "id": ["/response/id"],
        "session": _SESSION,
        "turn": [_items(_CHAT, "count", role=["user"])],
        "initiator": [
            {
                **_items(_CHAT, "last", "/role"),
                "values": {"tool": "agent", "function": "agent", "assistant": "agent"},
            }
        ],
        "question": [_items(_CHAT, "last", "/content", role=["user"])],
        "context": [
            _items(_CHAT, "all", "/content", role=["tool", "function"]),
            _items(_CHAT, "all", "/content", name=["retrieval", "context", "documents"]),
        ],
        "response": ["/response/choices/0/message/content"],
        "route": _ROUTE,
    },
    "openai-responses": {
        "id": ["/response/id"],
        "session": _SESSION,
        "turn": [_items(_INPUT, "count", role=["user"])],
        "initiator": [
            {**_items(_INPUT, "last", "/type"), "values": {"function_call_output": "agent"}}
        ],
        "question": [_items(_INPUT, "last", "/content", role=["user"]), _INPUT],
        "context": [_items(_INPUT, "all", "/output", type=["function_call_output"])],
        "response": [
            _items("/response/output", "last", "/content", type=["message"]),
            "/response/output_text",
        ],
        "route": _ROUTE,
    },
}
"""The OpenAI shapes as request/response pairs (see the module docstring)."""
