"""The compiled engine's fast paths on JAX's internals (`jax_internals`): each engages on the pinned JAX, and says so
when it falls back.

A JAX upgrade that moves an internal the engine reaches into must fail
here, not lose a speed-up quietly. Most tests compile a tiny exported
program (a second each); one translates a trained run through the command
line. The compiled engine is JAX's whatever KERAS_BACKEND says, so these
run under one backend (`backend_independent`).
"""

import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from keras_transformer_runtime import jax_internals
from keras_transformer_runtime.compiled_translator import CompiledTranslator
from keras_transformer_runtime.fixed_shape_program import FixedShapePrograms
from keras_transformer_runtime.jax_internals import FastPathFallback
from keras_transformer_runtime.jax_internals import backend_check_skipped
from keras_transformer_runtime.program_cache import ProgramCache
from keras_transformer_runtime.weights_file import INDEX_FILE
from keras_transformer_runtime.weights_file import WEIGHTS_FILE
from keras_transformer_runtime.weights_file import read_weights
from keras_transformer_runtime.weights_file import weights_files

pytestmark = pytest.mark.backend_independent

jax = pytest.importorskip("jax")
export = pytest.importorskip("jax.export")
_export = pytest.importorskip("jax._src.export._export")
mlir = pytest.importorskip("jax._src.interpreters.mlir")
SENTENCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra."]
SOURCE = np.arange(10, dtype=np.int32).reshape(2, 5)


def _decode(weights, source):
    """A stand-in decoding loop of the engine's signature: `(weights, source) -> (generated, steps)`."""
    scale, shift = weights
    return source * 2 + (scale @ shift).sum().astype(np.int32), jax.numpy.asarray(source.shape[1], np.int32)


@pytest.fixture
def program_in_cache(tmp_path):
    """`(cache, program's path, program, weights)`: a program of symbolic batch shape, its weights in a mapped file."""
    batch, length = export.symbolic_shape("b, n")
    weights = [np.full((16, 16), 0.5, np.float32), np.ones((16, 4), np.float32)]
    program = export.export(jax.jit(_decode))([jax.ShapeDtypeStruct(w.shape, w.dtype) for w in weights],
                                              jax.ShapeDtypeStruct((batch, length), np.int32))
    entry = tmp_path / "entry"
    entry.mkdir()
    index, chunks = weights_files(weights)
    (entry / INDEX_FILE).write_bytes(index)
    (entry / WEIGHTS_FILE).write_bytes(b"".join(chunks))
    path = entry / "kept-beam1.jaxexport"
    path.write_bytes(program.serialize())
    return ProgramCache(tmp_path), path, program, read_weights(entry)


def _translator(program_in_cache, fixed=True, weights=None, log=None):
    cache, path, program, mapped = program_in_cache
    return CompiledTranslator(program, mapped if weights is None else weights, None, 8, batch_size=2,
                              fixed_shape_programs=FixedShapePrograms(cache, path, program) if fixed else None, log=log)


def _counting_refinements(monkeypatch):
    refined = []
    original = mlir.refine_polymorphic_shapes
    monkeypatch.setattr(mlir, "refine_polymorphic_shapes", lambda module: refined.append(1) or original(module))
    return refined


def _expected(weights):
    generated, steps = _decode(weights, SOURCE)
    return np.asarray(generated), int(steps)


def test_the_translator_compiles_a_shape_met_before_from_its_fixed_shape_program_unrefined(program_in_cache,
                                                                                             monkeypatch):
    lines = []
    refined = _counting_refinements(monkeypatch)
    generated, steps = _translator(program_in_cache, log=lines.append)._outputs(SOURCE)
    assert refined == [1]  # made once, and kept beside the program
    cache, path, _, weights = program_in_cache
    assert FixedShapePrograms(cache, path, None).path(SOURCE.shape).is_file()
    refined.clear()
    later = _translator(program_in_cache, log=lines.append)._outputs(SOURCE)  # a later process's translator
    assert refined == []
    symbolic = _translator(program_in_cache, fixed=False)._outputs(SOURCE)
    assert refined, "JAX's own lowering refines a symbolic program: the count above would have seen it"
    for outputs in (later, symbolic):
        np.testing.assert_array_equal(np.asarray(outputs[0]), np.asarray(generated))
    np.testing.assert_array_equal(np.asarray(generated), _expected(weights)[0])
    assert int(steps) == _expected(weights)[1] and lines == []


