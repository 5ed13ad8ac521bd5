"""The benchmark harness: FLOPs arithmetic, the three reference builds, retraces, a quick run.

The tests that build the reference models or run a benchmark script in
miniature are marked `benchmark_scripts`: CI runs them under every backend,
the contributor's loop leaves them out (the package's own behaviour is
tested elsewhere).
"""

import json
import os
import pathlib
import sys

import keras
import numpy as np
import pytest

from conftest import to_numpy

from keras_transformer.training import model_flops as flops
from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import IMPLEMENTATIONS
from benchmarks.reference_models import KerasHubCachedDecoder
from benchmarks.reference_models import build_model
from benchmarks.reference_models import parameter_counts
from benchmarks.phases import count_calls

# Engines and benchmarks held to one another input by input: each input handed over whole, uncapped.
pytestmark = pytest.mark.usefixtures("as_generate")

QUICK = CONFIGS["quick"]


def _batch(rng, batch_size, source_length, target_length, vocabulary_size=QUICK["vocabulary_size"]):
    return {
        "encoder_tokens": rng.integers(4, vocabulary_size, size=(batch_size, source_length)).astype("int32"),
        "decoder_tokens": rng.integers(4, vocabulary_size, size=(batch_size, target_length)).astype("int32"),
    }


def test_training_flops_equal_a_count_by_hand():
    # 1 + 1 layers, d_model 4, ff_dim 8, vocabulary 10, source 3, target 2.
    encoder = 2 * (4 * 16) * 3 + 2 * (2 * 4 * 8) * 3 + 4 * 3 * 3 * 4  # projections, feed-forward, attention
    assert encoder == 384 + 384 + 144
    decoder = (
        2 * (4 * 16) * 2  # self-attention Q, K, V, O on 2 target tokens
        + 4 * 2 * 2 * 4  # self-attention Q K^T and A V
        + 2 * (2 * 16) * 2  # cross-attention Q, O on target tokens
        + 2 * (2 * 16) * 3  # cross-attention K, V on 3 source tokens
        + 4 * 2 * 3 * 4  # cross-attention Q K^T and A V
        + 2 * (2 * 4 * 8) * 2  # feed-forward
    )
    assert decoder == 256 + 64 + 128 + 192 + 96 + 256
    output = 2 * 4 * 10 * 2
    forward = encoder + decoder + output
    assert flops.forward_flops(1, 1, 4, 8, 10, source_length=3, target_length=2) == forward == 2064
    assert flops.training_flops(1, 1, 4, 8, 10, 3, 2, batch_size=5) == 3 * 5 * forward


def test_training_flops_follow_the_6n_rule_plus_attention():
    # Equal lengths n: every token passes through its own stack once, so the
    # matmul part is 6 * parameters * n and the rest is attention.
    layers, d_model, ff_dim, vocabulary_size, n = 6, 512, 2048, 8000, 128
    parameters = flops.matmul_parameters(layers, layers, d_model, ff_dim, vocabulary_size)
    attention = 3 * 4 * n * n * d_model * (layers + 2 * layers)  # encoder self, decoder self and cross
    assert flops.training_flops(layers, layers, d_model, ff_dim, vocabulary_size, n, n) == 6 * parameters * n + attention


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_matmul_parameters_are_the_kernels_of_each_reference_model(implementation):
    model = build_model(implementation, QUICK, max_length=16)
    kernels = sum(
        int(np.prod(w.shape)) for w in model.trainable_weights if w.path.endswith("kernel")
    )
    expected = flops.matmul_parameters(
        QUICK["num_layers"], QUICK["num_decoder_layers"], QUICK["d_model"], QUICK["ff_dim"], QUICK["vocabulary_size"]
    )
    assert kernels == expected


def test_peak_flops_and_mfu():
    assert flops.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert flops.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert flops.peak_flops("NVIDIA H200") == 989e12
    assert flops.peak_flops("AMD EPYC x 2 cores") is None
    assert flops.model_flops_utilization(989e12 * 0.5, 1.0, 989e12) == pytest.approx(0.5)
    assert flops.model_flops_utilization(1e12, 1.0, None) is None


