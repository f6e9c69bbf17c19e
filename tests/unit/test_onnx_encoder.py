"""The ONNX Runtime encoder gives the torch path's embeddings and windows, and is selected by
GROUNDSTREAM_ENCODER_BACKEND (validated like every setting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.encoding.chunks import context_chunks
from pipeline.encoding.encoder import SentenceEncoder
from pipeline.encoding.onnx_encoder import onnx_path
from topics.codec import loads
from workers.runtime.settings import Settings, SettingsError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture_texts() -> list[str]:
    """Every question, response and context chunk of the shared candidate fixtures."""
    texts: list[str] = []
    for line in (FIXTURES / "candidates.jsonl").read_text().splitlines():
        c = loads(line)
        chunks = context_chunks(c.get("context")) or ()
        texts += [t for t in (c.get("question"), c.get("response"), *chunks) if t]
    return texts


@pytest.fixture(scope="module")
def encoders() -> tuple[SentenceEncoder, SentenceEncoder]:
    return SentenceEncoder(backend="torch"), SentenceEncoder(backend="onnx")


def test_onnx_embeddings_equal_torch_within_1e4_cosine(encoders):
    torch_enc, onnx_enc = encoders
    texts = fixture_texts()
    assert len(texts) > 20
    a, b = torch_enc.encode_uncached(texts), onnx_enc.encode_uncached(texts)
    assert a.shape == b.shape and b.dtype == np.float32
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() >= 1 - 1e-4


@pytest.mark.parametrize("backend", [0, 1], ids=["torch", "onnx"])
def test_a_texts_embedding_does_not_depend_on_its_batch(encoders, backend):
    """Issue 33: batched, torch's rows moved by ~1e-7 with the batch's shape and a fitted cut
    could fall between two runs. Encoded alone, a text's row is bit-identical whatever it
    is encoded with, in whatever order."""
    encoder = encoders[backend]
    texts = fixture_texts()
    together = encoder.encode_uncached(texts)
    shuffled = [*reversed(texts[:7]), "an unrelated sentence of another length"]
    apart = encoder.encode_uncached(shuffled)
    assert np.array_equal(apart[:7][::-1], together[:7])
    for i in (0, 3):
        assert np.array_equal(encoder.encode_uncached([texts[i]])[0], together[i])


def test_onnx_windows_equal_torch_windows(encoders):
    torch_enc, onnx_enc = encoders
    long = " ".join(fixture_texts()) * 3  # well over one 254-token window
    assert len(torch_enc.windows(long)) > 2
    assert onnx_enc.windows(long) == torch_enc.windows(long)
    assert onnx_enc.window_tokens == torch_enc.window_tokens == 254


def test_export_cache_key_follows_the_weights(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"a")
    first = onnx_path(model, tmp_path / "cache")
    (model / "model.safetensors").write_bytes(b"ab")
    assert onnx_path(model, tmp_path / "cache") != first
    assert first.is_relative_to(tmp_path / "cache")


def test_backend_setting_is_validated():
    assert Settings.from_env({}).encoder_backend == "torch"
    assert Settings.from_env({"GROUNDSTREAM_ENCODER_BACKEND": "onnx"}).encoder_backend == "onnx"
    with pytest.raises(SettingsError, match="GROUNDSTREAM_ENCODER_BACKEND"):
        Settings.from_env({"GROUNDSTREAM_ENCODER_BACKEND": "tensorflow"})


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="encoder backend"):
        SentenceEncoder(backend="tensorflow")


def test_the_embedded_ladder_loads_the_backend_the_setting_names(monkeypatch):
    # `verify` and `eval` (the embedded ladder) must honour the setting as the workers do.
    from pipeline.policy.defaults import default_policy
    from workers.clients import encoder as stage_encoders
    from workers.runtime.verify import make_context

    loaded: list[str] = []
    monkeypatch.setattr(
        stage_encoders, "load_encoder", lambda model, backend, rows: loaded.append(backend)
    )
    settings = Settings.from_env({"GROUNDSTREAM_ENCODER_BACKEND": "onnx"})
    stage_encoders.stage_encoder(make_context(settings, default_policy()))
    assert loaded == ["onnx"]


def test_an_image_can_keep_its_export_outside_the_cache(monkeypatch, tmp_path):
    from pipeline.encoding.onnx_encoder import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GROUNDSTREAM_ONNX_DIR", raising=False)
    assert cache_root() == tmp_path / "xdg" / "groundstream" / "onnx"
    monkeypatch.setenv("GROUNDSTREAM_ONNX_DIR", str(tmp_path / "baked"))
    assert cache_root() == tmp_path / "baked"


def test_model_time_counts_only_texts_the_cache_misses(encoders):
    # `bench latency`'s one encode: the model time of scoring one candidate from an empty cache.
    torch_enc, _ = encoders
    torch_enc.clear_cache()
    before = torch_enc.model_seconds
    torch_enc.encode(["A first text.", "A second text.", "A first text."])
    spent = torch_enc.model_seconds - before
    assert spent > 0
    torch_enc.encode(["A second text."])
    assert torch_enc.model_seconds - before == spent  # served from the cache
    torch_enc.clear_cache()
    hits = torch_enc.cache_hits
    torch_enc.encode(["A second text."])
    assert torch_enc.model_seconds - before > spent and torch_enc.cache_hits == hits
