"""A cache entry's weights: read from the run's own `model.keras` where it holds them, kept once otherwise.

An entry refers to each weight the run's file holds by its offset there
(`keras_file_arrays.locate_arrays`) and keeps only the others; read back,
every weight equals the one written and lies 64-byte aligned (where XLA's
CPU client uses it without copying), and a model file that changed is
refused. The cache's limit is about programs: an entry's own weights stay
while its run is unchanged and go with it when the run is removed or
rewritten. Runs under one backend: the files are read with NumPy alone.
"""

import os
import pathlib
import zipfile

import keras
import numpy as np
import pytest

from keras_transformer.model_file import save_model
from keras_transformer_runtime.keras_file_arrays import WEIGHTS_MEMBER
from keras_transformer_runtime.keras_file_arrays import locate_arrays
from keras_transformer_runtime.keras_file_arrays import member_data_offset
from keras_transformer_runtime.program_cache import ProgramCache
from keras_transformer_runtime.program_cache import RUN_RECORD
from keras_transformer_runtime.weights_file import INDEX_FILE
from keras_transformer_runtime.weights_file import WEIGHTS_FILE
from keras_transformer_runtime.weights_file import entry_weight_bytes
from keras_transformer_runtime.weights_file import read_weights
from keras_transformer_runtime.weights_file import weights_files

pytestmark = pytest.mark.backend_independent


@pytest.fixture
def saved_model(tmp_path):
    """`(path of a saved .keras, its variables as NumPy arrays)`: widths chosen so some weights lie unaligned."""
    model = keras.Sequential([keras.Input((7,)), keras.layers.Dense(33), keras.layers.LayerNormalization(),
                              keras.layers.Dense(5, use_bias=False)])
    for variable in model.variables:  # distinct bytes in every weight
        variable.assign(np.random.default_rng(len(variable.path)).normal(size=variable.shape).astype("float32"))
    path = tmp_path / "model.keras"
    model.save(path)
    return path, [keras.ops.convert_to_numpy(variable) for variable in model.variables]


def _write_entry(entry, weights, in_run, run_file):
    entry.mkdir(parents=True, exist_ok=True)
    index, chunks = weights_files(weights, in_run, os.path.getsize(run_file))
    (entry / INDEX_FILE).write_bytes(index)
    (entry / WEIGHTS_FILE).write_bytes(b"".join(bytes(chunk) for chunk in chunks))


def test_every_weight_of_a_saved_model_is_found_in_its_file_and_a_changed_one_is_not(saved_model):
    path, weights = saved_model
    changed = weights[0].copy()
    changed[0, 0] += 1
    offsets = locate_arrays([*weights, changed, np.zeros(3, np.float32)], path)
    assert None not in offsets[: len(weights)] and offsets[len(weights):] == [None, None]
    data = np.memmap(path, dtype=np.uint8, mode="r")
    for weight, offset in zip(weights, offsets):
        np.testing.assert_array_equal(data[offset: offset + weight.nbytes].view(weight.dtype).reshape(weight.shape),
                                      weight)
    assert {offset % 64 for offset in offsets[: len(weights)]} != {0}  # the reader must handle unaligned ones


