"""`benchmarks.quantized_engine` in miniature: every engine decodes, and the table compares them."""

import json
import math
import os

import pytest

pytestmark = [pytest.mark.backend_independent, pytest.mark.end_to_end]


def test_the_quantized_engine_benchmark_times_each_engine_at_each_search_and_batch(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    pytest.importorskip("jax")
    from benchmarks import quantized_engine

    cache = os.environ.get("KERAS_TRANSFORMER_CACHE_DIR")
    out = tmp_path / "out"
    quantized_engine.main(["--out", str(out), "--shape", "tiny", "--new-tokens", "4", "--repeats", "1",
                          "--lone-rows", "4", "--ctranslate2-per-core"])
    assert os.environ.get("KERAS_TRANSFORMER_CACHE_DIR") == cache  # its scratch cache is not left behind
    rows = json.loads((out / "results.json").read_text())["rows"]
    engines = ["engine float32", "engine int8", "CTranslate2 float32", "CTranslate2 int8",
               "CTranslate2 float32, a batch a core", "CTranslate2 int8, a batch a core"]
    padded = "engine int8, a lone sentence in 4 rows"  # greedy's lone sentence only
    cells = [(search, sentences) for search, (_, batch) in quantized_engine.SEARCHES.items() for sentences in (1, batch)]
    assert [(row["search"], row["sentences"], row["engine"]) for row in rows] == [
        (search, sentences, engine) for search, sentences in cells
        for engine in engines + ([padded] if (search, sentences) == ("greedy", 1) else [])]
    assert all(math.isfinite(row["ms_a_step"]) and row["ms_a_step"] > 0 for row in rows)
    for row in rows:  # one output a sentence; CTranslate2's run to the limit on random weights
        assert len(row["output_lengths"]) == row["sentences"]
        if row["engine"].startswith("CTranslate2"):
            assert set(row["output_lengths"]) == {4}
    table = (out / "results.md").read_text()
    assert table.count("\n| greedy |") == 2 and table.count("\n| beam 4 |") == 2
    assert table.count(" — |") == 3  # the padded engine elsewhere
