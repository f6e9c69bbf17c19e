"""The consistency stage with an NLI cross-encoder configured by path (GROUNDSTREAM_NLI_MODEL).

The models are tiny BERT classifiers built here with a fixed classifier bias, so their
verdict is known: one says every pair entails (all samples mean the same), the other that
none does. Real sentence-transformers loading, real tokenizer, real forward pass: this
checks the loading and the stage's wiring; that the matrix follows the texts is checked
with a text-dependent fake in tests/unit/test_nli.py.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import torch

from pipeline.policy.document import parse_policy
from topics.codec import loads
from topics.schema import Candidate, Envelope
from workers.clients.nli import NliSimilarity
from workers.interfaces import EndpointConfig, Inbound, StageContext
from workers.stages.consistency import ConsistencyStage

LABELS = {0: "contradiction", 1: "entailment", 2: "neutral"}


def _tiny_nli(directory: Path, bias: list[float]) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    from pipeline.encoding.encoder import default_model_path

    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(directory)
    shutil.copy(default_model_path() / "vocab.txt", directory / "vocab.txt")
    BertTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nli")
    return {
        "agree": _tiny_nli(root / "agree", [0.0, 8.0, 0.0]),
        "disagree": _tiny_nli(root / "disagree", [8.0, 0.0, 0.0]),
    }


def test_matrix_is_the_smaller_bidirectional_entailment(models: dict[str, Path]) -> None:
    nli = NliSimilarity(str(models["agree"]))
    m = nli.matrix(["a cat sat", "the cat was sitting", "dogs bark"])
    assert m.shape == (3, 3)
    assert (m == m.T).all()
    assert m.min() > 0.99  # the fixed bias makes every pair entail
    low = NliSimilarity(str(models["disagree"])).matrix(["a", "b"])
    assert low[0, 1] < 0.01 and low[0, 0] == 1.0


def test_missing_model_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="GROUNDSTREAM_NLI_MODEL"):
        NliSimilarity(str(tmp_path / "absent"))


def _run(model: Path) -> dict:
    policy = parse_policy({"consistency": {"same_meaning": 0.5, "agree_threshold": 0.5}})
    stage = ConsistencyStage(EndpointConfig(), nli_model=str(model))
    candidate = Candidate(
        id="nli-1",
        session_id="s",
        question="When does the shop close?",
        response="It closes at six.",
        samples=("It closes at six.", "Closing time is six.", "It shuts at 6 pm."),
    )
    env = Envelope(candidate, route="default", mode="evaluate")
    emits = asyncio.run(stage.process([Inbound(b"s", env.encode())], StageContext(policy=policy)))
    return loads(emits[0].value)


def test_stage_groups_samples_by_entailment(models: dict[str, Path]) -> None:
    agree = _run(models["agree"])
    assert agree["action"] == "committed"
    assert agree["evidence"]["similarity"] == "nli"
    # The same samples, judged by a model that finds no entailment: several meanings compete.
    disagree = _run(models["disagree"])
    assert disagree["action"] == "requires_clarification"