def test_reference_models_have_the_same_parameter_count():
    counts = parameter_counts("quick", max_length=16)
    assert set(counts) == set(IMPLEMENTATIONS)
    assert len(set(counts.values())) == 1, counts


@pytest.mark.benchmark_scripts
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_reference_models_give_logits_of_one_shape_and_train_one_step(implementation, rng):
    model = build_model(implementation, QUICK, max_length=16)
    inputs = _batch(rng, 2, 7, 5)
    logits = model(inputs)
    assert tuple(logits.shape) == (2, 5, QUICK["vocabulary_size"])
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    loss = model.train_on_batch(inputs, inputs["decoder_tokens"])
    assert np.isfinite(loss)
    assert any(not np.array_equal(b, to_numpy(w)) for b, w in zip(before, model.trainable_weights))


@pytest.mark.benchmark_scripts
def test_tutorial_model_honours_padding(rng):
    # The tutorial's masks come from Embedding(mask_zero=True) alone: more
    # padding after the source must not change any logit.
    model = build_model("tutorial", QUICK, max_length=16, dropout=0.0)
    inputs = _batch(rng, 1, 6, 4)
    inputs["encoder_tokens"][:, 4:] = 0
    longer = np.concatenate([inputs["encoder_tokens"], np.zeros((1, 3), "int32")], axis=1)
    padded_more = {**inputs, "encoder_tokens": longer}
    np.testing.assert_allclose(to_numpy(model(inputs)), to_numpy(model(padded_more)), rtol=1e-5, atol=1e-5)


@pytest.mark.benchmark_scripts
def test_keras_hub_cache_gives_the_greedy_tokens_of_a_full_forward_pass(rng):
    from keras_transformer_runtime.special_tokens import START_ID
    from keras_transformer.decoding import greedy_search

    model = build_model("keras_hub", QUICK, max_length=16, dropout=0.0)
    source = _batch(rng, 2, 5, 1)["encoder_tokens"]
    source[0, 3:] = 0
    tokens = greedy_search(KerasHubCachedDecoder(model, max_length=5), source, max_new_tokens=4, stop_at_end=False)
    # One forward pass over the generated prefix (teacher forcing) must pick
    # the same token at every position as the cached step did.
    prefix = np.concatenate([np.full((2, 1), START_ID, "int32"), tokens[:, :-1]], axis=1)
    logits = to_numpy(model({"encoder_tokens": source, "decoder_tokens": prefix}))
    logits[..., [0, START_ID]] = -np.inf  # greedy_search never emits padding or the start token
    np.testing.assert_array_equal(np.argmax(logits, axis=-1), tokens)


@pytest.mark.benchmark_scripts
def test_training_step_is_traced_once_per_batch_shape(rng):
    if keras.backend.backend() == "torch":
        pytest.skip("torch trains eagerly (jit_compile='auto' is False on torch): the Python step runs every "
                    "batch, there is no trace to reuse or to repeat")
    model = build_model("keras_transformer", QUICK, max_length=16)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    calls = count_calls(model)

    def fit(length, batches=6):
        inputs = _batch(rng, 2 * batches, length, length)
        before = calls["count"]
        model.fit(inputs, inputs["decoder_tokens"], batch_size=2, epochs=1, shuffle=False, verbose=0)
        return calls["count"] - before

    # The first fit also calls the model once symbolically to build metrics.
    assert fit(6) <= 2, "six batches of one shape must not trace six times"
    assert fit(6) == 0, "same shape: the traced step is reused"
    assert fit(8) == 1, "a new shape traces once (TensorFlow then relaxes the shape)"
    assert fit(6) == 0, "a shape seen before is not traced again"


