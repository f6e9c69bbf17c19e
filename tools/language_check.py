"""The language guard's figures (pipeline/guards/language.py): how many English texts of the shared
data it tells as another language (none may be), and how many hand-written sentences in six
other languages it tells.

    python tools/language_check.py [--candidates foreign.jsonl]
    groundstream verify foreign.jsonl --out foreign-decisions.jsonl

English: every HaluEval QA right and hallucinated answer, question and knowledge; RAGTruth's
and BEGIN's answers, questions and contexts; the first 600 FaithDial, SummEdits and WiCE
claims and premises (`../shared/data`). Foreign: the sentences below, written for this check
(German, French, Spanish, Italian, Dutch, Portuguese; short and long).

`--candidates` also writes candidates made of them for the end-to-end check (none may reach
`state` under any policy whose routes accept English only): for each sentence, the
sentence as the answer to a context of its language's sentences (copied, so geometry alone
would like it), the same answer to an English context, an English answer to the foreign
context, and a name ("Canberra.", which has no language) as the answer to the foreign
context.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from pipeline.guards.language import detect

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FOREIGN = {
    "de": [
        "Die Hauptstadt von Australien ist Canberra.",
        "Der Vertrag wurde im Jahr 1987 in Berlin unterzeichnet.",
        "Gelöschte Dateien können 90 Tage lang wiederhergestellt werden.",
        "Das Unternehmen hat seinen Umsatz im letzten Quartal deutlich gesteigert.",
        "Er spielte zwölf Jahre lang für den Verein, bevor er Trainer wurde.",
        "Wie lange dauert die Garantie für dieses Gerät?",
        "Die Brücke verbindet die beiden Stadtteile seit dem Ende des Krieges.",
        "Laut dem Bericht ist die Zahl der Arbeitslosen leicht gesunken, während die Preise"
        " für Lebensmittel weiter steigen.",
        "Die Studie zeigt, dass regelmäßige Bewegung das Risiko für Herzkrankheiten um fast"
        " ein Drittel senkt.",
        "Im Sommer fahren viele Familien an die Ostsee, weil die Strände dort flach und sicher"
        " für Kinder sind.",
        "Sie hat an der Universität Wien Medizin studiert und später ein eigenes Labor gegründet.",
        "Nach Angaben der Behörden wurde niemand verletzt.",
    ],
    "fr": [
        "La capitale de l'Australie est Canberra.",
        "Le traité a été signé à Paris en 1987.",
        "Les fichiers supprimés peuvent être restaurés pendant quatre-vingt-dix jours.",
        "L'entreprise a fortement augmenté son chiffre d'affaires au dernier trimestre.",
        "Il a joué douze ans pour le club avant de devenir entraîneur.",
        "Combien de temps dure la garantie de cet appareil ?",
        "Selon le rapport, le nombre de chômeurs a légèrement baissé, tandis que les prix de"
        " l'alimentation continuent d'augmenter.",
        "L'étude montre qu'une activité physique régulière réduit le risque de maladie"
        " cardiaque de près d'un tiers.",
        "Elle a étudié la médecine à Lyon puis a fondé son propre laboratoire.",
        "Selon les autorités, personne n'a été blessé.",
    ],
    "es": [
        "La capital de Australia es Canberra.",
        "El tratado se firmó en Madrid en 1987.",
        "Los archivos eliminados se pueden recuperar durante noventa días.",
        "La empresa aumentó mucho sus ventas en el último trimestre.",
        "Jugó doce años en el club antes de ser entrenador.",
        "¿Cuánto dura la garantía de este aparato?",
        "Según el informe, el número de desempleados bajó un poco, mientras los precios de"
        " los alimentos siguen subiendo.",
        "El estudio muestra que el ejercicio regular reduce el riesgo de enfermedad cardíaca"
        " en casi un tercio.",
        "Estudió medicina en Sevilla y después fundó su propio laboratorio.",
        "Según las autoridades, nadie resultó herido.",
    ],
    "it": [
        "La capitale dell'Australia è Canberra.",
        "Il trattato è stato firmato a Roma nel 1987.",
        "I file eliminati possono essere recuperati per novanta giorni.",
        "L'azienda ha aumentato molto il fatturato nell'ultimo trimestre.",
        "Ha giocato dodici anni nella squadra prima di diventare allenatore.",
        "Secondo il rapporto, il numero dei disoccupati è sceso leggermente, mentre i prezzi"
        " del cibo continuano a salire.",
        "Lo studio mostra che l'attività fisica regolare riduce il rischio di malattie"
        " cardiache di quasi un terzo.",
        "Secondo le autorità, nessuno è rimasto ferito.",
    ],
    "nl": [
        "De hoofdstad van Australië is Canberra.",
        "Het verdrag werd in 1987 in Amsterdam ondertekend.",
        "Verwijderde bestanden kunnen negentig dagen lang worden hersteld.",
        "Het bedrijf heeft zijn omzet in het laatste kwartaal sterk verhoogd.",
        "Volgens het rapport is het aantal werklozen licht gedaald, terwijl de prijzen van"
        " voedsel blijven stijgen.",
        "Volgens de autoriteiten is niemand gewond geraakt.",
    ],
    "pt": [
        "A capital da Austrália é Canberra.",
        "O tratado foi assinado em Lisboa em 1987.",
        "Os arquivos apagados podem ser recuperados durante noventa dias.",
        "Segundo o relatório, o número de desempregados caiu um pouco, enquanto os preços dos"
        " alimentos continuam a subir.",
        "Segundo as autoridades, ninguém ficou ferido.",
    ],
}


def english_texts() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in (DATA / "halueval_qa_dev.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        for field in ("right_answer", "hallucinated_answer", "knowledge", "question"):
            out.append((f"halueval.{field}", r[field]))
    for name in ("ragtruth_dev.jsonl", "begin_dev.jsonl"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            context = r["context"] if isinstance(r["context"], str) else "\n".join(r["context"])
            out += [(f"{name}.context", context), (f"{name}.response", r["response"])]
            out.append((f"{name}.question", r["question"]))
    for name in ("faithdial_audit", "summedits", "wice"):
        with gzip.open(DATA / "claims" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            for n, line in enumerate(handle):
                if n >= 600:
                    break
                r = json.loads(line)
                out += [(f"{name}.{k}", r[k] or "") for k in ("hypothesis", "premise")]
    return out


ENGLISH_CONTEXT = (
    "The capital of Australia is Canberra. The treaty was signed in 1987. Deleted files can"
    " be restored for ninety days, after which they are purged."
)
ENGLISH_ANSWER = "According to the source, nobody was hurt and the capital is Canberra."


def foreign_candidates() -> list[dict[str, object]]:
    """Candidates in the sentences' languages, each of which a guard must keep from `state`."""
    out: list[dict[str, object]] = []
    for lang, sentences in FOREIGN.items():
        context = " ".join(sentences)
        question = next((s for s in sentences if s.endswith("?")), sentences[0])
        for i, sentence in enumerate(sentences):
            for kind, ctx, answer in (
                ("copied", context, sentence),
                ("english-context", ENGLISH_CONTEXT, sentence),
                ("english-answer", context, ENGLISH_ANSWER),
                ("name", context, "Canberra."),
            ):
                if kind in ("english-answer", "name") and i:
                    continue  # one a language
                out.append(
                    {
                        "id": f"{lang}-{kind}-{i:02d}",
                        "session_id": f"{lang}-{kind}-{i:02d}",
                        "turn": 1,
                        "initiator": "user",
                        "question": question,
                        "context": ctx,
                        "response": answer,
                    }
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=Path, help="also write the foreign candidates here")
    args = parser.parse_args()
    if args.candidates is not None:
        rows = foreign_candidates()
        args.candidates.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} foreign candidates written to {args.candidates}")
    texts = english_texts()
    told_other = [(where, t[:60]) for where, t in texts if detect(t).language not in (None, "en")]
    right = [t for where, t in texts if where == "halueval.right_answer"]
    not_told = sum(detect(t).language is None for t in right)
    print(f"English texts told as another language: {len(told_other)} of {len(texts)}")
    for where, text in told_other[:10]:
        print(f"  {where}: {text!r}")
    print(f"HaluEval QA right answers whose language cannot be told: {not_told} of {len(right)}")
    told = [(lang, s) for lang, sentences in FOREIGN.items() for s in sentences]
    hits = [(lang, s, detect(s)) for lang, s in told]
    right_told = sum(d.language == lang for lang, _, d in hits)
    print(f"foreign sentences told as their language: {right_told} of {len(told)}")
    for lang, sentence, found in hits:
        if found.language != lang:
            print(f"  {lang}: {found.language} ({found.confidence:.2f}) {sentence!r}")


if __name__ == "__main__":
    main()
