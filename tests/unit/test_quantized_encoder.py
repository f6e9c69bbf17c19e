"""The int8 encoder: exported beside the fp32 graph under a name of its own, run without
torch, close to fp32 but not equal to it, chosen only by GROUNDSTREAM_ENCODER_BACKEND=
onnx-int8, and named as such in decision records; `encoder compare`'s verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from pipeline.encoding.encoder import (
    DEFAULT_MODEL_ID,
    SentenceEncoder,
    default_model_path,
    encoder_id,
)
from pipeline.encoding.onnx_encoder import KEEP_FP32, OnnxModel, export_onnx, onnx_path
from pipeline.policy.defaults import default_policy
from tests.unit.test_onnx_encoder import fixture_texts
from workers.cli import main
from workers.eval.quantized import Comparison, FileResult, Side
from workers.runtime.replay import encoder_id as replay_encoder_id
from workers.runtime.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of its own, exported here: the int8 graph and the fp32 one it is made from."""
    root = tmp_path_factory.mktemp("onnx")
    export_onnx(default_model_path(), root, precision="int8")
    return root


def test_int8_graph_lies_beside_the_fp32_one_under_its_own_name(cache):
    fp32 = onnx_path(default_model_path(), cache)
    int8 = onnx_path(default_model_path(), cache, precision="int8")
    assert fp32.is_file() and int8.is_file()
    assert int8.parent == fp32.parent and int8.name != fp32.name
    graph = onnx.load(str(int8)).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MatMulInteger") == 30  # q, k, v, attention out, intermediate: x 6 layers
    kept = [n.name for n in graph.node if n.op_type == "MatMul" and KEEP_FP32.search(n.name)]
    assert len(kept) == 6  # each layer's feed-forward output stays fp32
    assert int8.stat().st_size < 0.8 * fp32.stat().st_size


def rows(model: OnnxModel, texts: list[str]) -> np.ndarray:
    return np.stack([model.encode_one(t) for t in texts])


def test_int8_embeddings_are_close_to_fp32_but_not_equal(cache):
    texts = fixture_texts()
    fp32 = rows(OnnxModel(default_model_path(), cache=cache), texts)
    int8 = rows(OnnxModel(default_model_path(), cache=cache, precision="int8"), texts)
    cosine = (fp32 * int8).sum(axis=1)  # both rows are unit length
    assert cosine.min() >= 0.98 and cosine.mean() >= 0.99  # measured 0.995, 0.997; broken: ~0
    assert np.abs(fp32 - int8).max() > 1e-3  # quantised, not the fp32 graph again