def test_the_weights_of_the_mapped_file_are_used_where_they_lie_and_a_copy_is_said(program_in_cache):
    lines = []
    mapped = program_in_cache[3]
    translator = _translator(program_in_cache, log=lines.append)
    assert [w.unsafe_buffer_pointer() for w in translator._weights] == [w.ctypes.data for w in mapped]
    assert lines == []
    memory = np.zeros(sum(w.nbytes for w in mapped) + 128, np.uint8)
    start = -memory.ctypes.data % 64 + 4  # off the alignment XLA's CPU client uses in place
    unaligned = [memory[start: start + mapped[0].nbytes].view(np.float32).reshape(mapped[0].shape), mapped[1]]
    unaligned[0][...] = mapped[0]
    copied = _translator(program_in_cache, weights=unaligned, log=lines.append)
    assert lines == ["fast path fell back: weights uncopied (1 of 2 weight arrays copied; 1 of them off the 64-byte "
                     "alignment XLA's CPU client uses in place); JAX's public path serves"]
    np.testing.assert_array_equal(np.asarray(copied._outputs(SOURCE)[0]), _expected(mapped)[0])


def test_the_lapack_set_up_is_skipped_while_the_translator_compiles_unless_the_program_calls_lapack(
        program_in_cache, monkeypatch):
    calls = []
    recorder = calls.append
    monkeypatch.setattr(_export, "_ensure_backends_initialized", recorder)
    lines = []
    _translator(program_in_cache, log=lines.append)._outputs(SOURCE)
    assert calls == [] and lines == []
    assert _export._ensure_backends_initialized is recorder  # put back as it was
    inverse = export.export(jax.jit(jax.numpy.linalg.inv))(jax.ShapeDtypeStruct((3, 3), np.float32))
    with backend_check_skipped(inverse) as skipped:
        np.testing.assert_allclose(np.asarray(jax.jit(inverse.call)(np.eye(3, dtype=np.float32) * 2)),
                                   np.eye(3) / 2)
    assert not skipped and calls == [("cpu",)]


def test_two_threads_compiling_at_once_leave_the_backend_check_as_it_was_and_skip_it_for_themselves_only(
        program_in_cache, monkeypatch):
    calls = []
    original = calls.append
    monkeypatch.setattr(_export, "_ensure_backends_initialized", original)
    program, weights = program_in_cache[2], program_in_cache[3]
    fixed = [export.export(jax.jit(_decode))(weights, jax.ShapeDtypeStruct((rows, 5), np.int32)) for rows in (1, 3)]
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def compile_(exported, entered, wait_for, then=None):
        try:
            with backend_check_skipped(exported):
                entered.set()
                assert wait_for.wait(30)
                jax.jit(exported.call).lower(weights, np.zeros(exported.in_avals[-1].shape, np.int32)).compile()
            if then:
                then.set()
        except BaseException as error:  # noqa: BLE001 (reported by the main thread)
            errors.append(error)

    # The first in leaves first, while the second is still compiling: the order that left it replaced.
    threads = [threading.Thread(target=compile_, args=(fixed[0], first_in, second_in, first_out)),
               threading.Thread(target=compile_, args=(fixed[1], second_in, first_out))]
    threads[0].start()
    assert first_in.wait(30)
    threads[1].start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and calls == []
    assert _export._ensure_backends_initialized is original
    # While another thread skips it, a thread that did not ask gets the set-up.
    with backend_check_skipped(fixed[0]):
        outside = threading.Thread(target=lambda: jax.jit(program.call).lower(weights, SOURCE))
        outside.start()
        outside.join(60)
    assert calls == [("cpu",)] and _export._ensure_backends_initialized is original


