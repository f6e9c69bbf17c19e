"""An agent loop that protects its state: an answer joins the history only once accepted.

Seed 000's "protect state" pattern over Kafka. The agent drafts an answer, submits it
through the gate, and appends it to its history only when the outcome is `accept`;
otherwise it follows the outcome's action — regenerate once, or fall back to a safe answer
that is shown to the user but never becomes context for the next turn. Run the workers
first (`groundstream topics create`, `groundstream worker all`), then:

    GROUNDSTREAM_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/agent_loop.py

The drafts below are canned so the example needs no model; an agent puts its LLM there.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable

from workers.clients.agent import Client, OutcomeTimeout

FALLBACK = "I could not verify an answer to that from the sources I have."

TURNS = [
    (
        "What time does the Riverside branch library close on Saturdays?",
        ["The Riverside branch library opens at 9 am on weekdays and at 10 am on "
         "Saturdays. It closes at 8 pm on weekdays and at 5 pm on Saturdays."],
        ["The Riverside branch closes at 5 pm on Saturdays.",
         "It closes at midnight on Saturdays, with live jazz in the lobby."],
    ),
]  # fmt: skip


def gated_turn(
    client: Client,
    session: str,
    turn: int,
    question: str,
    context: list[str],
    drafts: list[str],
    history: list[str],
    say: Callable[[str], None] = print,
) -> str:
    """One turn: submit drafts until one is accepted or the gate says stop; the answer
    shown. Only an accepted answer is appended to `history`."""
    for draft in drafts:
        candidate = {
            "id": f"{session}-{turn}-{uuid.uuid4().hex[:8]}",
            "session_id": session,
            "turn": turn,
            "initiator": "user",
            "question": question,
            "context": context,  # the history is the agent's own words: never evidence
            "response": draft,
        }
        try:
            outcome = client.submit(candidate, timeout=60)
        except OutcomeTimeout as exc:
            say(f"(not verified in time: {exc})")
            return FALLBACK
        if outcome.accepted:
            history.append(draft)
            return draft
        say(f"(gate: {outcome.action} — {outcome.reason})")
        if outcome.action != "regenerate":
            break  # fallback, reject, escalate: do not keep trying drafts
    return FALLBACK


def main() -> int:
    bootstrap = os.environ.get("GROUNDSTREAM_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    prefix = os.environ.get("GROUNDSTREAM_TOPIC_PREFIX", "")
    session = f"example-{uuid.uuid4().hex[:8]}"
    history: list[str] = []
    with Client(bootstrap, prefix) as client:
        for turn, (question, context, drafts) in enumerate(TURNS, start=1):
            print(f"user: {question}")
            print(f"agent: {gated_turn(client, session, turn, question, context, drafts, history)}")
    print(f"history holds {len(history)} accepted answer(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