@pytest.mark.benchmark_scripts
def test_quick_run_writes_json_and_markdown(tmp_path):
    from benchmarks.run import main

    out = tmp_path / "bench"
    main(["--quick", "--implementations", "keras_transformer", "--phases", "train", "encode", "--repeats", "1",
          "--out", str(out)])
    report = json.loads((out / "results.json").read_text())
    assert report["meta"]["config"] == "quick"
    (row,) = report["results"]
    assert row["implementation"] == "keras_transformer"
    assert row["train"]["tokens_per_second"] > 0 and row["train"]["tokens_per_second_cpu"] > 0
    assert row["train"]["flops_per_step"] == flops.training_flops(1, 1, 32, 2 * 32, 256, 16, 16, row["batch_size"])
    if keras.backend.backend() != "torch":
        assert row["train"]["traces_timed"] == 0
    assert "| `keras_transformer` |" in (out / "results.md").read_text()
    # Encoder inference with its outputs summed on the device, and with every output copied to the host.
    assert row["encode"]["tokens_per_second"] > 0 and row["encode"]["to_host_tokens_per_second"] > 0
    assert len(row["encode"]["to_host_seconds_repeats"]) == 2  # --quick: encode_repeats=2
    assert "| encoder, outputs to host |" in (out / "results.md").read_text()