def test_each_fast_path_raises_its_reason_on_a_jax_without_its_internals(program_in_cache, monkeypatch):
    program = program_in_cache[2]
    monkeypatch.setattr(sys.modules["jax._src.export"], "_export", types.SimpleNamespace())
    calling = export.export(jax.jit(program.call))(program_in_cache[3], jax.ShapeDtypeStruct((2, 5), np.int32))
    with pytest.raises(FastPathFallback, match="fixed-shape program .AttributeError.*_module_to_bytecode"):
        jax_internals.fixed_shape_module(calling)
    with pytest.raises(FastPathFallback, match="backend check skipped .AttributeError"):
        backend_check_skipped(program)


@pytest.fixture(scope="module")
def warm_cache(trained_run, tmp_path_factory):
    """`(cache folder, translations)` after one `translate` of SENTENCES in another process (beam 4)."""
    cache = tmp_path_factory.mktemp("cache")
    first = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(trained_run),
                            *SENTENCES], capture_output=True, timeout=300,
                           env={**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(cache)})
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    return cache, first.stdout.decode().splitlines()


def test_a_translate_whose_fast_paths_all_fall_back_gives_the_same_translations_and_says_so_under_verbose(
        trained_run, warm_cache, monkeypatch, capsys):
    from keras_transformer_cli import main
    from keras_transformer_cli import startup
    from keras_transformer_runtime import compiled_translator

    cache, first_translations = warm_cache
    for fixed in cache.rglob("*-shape*x*.jaxexport"):  # so that the fixed-shape program must be made
        fixed.unlink()
    # A JAX whose internals moved: no `_export` module where the engine looks, no LAPACK kernels' list.
    monkeypatch.setattr(sys.modules["jax._src.export"], "_export", types.SimpleNamespace())
    monkeypatch.setattr(sys.modules["jax._src.lib"], "lapack", types.SimpleNamespace())
    read = compiled_translator.read_entry_weights

    def copied_off_the_alignment(entry, run_file=None):
        weights = read(entry, run_file)
        memory = np.zeros(sum(w.nbytes for w in weights) + 64 * len(weights) + 64, np.uint8)
        start, moved = -memory.ctypes.data % 64 + 4, []
        for value in weights:
            moved.append(memory[start: start + value.nbytes].view(value.dtype).reshape(value.shape))
            moved[-1][...] = value
            start += -(-value.nbytes // 64) * 64
        return moved

    monkeypatch.setattr(compiled_translator, "read_entry_weights", copied_off_the_alignment)
    # This process's Keras runs on pytest's backend, which would choose Keras' engine; a warm cache needs no Keras.
    monkeypatch.setattr(startup, "translation_engine", lambda args, parser: "compiled")
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE_DIR", str(cache))
    assert main(["--verbose", "translate", "--model", str(trained_run), *SENTENCES]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines() == first_translations
    assert "translation program: from the cache" in said.err
    fell_back = [line for line in said.err.splitlines() if "fast path fell back" in line]
    assert [line.split(": ")[2].split(" (")[0] for line in fell_back] == [
        "weights uncopied", "backend check skipped", "fixed-shape program"], said.err[-3000:]
    assert all(line.startswith("keras-transformer: fast path fell back: ") for line in fell_back)


def test_greedy_batches_on_a_cpu_hold_more_sentences_where_every_step_reads_a_large_token_matrix(program_in_cache,
                                                                                                 monkeypatch):
    from keras_transformer_runtime import compiled_translator
    from keras_transformer_runtime.text_translator import COMPILED_CPU_BATCH_SIZE

    _, _, program, weights = program_in_cache
    largest = max(weight.size for weight in weights)

    def auto_batch_size(large_entries, beam_width=1):
        monkeypatch.setattr(compiled_translator, "LARGE_VOCABULARY_ENTRIES", large_entries)
        return CompiledTranslator(program, weights, None, 8, beam_width=beam_width).batch_size

    assert auto_batch_size(largest) == compiled_translator.LARGE_VOCABULARY_CPU_BATCH_SIZE > COMPILED_CPU_BATCH_SIZE
    assert auto_batch_size(largest + 1) == COMPILED_CPU_BATCH_SIZE
    assert auto_batch_size(largest, beam_width=4) == compiled_translator.CPU_BEAM_BATCH_SIZE