def test_int8_encoder_runs_without_torch_and_names_its_precision(cache):
    probe = (
        "import sys; from pipeline.encoding.encoder import SentenceEncoder;"
        "e = SentenceEncoder(backend='onnx-int8');"
        "assert e.encode(['A red car is parked.']).shape == (1, 384);"
        "assert 'torch' not in sys.modules; print(e.model_id)"
    )
    env = {**os.environ, "GROUNDSTREAM_ONNX_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == DEFAULT_MODEL_ID + "@int8", done.stderr[-2000:]


class TestTheSetting:
    def test_int8_is_a_backend_of_the_setting(self):
        settings = Settings.from_env({"GROUNDSTREAM_ENCODER_BACKEND": "onnx-int8"})
        assert settings.encoder_backend == "onnx-int8"
        assert Settings.from_env({}).encoder_backend == "torch"  # int8 is opt-in

    def test_an_unknown_precision_names_the_setting_and_the_choices(self):
        with pytest.raises(SettingsError, match="GROUNDSTREAM_ENCODER_BACKEND") as caught:
            Settings.from_env({"GROUNDSTREAM_ENCODER_BACKEND": "onnx-int4"})
        assert "torch, onnx or onnx-int8" in str(caught.value)

    def test_an_unknown_precision_is_refused_by_the_export(self):
        with pytest.raises(ValueError, match="encoder precision 'fp16'"):
            onnx_path(default_model_path(), precision="fp16")
        with pytest.raises(ValueError, match="encoder backend"):
            SentenceEncoder(backend="onnx-fp16")


class TestRecordsNameTheEncoder:
    def test_fp32_backends_share_a_name_and_int8_has_its_own(self):
        assert encoder_id(None, "torch") == encoder_id(None, "onnx") == DEFAULT_MODEL_ID
        assert encoder_id(None, "onnx-int8") == DEFAULT_MODEL_ID + "@int8"
        assert encoder_id("/models/other", "onnx-int8") == "/models/other@int8"

    def test_replay_expects_the_encoder_its_backend_loads(self):
        # A recording made on int8 replays on int8 without --allow-encoder-change.
        assert replay_encoder_id(default_policy(), "onnx-int8") == DEFAULT_MODEL_ID + "@int8"
        assert replay_encoder_id(default_policy()) == DEFAULT_MODEL_ID


def side(sgi: dict[str, float], p: dict[str, float], actions: dict[str, str]) -> Side:
    return Side(sgi=sgi, probability=p, action=actions)


def file_result(int8_sgi_shift: float, int8_actions: dict[str, str]) -> FileResult:
    ids = [f"c{i}" for i in range(4)]
    labels = dict(zip(ids, [True, True, False, False], strict=True))
    sgi = dict(zip(ids, [1.4, 1.3, 1.1, 1.0], strict=True))
    p = dict(zip(ids, [0.9, 0.8, 0.3, 0.2], strict=True))
    fp32_actions = dict.fromkeys(ids, "accept")
    int8 = side({k: v + int8_sgi_shift for k, v in sgi.items()}, p, fp32_actions | int8_actions)
    return FileResult("set.jsonl", labels, side(sgi, p, fp32_actions), int8)


class TestVerdict:
    def test_within_every_bound_the_bar_holds(self):
        result = Comparison([file_result(0.009, {})], (50.0, 100.0), "dynamic")
        assert result.verdict()[0]
        assert "bar HOLDS" in result.report()[-1]

    def test_an_sgi_shift_over_the_bound_fails_it(self):
        assert not Comparison([file_result(0.011, {})], (50.0, 100.0), "dynamic").verdict()[0]

    def test_a_changed_decision_fails_it_and_is_named(self):
        result = Comparison([file_result(0.0, {"c2": "escalate"})], (50.0, 100.0), "dynamic")
        ok, parts = result.verdict()
        assert not ok and "decisions identical 75.00%" in parts[-1]
        assert any("1 of 4 differ): c2" in line for line in result.report())


def test_compare_refuses_to_calibrate_on_what_it_measures(tmp_path):
    data = tmp_path / "set.jsonl"
    data.write_text("")
    done = CliRunner().invoke(main, ["encoder", "compare", str(data), "--calibrate", str(data)])
    assert done.exit_code == 1
    assert done.output.strip().splitlines() == [
        "Error: set.jsonl is both calibration and measured data: calibrate on other texts"
    ]


def test_export_refuses_an_unknown_quantisation():
    done = CliRunner().invoke(main, ["encoder", "export", "--quantize", "int4"])
    assert done.exit_code == 2 and "'int4' is not one of 'none', 'int8'" in done.output


def test_static_recipe_writes_a_qdq_graph_calibrated_on_other_texts(cache, tmp_path, monkeypatch):
    from workers.eval.quantized import static_graph

    monkeypatch.setenv("GROUNDSTREAM_ONNX_DIR", str(cache))
    calibration = tmp_path / "general.jsonl"
    rows = [
        {"ID": i, "user_query": q, "chatgpt_response": r, "hallucination": "no"}
        for i, (q, r) in enumerate(
            [("Who wrote Hamlet?", "Shakespeare wrote it."), ("Boiling point?", "100 °C.")]
        )
    ]  # no context: the calibration texts are questions and answers
    calibration.write_text("\n".join(json.dumps(r) for r in rows))
    fp32 = SentenceEncoder(backend="onnx")
    graph = static_graph(fp32, calibration, tmp_path)
    ops = {n.op_type for n in onnx.load(str(graph)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    static = SentenceEncoder(backend="onnx-int8", graph=graph)
    rows_static = static.encode_uncached(fixture_texts())
    assert rows_static.shape == (len(fixture_texts()), 384)
    assert np.isfinite(rows_static).all()


def test_a_runtime_without_onnx_is_told_how_to_get_the_int8_graph(tmp_path, monkeypatch):
    # The image carries onnxruntime but not onnx: a missing int8 graph is one clear error.
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(FileNotFoundError, match="encoder export --quantize int8"):
        export_onnx(default_model_path(), tmp_path, precision="int8")
    assert not list(tmp_path.rglob("*.onnx"))  # nothing half-exported either


def test_the_ladders_records_name_the_int8_encoder(cache, monkeypatch):
    from workers.runtime.verify import read_lines, run_lines

    monkeypatch.setenv("GROUNDSTREAM_ONNX_DIR", str(cache))
    settings = Settings.from_env({"GROUNDSTREAM_ENCODER_BACKEND": "onnx-int8"})
    lines = read_lines(ROOT / "tests" / "fixtures" / "candidates.jsonl")
    records = run_lines(lines, settings, default_policy(), False).records
    named = {r["evidence"]["encoder"] for r in records if r.get("stage") == "geometry"}
    assert named == {DEFAULT_MODEL_ID + "@int8"}


def test_export_command_prints_where_the_int8_graph_is(cache, monkeypatch):
    monkeypatch.setenv("GROUNDSTREAM_ONNX_DIR", str(cache))
    done = CliRunner().invoke(main, ["encoder", "export", "--quantize", "int8"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == str(onnx_path(default_model_path(), cache, precision="int8"))
    plain = CliRunner().invoke(main, ["encoder", "export"])  # --quantize none: today's fp32
    assert plain.output.strip() == str(onnx_path(default_model_path(), cache))


def test_weights_recipe_keeps_activations_fp32_and_stays_closer_than_dynamic(cache, tmp_path):
    from pipeline.encoding.onnx_encoder import quantize_int8

    fp32_graph = onnx_path(default_model_path(), cache)
    graph = quantize_int8(fp32_graph, tmp_path / "weights.onnx", "weights")
    ops = [n.op_type for n in onnx.load(str(graph)).graph.node]
    assert ops.count("MatMulNBits") == 36  # every dense layer: 6 per layer x 6 layers
    assert "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops
    texts = fixture_texts()
    fp32 = rows(OnnxModel(default_model_path(), cache=cache), texts)
    weights = rows(OnnxModel(default_model_path(), graph=graph), texts)
    dynamic = rows(OnnxModel(default_model_path(), cache=cache, precision="int8"), texts)
    error = 1 - (fp32 * weights).sum(axis=1)
    assert np.abs(fp32 - weights).max() > 1e-5  # quantised, not the fp32 graph again
    # Measured ~0.0002 mean against dynamic's ~0.004: a recipe that quantised activations
    # too (or a broken graph) fails here.
    assert error.mean() < 0.25 * (1 - (fp32 * dynamic).sum(axis=1)).mean()


def test_an_unknown_int8_recipe_is_refused_by_name(tmp_path):
    from pipeline.encoding.onnx_encoder import quantize_int8

    with pytest.raises(ValueError, match="int8 recipe 'int4': expected one of dynamic, weights"):
        quantize_int8(tmp_path / "none.onnx", tmp_path / "out.onnx", "int4")


def test_compare_refuses_a_static_weights_graph_in_one_line(tmp_path):
    data, other = tmp_path / "set.jsonl", tmp_path / "other.jsonl"
    data.write_text("")
    other.write_text("")
    args = ["encoder", "compare", str(data), "--calibrate", str(other), "--recipe", "weights"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 1
    assert done.output.strip().splitlines() == [
        "Error: --calibrate makes a static graph: it does not go with weights"
    ]
