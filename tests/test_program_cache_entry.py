"""What a program cache entry keeps beside the decoding program: programs fixed to each batch shape, and the weights.

A later process compiles each batch shape from the program fixed to it,
which JAX lowers without refining shapes, and uses the weights where they
lie in the mapped file. Both must give the translations the first process
gave, and a damaged file must be made again, never served. Runs under one
backend: the compiled engine is JAX's whatever KERAS_BACKEND says.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.fixed_shape_program import fixed_shape_program
from keras_transformer_runtime.program_cache import ProgramCache
from keras_transformer_runtime.weights_file import WEIGHTS_FILE
from keras_transformer_runtime.weights_file import read_weights

pytestmark = pytest.mark.backend_independent

jax = pytest.importorskip("jax")
export = pytest.importorskip("jax.export")
SENTENCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra."]


# The tests on `written` translate through the command line in a fresh process first (~15 s on 2 cores), so
# they run with CI's end-to-end tests (and in its lower-bound job), not in the contributor's loop, where
# test_translate_command.py's second process already goes through the fixed-shape programs and mapped weights.
@pytest.fixture(scope="module")
def written(trained_run, tmp_path_factory):
    """`(cache folder, translations)` after one `translate` of SENTENCES in another process (beam 4)."""
    cache = tmp_path_factory.mktemp("cache")
    first = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(trained_run),
                            *SENTENCES], capture_output=True, timeout=300,
                           env={**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(cache)})
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    return cache / "keras-transformer", first.stdout.decode().splitlines()


def _fixed_files(cache):
    return sorted(cache.rglob("*-shape*x*.jaxexport"))


def _counting_refinements(monkeypatch):
    mlir = pytest.importorskip("jax._src.interpreters.mlir")
    refined = []
    original = mlir.refine_polymorphic_shapes
    monkeypatch.setattr(mlir, "refine_polymorphic_shapes", lambda module: refined.append(1) or original(module))
    return refined


@pytest.mark.end_to_end
def test_a_later_process_compiles_each_batch_shape_unrefined_to_the_same_translations(trained_run, written,
                                                                                      monkeypatch):
    cache, first_translations = written
    fixed = _fixed_files(cache)
    # The first process's one batch shape: both sentences in one batch, or on several cores a lone one a core.
    assert len(fixed) == 1
    refined = _counting_refinements(monkeypatch)
    translator = load_compiled_translator(str(trained_run), ProgramCache(cache))
    assert translator(SENTENCES) == first_translations
    assert refined == []
    # A shape met for the first time is refined once, and its program kept for the next process.
    split = translator.batch_cores > 1
    translator.batch_cores = 1
    assert translator(SENTENCES if split else SENTENCES[:1]) == first_translations[: 2 if split else 1]
    assert refined == [1] and len(_fixed_files(cache)) == 2


@pytest.mark.end_to_end
def test_a_damaged_fixed_shape_program_is_made_again(trained_run, written, monkeypatch):
    cache, first_translations = written
    for path in _fixed_files(cache):
        path.write_bytes(path.read_bytes()[:100])
    refined = _counting_refinements(monkeypatch)
    translator = load_compiled_translator(str(trained_run), ProgramCache(cache))
    assert translator(SENTENCES) == first_translations
    assert refined == [1]
    newest = max(_fixed_files(cache), key=lambda path: path.stat().st_mtime_ns)  # the one made again
    remade = export.deserialize(bytearray(newest.read_bytes()))
    assert all(isinstance(size, int) for aval in remade.in_avals for size in aval.shape)


def test_a_program_with_two_symbolic_inputs_is_refused():
    a, b = export.symbolic_shape("a, b")
    both = export.export(jax.jit(lambda x, y: x.sum() + y.sum()))(
        jax.ShapeDtypeStruct((a,), np.int32), jax.ShapeDtypeStruct((b,), np.int32))
    with pytest.raises(ValueError, match="has 2"):
        fixed_shape_program(both, (1, 2))


@pytest.mark.end_to_end
def test_weights_are_the_models_and_lie_aligned_and_a_truncated_file_is_never_served(trained_run, written):
    cache, _ = written
    entry = next(cache.rglob(WEIGHTS_FILE)).parent
    run_file = trained_run / "model.keras"
    weights = read_weights(entry, run_file)
    import keras

    import keras_transformer  # noqa: F401 (registers the layers)

    model = keras.saving.load_model(str(trained_run / "model.keras"), compile=False)
    assert len(weights) == len(model.variables)
    for value, variable in zip(weights, model.variables):
        if "seed" not in variable.path:  # a seed generator's state is each model's own
            np.testing.assert_array_equal(value, keras.ops.convert_to_numpy(variable), err_msg=variable.path)
    assert all(value.ctypes.data % 64 == 0 for value in weights)  # where XLA's CPU client uses them uncopied
    # The run's model.keras holds the weights: the entry keeps only what it lacks (a seed generator's state).
    assert (entry / WEIGHTS_FILE).stat().st_size < 0.01 * run_file.stat().st_size
    data = (entry / WEIGHTS_FILE).read_bytes()
    (entry / WEIGHTS_FILE).write_bytes(data[:-64])
    with pytest.raises((ValueError, OSError)):
        read_weights(entry, run_file)
    assert load_compiled_translator(str(trained_run), ProgramCache(cache)) is None  # a miss: written again


def _translate(trained_run, cache, *flags, env=None):
    result = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(trained_run),
                             *flags, *SENTENCES], capture_output=True, timeout=300,
                            env={**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(cache), **(env or {})})
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stdout.decode().splitlines()


@pytest.mark.end_to_end  # two more commands in fresh processes, one of them Keras': ~15 s
def test_a_quantized_program_keeps_quantized_weights_in_its_own_entry_and_translates_as_the_keras_model(
        trained_run, written, tmp_path):
    float_cache, _ = written
    compiled = _translate(trained_run, tmp_path, "--quantize", "int8")
    keras_engine = _translate(trained_run, tmp_path, "--quantize", "int8", "--engine", "keras",
                              env={"KERAS_BACKEND": "jax"})
    assert compiled == keras_engine
    (quantized_entry,) = {path.parent for path in tmp_path.rglob(WEIGHTS_FILE)}
    (float_entry,) = {path.parent for path in float_cache.rglob(WEIGHTS_FILE)}
    assert quantized_entry.name != float_entry.name
    run_file = trained_run / "model.keras"
    assert "int8" in {value.dtype.name for value in read_weights(quantized_entry, run_file)}
    # Its quantized weights are its own, held once; the float entry keeps none of the run's.
    assert (float_entry / WEIGHTS_FILE).stat().st_size < (quantized_entry / WEIGHTS_FILE).stat().st_size \
        < 0.5 * run_file.stat().st_size


@pytest.mark.end_to_end  # two programs written in a child process: ~25 s
def test_a_quantized_lone_sentence_decodes_in_four_rows_where_amx_multiplies_int8_to_one_rows_tokens(
        trained_run, tmp_path, monkeypatch):
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime import cpu_compiler_options

    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE_DIR", str(tmp_path))  # the child writer's cache too
    monkeypatch.setattr(cpu_compiler_options, "AMX_INT8_WIDTH", 0)  # the small test model as a wide one
    cache = ProgramCache()
    outputs = {}
    for beam in (1, 4):
        for cpu, flags in (("avx2", {"avx2", "fma"}), ("amx", {"avx2", "fma", "avx512f", "amx_tile", "amx_int8"})):
            monkeypatch.setattr(cpu_compiler_options, "cpu_flags", lambda flags=flags: set(flags))
            # The n-best program: its scores compare the rows even where a barely trained model says nothing.
            translator = load_compiled_translator(str(trained_run), cache, beam_width=beam, n_best=1,
                                                  write=write_program_in_a_child, quantize="int8")
            rows, run = [], translator._outputs
            monkeypatch.setattr(translator, "_outputs", lambda source, run=run, rows=rows:
                                rows.append((len(source), run(source))) or rows[-1][1])
            outputs[beam, cpu] = (translator(SENTENCES[:1]), rows)
    # Greedy: 4 copies of the sentence where AMX multiplies; a beam of 4 has its 4 rows already.
    assert {key: [count for count, _ in rows] for key, (_, rows) in outputs.items()} == {
        (1, "avx2"): [1], (1, "amx"): [4], (4, "avx2"): [1], (4, "amx"): [1]}
    for beam in (1, 4):
        assert outputs[beam, "amx"][0] == outputs[beam, "avx2"][0]
        (_, (tokens, scores, *_)), = outputs[beam, "amx"][1]
        (_, (lone_tokens, lone_scores, *_)), = outputs[beam, "avx2"][1]
        assert np.array_equal(np.asarray(tokens)[:1], np.asarray(lone_tokens))
        np.testing.assert_allclose(np.asarray(scores)[:1], np.asarray(lone_scores), rtol=1e-4, atol=1e-4)