def test_a_compressed_weights_member_is_never_referred_to(saved_model, tmp_path):
    path, weights = saved_model
    compressed = tmp_path / "compressed.keras"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(compressed, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
    assert member_data_offset(compressed, WEIGHTS_MEMBER) is None
    assert locate_arrays(weights, compressed) == [None] * len(weights)


def test_an_entry_keeps_only_what_the_run_lacks_and_reads_every_weight_back_aligned(saved_model, tmp_path):
    path, weights = saved_model
    own = np.arange(10, dtype=np.int8)  # a quantized kernel: not in the run's file
    arrays = [*weights, own]
    entry = tmp_path / "entry"
    _write_entry(entry, arrays, locate_arrays(arrays, path), path)
    assert entry_weight_bytes(entry) == 64  # only `own`, padded to 64 bytes
    read = read_weights(entry, path)
    assert len(read) == len(arrays)
    for value, expected in zip(read, arrays):
        np.testing.assert_array_equal(value, expected)
        assert value.ctypes.data % 64 == 0 and value.dtype == expected.dtype


@pytest.mark.parametrize("zip64", [False, True], ids=["zip", "zip64"])
def test_a_model_saved_by_the_package_lies_aligned_is_mapped_in_place_and_loads_back(saved_model, tmp_path,
                                                                                     monkeypatch, zip64):
    path, weights = saved_model
    model = keras.saving.load_model(path)
    if zip64:  # the extra field a member over 4 GB gets, without writing 4 GB: only the weights pass the limit
        with zipfile.ZipFile(path) as archive:
            others = [info.file_size for info in archive.infolist() if info.filename != WEIGHTS_MEMBER]
            assert archive.getinfo(WEIGHTS_MEMBER).file_size > 1.1 * max(others)
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", max(others))
    aligned = tmp_path / "aligned.keras"
    save_model(model, aligned)
    offsets = locate_arrays(weights, aligned)
    assert None not in offsets and {offset % 64 for offset in offsets} == {0}
    entry = tmp_path / "entry"
    _write_entry(entry, weights, offsets, aligned)
    assert entry_weight_bytes(entry) == 0
    for value, expected in zip(read_weights(entry, aligned), weights):
        np.testing.assert_array_equal(value, expected)
        assert isinstance(value, np.memmap)  # a view of the run's file, not a copy
    sample = np.random.default_rng(0).normal(size=(4, 7)).astype("float32")
    np.testing.assert_array_equal(keras.saving.load_model(aligned).predict(sample, verbose=0),
                                  model.predict(sample, verbose=0))


def test_an_entry_refuses_a_run_file_that_changed_size_or_is_not_given(saved_model, tmp_path):
    path, weights = saved_model
    entry = tmp_path / "entry"
    _write_entry(entry, weights, locate_arrays(weights, path), path)
    with pytest.raises(ValueError):
        read_weights(entry)
    with open(path, "ab") as file:
        file.write(b"retrained")
    with pytest.raises(ValueError):
        read_weights(entry, path)


def _entry_with_weights(cache, name, run, size):
    entry = cache.entry(name)
    cache.record_run(entry, run, "model.keras")
    cache.write(entry / WEIGHTS_FILE, bytes(size))
    cache.write(entry / INDEX_FILE, b'{"bytes": %d, "arrays": []}' % size)
    cache.write(entry / "program.jaxexport", bytes(100))
    return entry


def test_the_limit_is_about_programs_and_a_runs_own_weights_stay_until_the_run_changes(tmp_path):
    runs = [tmp_path / "run-a", tmp_path / "run-b"]
    for run in runs:
        run.mkdir()
        (run / "model.keras").write_bytes(b"weights")
    cache = ProgramCache(tmp_path / "cache", limit_bytes=1000)
    first = _entry_with_weights(cache, "a", runs[0], 5000)
    second = _entry_with_weights(cache, "b", runs[1], 5000)
    cache.prune()
    # Both large models stay warm: their weights are outside the 1,000-byte limit, their programs within it.
    assert all((entry / name).is_file() for entry in (first, second) for name in (WEIGHTS_FILE, "program.jaxexport"))
    assert cache.entry_state(first) == "current"
    (runs[0] / "model.keras").write_bytes(b"retrained")  # the run rewritten: its entry can never be used again
    cache.prune()
    assert not first.exists() and (second / WEIGHTS_FILE).is_file()
    (runs[1] / "model.keras").unlink()
    cache.prune()
    assert not second.exists()


def test_an_entry_without_a_record_is_held_to_the_limit_whole(tmp_path):
    cache = ProgramCache(tmp_path / "cache", limit_bytes=1000)
    old = cache.write(cache.entry("old") / WEIGHTS_FILE, bytes(5000))  # an older cache's entry
    assert not pathlib.Path(old).exists() or cache.entry_state(cache.entry("old")) == "unrecorded"
    newer = cache.write(cache.entry("newer") / "program.jaxexport", bytes(10))
    assert not old.exists() and newer.exists()
    assert not (cache.entry("newer") / RUN_RECORD).exists()


def test_the_cache_command_lists_each_entrys_run_and_weights_and_clears_them(tmp_path, monkeypatch, capsys):
    from keras_transformer_cli import main

    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE_DIR", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.keras").write_bytes(b"weights")
    cache = ProgramCache()
    _entry_with_weights(cache, "0123456789abcdef", run, 3 * 1024 * 1024)
    main(["cache"])
    listing = capsys.readouterr().out
    assert "0123456789ab" in listing and str(run.resolve()) in listing and "[current]" in listing
    assert "own weights 3.0 MB" in listing and "1 entry" in listing
    main(["cache", "--clear"])
    cleared = capsys.readouterr().out
    assert cleared.startswith("cleared: 3.0 MB freed") and "nothing cached yet" in cleared
    assert not cache.entry("0123456789abcdef").exists()