@pytest.mark.backend_independent
def test_every_model_of_a_bf16_run_is_bf16_after_the_sessions_are_cleared(tmp_path):
    # clear_session() between sequence lengths resets Keras' policy to float32 (Keras' global state, on any backend).
    from benchmarks.run import main

    main(["--config", "quick", "--seq-len", "16", "24", "--implementations", "keras_transformer", "--phases", "train",
          "--repeats", "1", "--steps", "1", "--batch-tokens", "128", "--mixed-precision", "bfloat16",
          "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [(row["seq_len"], row["dtype_policy"]) for row in rows] == [(16, "mixed_bfloat16"), (24, "mixed_bfloat16")]


def _fake_row(implementation, train_seconds, cached_seconds=None, uncached_seconds=4.0):
    decode = {"uncached_tokens_per_second": 8 / uncached_seconds, "uncached_seconds_repeats": [uncached_seconds]}
    if cached_seconds:
        decode.update(cached_tokens_per_second=8 / cached_seconds, cached_seconds_repeats=[cached_seconds])
    return {
        "implementation": implementation, "seq_len": 16, "batch_size": 2, "parameters": 10,
        "train": {"tokens_per_second": 64 / train_seconds, "seconds_per_step_repeats": [train_seconds, 2 * train_seconds],
                  "cpu_seconds_per_step_repeats": [train_seconds / 2] * 2, "traces_timed": 0},
        "decode": {"new_tokens": 4, "batch_size": 2, **decode},
    }


def test_ratios_and_tables_compare_every_implementation_with_this_package(tmp_path):
    from benchmarks import run

    results = [_fake_row("keras_transformer", 1.0, cached_seconds=0.5), _fake_row("keras_hub", 2.0, 1.0),
               _fake_row("tutorial", 4.0)]
    report = {"meta": {"device": {"backend": "jax", "accelerator": None, "name": "cpu"}, "config": "quick",
                       "config_values": {}, "precision": "float32", "jit_compile": "auto", "dropout": 0.0,
                       "repeats": 2, "steps": 1, "decode_repeats": 1, "keras": "3", "keras_hub": "0"},
              "results": results}
    table = run.write_report(report, str(tmp_path))
    ratios = report["ratios"]["median"]["16"]
    assert ratios["train_speedup_vs_keras_hub"] == pytest.approx(2.0)
    assert ratios["train_speedup_vs_tutorial"] == pytest.approx(4.0)
    assert ratios["cached_decode_speedup_vs_tutorial_uncached"] == pytest.approx(8.0)
    assert ratios["cached_decode_speedup_vs_keras_hub_cached"] == pytest.approx(2.0)
    # The fastest repeat is the first; CPU time is half the wall time.
    assert report["ratios"]["best"]["16"]["train_speedup_vs_keras_hub"] == pytest.approx(2.0)
    assert results[0]["train"]["tokens_per_second_cpu"] == pytest.approx(2 * 64 * 1.5)
    assert "| `tutorial` | 10 | 16 | 4.00x |" in table and "no cache" in table
    assert (tmp_path / "results.md").read_text() == table


@pytest.mark.slow
def test_full_quick_run_covers_every_implementation_and_phase(tmp_path):
    from benchmarks import run

    report = run.run(run.parse_args(["--quick", "--out", str(tmp_path)]))
    rows = {row["implementation"]: row for row in report["results"]}
    assert set(rows) == set(IMPLEMENTATIONS)
    assert rows["keras_transformer"]["decode"]["cached_tokens_per_second"] > 0
    assert rows["keras_hub"]["decode"]["cached_tokens_per_second"] > 0
    assert "cached_tokens_per_second" not in rows["tutorial"]["decode"]
    assert (tmp_path / "results.md").is_file()


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.profiler")
def test_the_step_profile_accounts_for_the_whole_step_and_finds_the_matmuls(tmp_path):
    from benchmarks import profile_step

    report = profile_step.main(["--config", "quick", "--seq-len", "16", "--batch-tokens", "256", "--steps", "2",
                                "--out", str(tmp_path)])
    assert sum(report["categories"].values()) == pytest.approx(report["seconds_per_step"])
    assert report["categories"]["matmul"] > 0 and report["categories"]["normalization"] > 0
    assert "| matmul |" in (tmp_path / "results.md").read_text()


def _decode_quick_args(out, *more):
    return ["--quick", "--phases", "decode", "--repeats", "1", "--new-tokens", "6", "--uncached-new-tokens", "2",
            "--out", str(out), *more]


@pytest.mark.benchmark_scripts
def test_uncached_loop_is_timed_on_its_first_steps_over_the_full_prefix_and_says_so(tmp_path, monkeypatch):
    import keras_transformer.decoding
    from benchmarks import run

    calls = []
    greedy_search = keras_transformer.decoding.greedy_search

    def recorded(decoder, source, max_new_tokens, **kwargs):
        calls.append((type(decoder).__name__, max_new_tokens, decoder.max_length))
        return greedy_search(decoder, source, max_new_tokens, **kwargs)

    monkeypatch.setattr(keras_transformer.decoding, "greedy_search", recorded)
    report = run.run(run.parse_args(_decode_quick_args(tmp_path, "--implementations", "keras_transformer", "tutorial")))
    # The cached loop runs all 6 tokens; the uncached loops only 2 steps, each on the full 6-token prefix.
    assert set(calls) == {("CachedDecoder", 6, 7), ("UncachedDecoder", 2, 7), ("ReferenceUncachedDecoder", 2, 7)}
    ours, tutorial = report["results"]
    for decode in (ours["decode"], tutorial["decode"]):
        assert (decode["new_tokens"], decode["uncached_new_tokens"]) == (6, 2)
        assert decode["uncached_tokens_per_second"] > 0
    assert ours["decode"]["cached_tokens_per_second"] > 0
    assert "uncached: the first 2 steps timed, each on the full 6-token prefix" in (tmp_path / "results.md").read_text()


# The rounding of the report, on times made up: the same under every backend.
@pytest.mark.backend_independent
def test_sub_millisecond_cpu_times_keep_their_rates(tmp_path, monkeypatch):
    from benchmarks import phases
    from benchmarks import run

    # A tiny model's 2 uncached steps can take under half a millisecond of CPU
    # time; rounded to 3 decimals that was 0, and the rate silently vanished.
    def tiny_times(functions, repeats):
        for function in functions.values():
            function()
        return {name: [0.0012] for name in functions}, {name: [0.00042] for name in functions}

    monkeypatch.setattr(phases, "interleaved_seconds", tiny_times)
    report = run.run(run.parse_args(_decode_quick_args(tmp_path, "--implementations", "keras_transformer")))
    decode = report["results"][0]["decode"]
    assert decode["uncached_cpu_seconds_repeats"] == [0.00042]
    assert decode["uncached_tokens_per_second_cpu"] == pytest.approx(decode["uncached_tokens_per_second"] * 0.0012 / 0.00042)
    assert decode["cached_tokens_per_second_cpu"] > decode["cached_tokens_per_second"]


@pytest.mark.benchmark_scripts
def test_reference_uncached_loop_gives_the_tokens_of_keras_hubs_cache(rng):
    from keras_transformer.decoding import greedy_search
    from benchmarks.phases import ReferenceUncachedDecoder

    model = build_model("keras_hub", QUICK, max_length=16, dropout=0.0)
    source = _batch(rng, 2, 5, 1)["encoder_tokens"]
    cached = greedy_search(KerasHubCachedDecoder(model, max_length=5), source, 4, stop_at_end=False)
    uncached = greedy_search(ReferenceUncachedDecoder(model, max_length=5), source, 4, stop_at_end=False)
    np.testing.assert_array_equal(cached, uncached)


# Every Python process started with this folder first on PYTHONPATH has TensorFlow
# blocked as tests/test_without_tensorflow.py blocks it: `import tensorflow` raises.
BLOCK_TENSORFLOW = 'import sys\nsys.modules["tensorflow"] = None\n'


# The launching and merging of the per-process rows, whatever the backend measures.
@pytest.mark.backend_independent
def test_one_process_per_implementation_gives_the_rows_of_one_process(tmp_path):
    from benchmarks import per_process
    from benchmarks import run

    arguments = ["--implementations", "keras_transformer", "tutorial"]
    shared = run.run(run.parse_args(_decode_quick_args(tmp_path / "shared", *arguments)))

    # The children's command lines, run here rather than in new processes
    # (the next test starts a real one): `python -m benchmarks.run ARGS`.
    launched = []

    def launch(command):
        assert command[1:3] == ["-m", "benchmarks.run"]
        launched.append(command[len(command) - command[::-1].index("--implementations")])  # the last one given
        return run.main(command[3:]), []

    out = tmp_path / "separate"
    args = run.parse_args(_decode_quick_args(out, *arguments, "--process-per-implementation"))
    report = per_process.run_per_process(args, launch=launch)
    assert launched == ["keras_transformer", "tutorial"]
    assert report["meta"]["process_per_implementation"] and report["meta"]["failed"] == {}
    assert [row["implementation"] for row in report["results"]] == ["keras_transformer", "tutorial"]
    for alone, together in zip(report["results"], shared["results"]):
        assert set(alone) == set(together) and set(alone["decode"]) == set(together["decode"])
        assert (out / alone["implementation"] / "results.json").is_file()
    assert json.loads((out / "results.json").read_text())["results"] == report["results"]
    assert "Each implementation measured in its own process." in (out / "results.md").read_text()
    assert report["ratios"]["median"]["16"]["cached_decode_speedup_vs_tutorial_uncached"] > 0

    # --resume keeps what the same command measured, whatever --out was.
    launched.clear()
    again = per_process.run_per_process(run.parse_args([*args.argv, "--resume"]), launch=launch)
    assert launched == [] and again["results"] == report["results"]


# Every Python process started with this folder first on PYTHONPATH has TensorFlow
# blocked as tests/test_without_tensorflow.py blocks it: `import tensorflow` raises.
BLOCK_TENSORFLOW = 'import sys\nsys.modules["tensorflow"] = None\n'


@pytest.mark.backend_independent
def test_an_implementation_measured_in_its_own_process_needs_no_tensorflow(tmp_path, monkeypatch):
    from benchmarks import run

    blocker = tmp_path / "block_tensorflow"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCK_TENSORFLOW)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")])))
    out = tmp_path / "bench"
    assert run.main(_decode_quick_args(out, "--implementations", "tutorial", "--phases", "train", "decode",
                                       "--steps", "1", "--batch-tokens", "64", "--process-per-implementation")) == 0
    (row,) = json.loads((out / "results.json").read_text())["results"]
    assert row["input_pipeline"] == "numpy arrays"  # fit was fed NumPy: `import tensorflow` failed in the child
    assert row["train"]["tokens_per_second"] > 0 and row["decode"]["uncached_tokens_per_second"] > 0


def _benchmark_imports():
    """Each module of benchmarks/ and the benchmarks modules it imports, anywhere in its body."""
    import ast

    folder = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    graph = {}
    for path in folder.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks."):
                imported.add(node.module.split(".")[1])
        graph[path.stem] = imported - {path.stem}
    return graph


@pytest.mark.backend_independent
def test_no_two_benchmark_modules_import_each_other_even_indirectly():
    graph = _benchmark_imports()
    assert "report" in graph["per_process"] and "run" not in graph["per_process"]
    for start in graph:
        reached, frontier = set(), set(graph[start])
        while frontier:
            module = frontier.pop()
            assert module != start, f"benchmarks.{start} imports itself through benchmarks.{module}"
            if module not in reached:
                reached.add(module)
                frontier |= graph.get(module, set())


@pytest.mark.benchmark_scripts
def test_translation_speed_times_translating_apart_and_counts_the_steps_after_the_end(trained_run, tmp_path):
    import doctest

    from benchmarks import translation_speed

    (row,) = translation_speed.main(["--model", str(trained_run), "--sentences", "6", "--beams", "1",
                                     "--loops", "default", "--batch-sizes", "2", "--out", str(tmp_path)])
    # Translating is part of the pass that also scores, so it cannot be slower.
    assert row["translating_sentences_per_second"] >= row["warm_sentences_per_second"] > 0
    assert row["batch"] == 2 and 0 <= row["row_steps_after_end"] < 1
    assert "| row-steps after the end |" in (tmp_path / "results.md").read_text()
    assert doctest.testmod(translation_speed).failed == 0


@pytest.mark.end_to_end
def test_translation_speed_measures_the_compiled_engine_against_ctranslate2_in_one_command(trained_run, tmp_path):
    pytest.importorskip("ctranslate2")
    pytest.importorskip("jax")
    from benchmarks import translation_speed

    rows = translation_speed.main(["--model", str(trained_run), "--sentences", "6", "--beams", "1", "--loops",
                                   "engine", "ctranslate2", "engine-int8", "--out", str(tmp_path)])
    engine, ctranslate2, quantized = rows
    assert (engine["loop"], ctranslate2["loop"], quantized["loop"]) == ("engine", "ctranslate2", "engine-int8")
    assert quantized["translating_sentences_per_second"] > 0 and 0 <= quantized["bleu"] <= 100
    assert engine["bleu"] == ctranslate2["bleu"]  # the same greedy translations, scored the same
    assert 0 <= engine["row_steps_after_end"] < 1
    table = (tmp_path / "results.md").read_text()
    ratio = engine["translating_sentences_per_second"] / ctranslate2["translating_sentences_per_second"]
    assert f"| {ratio:.2f}x |" in table and "| 1.00x |" in table


@pytest.mark.end_to_end
def test_translation_speed_decodes_the_marian_export_with_transformers_as_this_package_does(trained_run, tmp_path):
    pytest.importorskip("transformers")
    from benchmarks import translation_speed

    ours, theirs = translation_speed.main(["--model", str(trained_run), "--sentences", "6", "--beams", "1", "--loops",
                                           "default", "transformers", "--out", str(tmp_path)])
    assert theirs["loop"] == "transformers" and theirs["batch"] == translation_speed.TRANSFORMERS_BATCH
    # The same weights, greedy, the same n-gram guard: the same translations, so the same work and score.
    assert (theirs["bleu"], theirs["output_words"]) == (ours["bleu"], ours["output_words"])


@pytest.mark.benchmark_scripts
def test_the_documents_benchmark_scores_paragraphs_three_ways_and_each_sentence_limit(trained_run):
    import doctest

    from benchmarks import documents
    from keras_transformer.translation.translator import Translator

    translator = Translator.from_directory(str(trained_run), beam_width=1, max_new_tokens=8)
    own = translator.sentence_tokens
    rows = documents.measure(translator, ["test"], [1, 3], sentence_tokens=(None, 8), limit=9, log=lambda row: None)
    assert [(row["verses"], row["mode"], row["sentence_tokens"]) for row in rows] == [
        (1, "whole", None), (1, "sentences", own), (1, "sentences", 8),
        (3, "verse by verse", None), (3, "whole", None), (3, "sentences", own), (3, "sentences", 8)]
    assert all(row["paragraphs"] == 9 // row["verses"] and row["length_ratio"] > 0 for row in rows)
    assert own == 32 and translator.sentence_tokens == own  # a run trained here's, given back
    assert doctest.testmod(documents).failed == 0


@pytest.mark.benchmark_scripts
@pytest.mark.parametrize("shape", ["tiny-marian", "tiny-nllb"])
def test_the_import_benchmark_finds_transformers_logits_and_greedy_tokens_on_its_tiny_shapes(shape, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    from benchmarks import model_import

    model_import.main(["--shape", shape, "--out", str(tmp_path)])
    figures = json.loads((tmp_path / "results.json").read_text())
    sentences = f"{len(model_import.SENTENCES)} / {len(model_import.SENTENCES)}"
    assert figures["max_abs_logit_difference"] < 1e-4 * figures["largest_abs_logit"]
    positions = figures["argmax_agreement"].split(" / ")[1]
    assert int(positions) > 0 and figures["argmax_agreement"] == f"{positions} / {positions}"
    assert figures["greedy_rows_identical"] == figures["greedy_texts_identical"] == sentences
    assert figures["greedy_tokens_compared"] > len(model_import.SENTENCES)
    assert figures["parameters"] > 0 and figures["import_peak_resident_mb"] > 0
    assert 0 < figures["translate_second_wall_seconds"] and 0 < figures["transformers_generate_second_seconds"]
    assert ("export_marian_wall_seconds" in figures) == (shape == "tiny-marian")
    if shape == "tiny-marian":
        assert figures["export_marian_max_abs_logit_difference"] < 1e-4 * figures["largest_abs_logit"]
        assert {figures[key] for key in figures if key.endswith(("_identical", "_ids"))} == {sentences}
    assert f"--shape {shape}" in (tmp_path / "results.md").read_text()


@pytest.mark.benchmark_scripts
@pytest.mark.backend_independent
def test_the_cpu_table_has_every_system_decode_the_same_tokens_in_fresh_processes(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    from benchmarks import cpu_table

    commands = []
    plain_run = cpu_table.run_process
    monkeypatch.setattr(cpu_table, "run_process", lambda argv, env=None: commands.append(argv) or plain_run(argv, env))
    cpu_table.main(["--shapes", "tiny-nllb", "--sentences", "2", "--beams", "1", "4", "--max-new-tokens", "6",
                    "--repeats", "1", "--out", str(tmp_path)])
    cells = json.loads((tmp_path / "results.json").read_text())["cells"]
    assert [(cell["beam"], cell["system"]) for cell in cells] == [
        (beam, system) for beam in (1, 4) for system in cpu_table.SYSTEMS]
    for cell in cells:
        assert 0 <= cell["decoding_s"] < cell["wall_s"] and cell["peak_mb"] > 0
    # One model, one greedy search: float32 systems write transformers' translations, token for token.
    greedy = {cell["system"]: cell for cell in cells if cell["beam"] == 1}
    for system in ("float32", "CTranslate2 float32", "transformers"):
        assert greedy[system]["same_translations_as_transformers"] == 2
    assert 0 < greedy["CTranslate2 float32"]["tokens"] == greedy["transformers"]["tokens"] <= 2 * 6
    assert greedy["float32"]["tokens"] is None  # translate prints text only
    # Every call of this package's translate, in every cell, is handed the sentences themselves.
    translate_calls = [argv for argv in commands if "translate" in argv]
    assert len(translate_calls) == 2 * 2 * 2  # (warm-up + timed) x (float32, int8) x (greedy, beam 4)
    assert all(argv[-2:] == cpu_table.spanish_sentences(2) for argv in translate_calls)
    table = (tmp_path / "results.md").read_text()
    assert "| tiny-nllb | 2 | greedy |" in table and "| tiny-nllb | 2 | beam 4 |" in table
