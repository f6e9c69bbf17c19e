"""Memory that stays bounded: what the geometry worker keeps resident, and the
setting its embedding cache follows. The figures are in docs/lab/performance-log.md."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from pipeline.encoding.encoder import SentenceEncoder
from pipeline.guards.language import _identifier
from workers.runtime.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]


def test_the_language_identifier_reads_as_py3langids_own_loader() -> None:
    """The no-copy load (a 30 MiB transient less) tells every text as py3langid's does."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    theirs = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    texts = [
        "The reservoir is fed by the Calder River, which rises on Mount Fell.",
        "Das Reservoir wird vom Fluss Calder gespeist, der am Mount Fell entspringt.",
        "Le réservoir est alimenté par la rivière Calder, qui prend sa source au mont Fell.",
        "El embalse se alimenta del río Calder, que nace en el monte Fell.",
        "貯水池はカルダー川から水が供給されている。",
        "1871",
        "",
    ]
    assert [_identifier().classify(t) for t in texts] == [theirs.classify(t) for t in texts]


def test_the_encoder_cache_is_a_setting_and_reaches_the_stage_encoder(monkeypatch) -> None:
    from pipeline.policy.document import load_policy
    from workers.clients import encoder as clients
    from workers.runtime.verify import make_context

    assert Settings().encoder_cache_rows == 20_000
    settings = Settings.from_env({"GROUNDSTREAM_ENCODER_CACHE_ROWS": "5"})
    with pytest.raises(SettingsError):
        Settings.from_env({"GROUNDSTREAM_ENCODER_CACHE_ROWS": "0"})
    ctx = make_context(settings, load_policy())
    asked = []
    monkeypatch.setattr(clients, "load_encoder", lambda *args: asked.append(args) or "enc")
    assert clients.stage_encoder(ctx) == "enc"
    assert asked == [(ctx.policy.encoder_model, "torch", 5)]


def test_the_cache_holds_at_most_its_rows() -> None:
    """The bound the setting sets: the oldest embeddings go, the newest stay."""

    class Model:
        dimension = 4
        max_seq_length = 8

        def encode_one(self, text: str) -> np.ndarray:
            return np.full(4, len(text), dtype=np.float32)

    encoder = SentenceEncoder.__new__(SentenceEncoder)  # no model loaded: a stand-in
    encoder._model = Model()
    encoder._cache = OrderedDict()
    encoder._cache_size = 3
    encoder.cache_lookups = encoder.cache_hits = 0
    encoder.model_seconds = 0.0
    encoder.encode(["a", "bb", "ccc", "dddd", "eeeee"])
    assert len(encoder._cache) == 3
    encoder.encode(["eeeee"])
    assert encoder.cache_hits == 1


@pytest.mark.integration  # loads torch and the model in a fresh interpreter
def test_a_cpu_torch_encoder_keeps_triton_out_and_still_encodes() -> None:
    """triton (GPU kernels only) is ~70 MiB resident once imported; the CPU encoder's
    process never imports it, and encodes as before."""
    code = (
        "import sys\n"
        "from pipeline.encoding.encoder import SentenceEncoder\n"
        "e = SentenceEncoder(backend='torch')\n"
        "row = e.encode(['The reservoir is fed by the Calder River.'])[0]\n"
        "print(sys.modules.get('triton', 'absent'), row.shape, round(float(row @ row), 4))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "(384,)", "1.0"]
