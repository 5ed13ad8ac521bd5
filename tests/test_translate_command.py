"""`keras-transformer translate` as a user meets it: the program cache, bad lines, lines as they arrive.

The compiled engine runs whatever KERAS_BACKEND says (it writes its program
with Keras on JAX), so these run under one backend (`backend_independent`).
"""

import hashlib
import io
import json
import os
import select
import subprocess
import sys
import time
import types
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from keras_transformer_cli import build_parser
from keras_transformer_cli import commands
from keras_transformer_cli.input_lines import BadLine
from keras_transformer_cli.input_lines import decode_line
from keras_transformer_runtime import program_cache
from keras_transformer_runtime.hypotheses import NBest
from keras_transformer_runtime.program_cache import ProgramCache
from keras_transformer_runtime.program_cache import entry_key
from keras_transformer_runtime.run_files import MODEL_FILE
from keras_transformer_runtime.run_files import VOCABULARY_FILE
from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.text_cleaning import replace_lone_surrogates
from keras_transformer_runtime.text_translator import TextTranslator

pytestmark = pytest.mark.backend_independent

jax = pytest.importorskip("jax")
SENTENCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra."]
TIMEOUT = 300


def _command(*args):
    return [sys.executable, "-m", "keras_transformer_cli", *args]


def _run(args, cache, stdin=None, extra_env=None):
    env = {**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(cache), **(extra_env or {})}
    return subprocess.run(args, input=stdin, capture_output=True, timeout=TIMEOUT, env=env)


def _files(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def _program_files(folder, names=None):
    """The cache's programs and XLA code (`_files`, or `names`), without the remembered hashes of run files."""
    return [name for name in (_files(folder) if names is None else names) if "/digests/" not in name]


@pytest.fixture(scope="module")
def warm_cache(trained_run, tmp_path_factory):
    """A cache folder holding the trained run's beam-4 program: one `translate` has run."""
    cache = tmp_path_factory.mktemp("cache")
    first = _run(_command("translate", "--model", str(trained_run), *SENTENCES), cache)
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    assert b"compiling the model's decoding program" in first.stderr
    return cache, first.stdout.decode().splitlines()


def test_a_second_process_translates_from_the_cache_without_importing_keras_or_compiling(trained_run, warm_cache):
    cache, first_translations = warm_cache
    before = _files(cache)
    # Nor scipy.linalg, which JAX imports to set up LAPACK for programs that call it (ours does not).
    script = ("import sys\nfrom keras_transformer_cli import main\ncode = main(sys.argv[1:])\n"
              "print('keras imported:', 'keras' in sys.modules, file=sys.stderr)\n"
              "print('scipy.linalg imported:', 'scipy.linalg' in sys.modules, file=sys.stderr)\nsys.exit(code)\n")
    second = _run([sys.executable, "-c", script, "--verbose", "translate", "--model", str(trained_run), *SENTENCES],
                  cache)
    stderr = second.stderr.decode()
    assert second.returncode == 0, stderr[-3000:]
    assert second.stdout.decode().splitlines() == first_translations
    assert "translation program: from the cache" in stderr
    assert "keras imported: False" in stderr and "scipy.linalg imported: False" in stderr
    # No program written, no XLA code compiled anew; at most the run files' hashes remembered (`file_digest`).
    assert _program_files(cache) == _program_files(cache, before)
    assert "time: start" in stderr and " compile " in stderr


def test_the_compiled_engine_translates_as_the_keras_model_does(trained_run, warm_cache):
    cache, compiled = warm_cache
    keras_engine = _run(_command("translate", "--engine", "keras", "--model", str(trained_run), *SENTENCES), cache,
                        extra_env={"KERAS_BACKEND": "jax"})
    assert keras_engine.returncode == 0, keras_engine.stderr.decode()[-3000:]
    assert keras_engine.stdout.decode().splitlines() == compiled


def test_the_compiled_engine_gives_the_n_best_scores_and_alignments_the_keras_model_gives(trained_run, warm_cache):
    import json

    cache, _ = warm_cache
    flags = ["translate", "--model", str(trained_run), "--format", "jsonl", "--n-best", "2", "--token-scores",
             "--attention-weights", *SENTENCES]
    compiled = _run(_command(*flags, "--engine", "compiled"), cache)
    assert compiled.returncode == 0, compiled.stderr.decode()[-3000:]
    assert b"compiling the model's decoding program" in compiled.stderr  # the n-best list's own program
    again = _run(_command(*flags, "--engine", "compiled"), cache)
    assert b"compiling" not in again.stderr and again.stdout == compiled.stdout
    keras_engine = _run(_command(*flags, "--engine", "keras"), cache, extra_env={"KERAS_BACKEND": "jax"})
    assert keras_engine.returncode == 0, keras_engine.stderr.decode()[-3000:]
    for ours, theirs in zip(*(map(json.loads, run.stdout.decode().splitlines()) for run in (compiled, keras_engine))):
        assert ours["source_tokens"] == theirs["source_tokens"] and len(ours["hypotheses"]) == 2
        for a, b in zip(ours["hypotheses"], theirs["hypotheses"]):
            assert (a["text"], a["tokens"], a["alignment"]) == (b["text"], b["tokens"], b["alignment"])
            np.testing.assert_allclose([a["score"], *a["token_scores"]], [b["score"], *b["token_scores"]], atol=1e-4)
            np.testing.assert_allclose(a["attention"], b["attention"], atol=1e-5)


def test_a_compiled_program_serves_only_the_n_best_list_it_was_written_for(trained_run, warm_cache):
    from keras_transformer_runtime.compiled_translator import load_compiled_translator

    cache, first_translations = warm_cache
    written = _run(_command("translate", "--model", str(trained_run), "--n-best", "2", SENTENCES[0]), cache)
    assert written.returncode == 0, written.stderr.decode()[-3000:]
    translator = load_compiled_translator(str(trained_run), ProgramCache(cache / "keras-transformer"), n_best=2)
    assert load_compiled_translator(str(trained_run), ProgramCache(cache / "keras-transformer"), n_best=3) is None
    assert translator(SENTENCES) == first_translations  # its first hypotheses are the translations
    assert len(translator.n_best(SENTENCES[0], 2).hypotheses) == 2
    with pytest.raises(NotImplementedError, match="gives 2 hypotheses a source"):
        translator.n_best(SENTENCES[0], 1)
    with pytest.raises(NotImplementedError, match="cross_attention=True"):
        translator.n_best(SENTENCES[0], 2, alignments=True)


def test_a_changed_model_is_never_served_a_stale_program(trained_run, warm_cache, tmp_path):
    cache, _ = warm_cache
    run = tmp_path / "run"
    run.mkdir()
    (run / VOCABULARY_FILE).write_bytes((trained_run / VOCABULARY_FILE).read_bytes())
    script = ("import sys, keras, numpy as np\nfrom keras_transformer import model_file\n"
              "model = model_file.load_model(sys.argv[1], compile=False)\n"
              "for v in model.trainable_variables:\n    v.assign(v.numpy() * 0.5 + 0.01)\nmodel.save(sys.argv[2])\n")
    changed = _run([sys.executable, "-c", script, str(trained_run / MODEL_FILE), str(run / MODEL_FILE)], cache,
                   extra_env={"KERAS_BACKEND": "jax"})
    assert changed.returncode == 0, changed.stderr.decode()[-3000:]
    entries = set(os.listdir(cache / "keras-transformer" / "programs"))
    result = _run(_command("translate", "--model", str(run), *SENTENCES), cache)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert b"compiling the model's decoding program" in result.stderr
    assert len(set(os.listdir(cache / "keras-transformer" / "programs")) - entries) == 1


def test_an_entry_key_changes_with_the_model_the_vocabulary_the_package_source_and_the_engine(
        trained_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    for name in (MODEL_FILE, VOCABULARY_FILE):
        (run / name).write_bytes((trained_run / name).read_bytes())

    def key(engine="jax 0.10.2 cpu"):
        return entry_key(run, MODEL_FILE, VOCABULARY_FILE, engine)

    original = key()
    assert key() == original
    assert key("jax 0.10.3 cpu") != original
    (run / VOCABULARY_FILE).write_bytes((trained_run / VOCABULARY_FILE).read_bytes() + b"\0")
    assert key() != original
    (run / VOCABULARY_FILE).write_bytes((trained_run / VOCABULARY_FILE).read_bytes())
    (run / MODEL_FILE).write_bytes((trained_run / MODEL_FILE).read_bytes() + b"\0")
    assert key() != original
    (run / MODEL_FILE).write_bytes((trained_run / MODEL_FILE).read_bytes())
    monkeypatch.setattr(program_cache, "source_fingerprint", lambda: "an upgraded package")
    assert key() != original


def test_a_remembered_file_hash_is_used_while_the_file_is_unchanged_and_forgotten_when_it_changes(
        tmp_path, monkeypatch):
    model = tmp_path / MODEL_FILE
    model.write_bytes(b"a" * 100)
    digests = tmp_path / "digests"
    monkeypatch.setattr(program_cache, "SETTLED_SECONDS", -1.0)  # remembered however recent the file
    assert program_cache.file_digest(model, digests) == hashlib.sha256(b"a" * 100).hexdigest()
    (remembered,) = digests.iterdir()
    stamp = json.loads(remembered.read_text())["stamp"]
    assert program_cache.file_digest(model, digests) == hashlib.sha256(b"a" * 100).hexdigest()
    # Rewritten in place with the same size and its modification time set back: only its change time differs.
    model.write_bytes(b"b" * 100)
    os.utime(model, ns=(stamp[3], stamp[3]))
    assert program_cache.file_digest(model, digests) == hashlib.sha256(b"b" * 100).hexdigest()
    # A file changed within SETTLED_SECONDS is hashed, not remembered: a rewrite in the same clock tick keeps its times.
    monkeypatch.setattr(program_cache, "SETTLED_SECONDS", 3600.0)
    fresh = tmp_path / "fresh.spm"
    fresh.write_bytes(b"c")
    assert program_cache.file_digest(fresh, digests) == hashlib.sha256(b"c").hexdigest()
    assert sorted(digests.iterdir()) == [remembered]


def test_the_cache_keeps_to_its_size_by_dropping_the_least_recently_used(tmp_path):
    cache = ProgramCache(tmp_path, limit_bytes=250)
    paths = [cache.write(tmp_path / f"{name}.bin", b"x" * 100) for name in "ab"]
    os.utime(paths[0], (time.time() - 100, time.time() - 100))
    os.utime(paths[1], (time.time() - 200, time.time() - 200))
    cache.touch(paths[1])  # used just now: kept
    cache.write(tmp_path / "c.bin", b"x" * 100)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["b.bin", "c.bin"]
    assert cache.size_bytes() <= 250


def test_the_cache_can_be_turned_off(trained_run, tmp_path):
    off = _run(_command("translate", "--model", str(trained_run), SENTENCES[0]), tmp_path,
               extra_env={"KERAS_TRANSFORMER_CACHE": "0", "KERAS_BACKEND": "torch"})
    assert off.returncode == 0, off.stderr.decode()[-3000:]
    assert not (tmp_path / "keras-transformer").exists()
    refused = _run(_command("translate", "--engine", "compiled", "--model", str(trained_run), SENTENCES[0]),
                   tmp_path, extra_env={"KERAS_TRANSFORMER_CACHE": "0"})
    assert refused.returncode == 2 and b"KERAS_TRANSFORMER_CACHE=0" in refused.stderr


def test_bad_lines_are_reported_and_skipped_and_every_good_line_is_translated_in_order(trained_run, warm_cache):
    cache, _ = warm_cache
    good = _run(_command("translate", "--model", str(trained_run), "Y dijo Dios", "Sea la luz"), cache)
    stdin = b"Y dijo Dios\n\xff\xfe x\nSea la luz\nnul\0here\n" + b"luz " * 25_000 + b"\n\x01\x1b[31m\n"
    result = _run(_command("translate", "--model", str(trained_run)), cache, stdin=stdin)
    stderr = result.stderr.decode()
    lines = result.stdout.decode().split("\n")[:-1]
    assert result.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    assert len(lines) == 6
    assert [lines[0], lines[2]] == good.stdout.decode().splitlines()
    assert lines[1] == "" and lines[3] == ""
    assert "line 2: not UTF-8 at byte 1 (0xff); skipped" in stderr
    assert "line 4: a NUL byte at byte 4; skipped" in stderr
    assert lines[4]  # line 5, 100,000 characters with no sentence end: cut at its spaces and translated

    replaced = _run(_command("translate", "--invalid-input", "replace", "--model", str(trained_run)), cache,
                    stdin=b"Y dijo Dios\n\xff\xfe x\n")
    assert replaced.returncode == 0 and len(replaced.stdout.decode().splitlines()) == 2
    assert b"1 lines held bytes that are not UTF-8" in replaced.stderr


def test_each_line_is_answered_as_it_arrives(trained_run, warm_cache):
    cache, _ = warm_cache
    env = {**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(cache)}
    process = subprocess.Popen(_command("translate", "--model", str(trained_run)), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        answers = []
        for sentence in SENTENCES:
            process.stdin.write(sentence.encode() + b"\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready, "no answer while the input stayed open"
            answers.append(process.stdout.readline().decode().rstrip("\n"))
        process.stdin.close()
        assert process.wait(timeout=TIMEOUT) == 0
        assert all(answers) and len(answers) == 2
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=TIMEOUT)
        for stream in (process.stdout, process.stderr):
            stream.close()


class _FirstTokenEngine(TextTranslator):
    """The text front end on the real tokenizer, with an engine that answers a sentence's first token."""

    def __init__(self, tokenizer):
        self.tokenizer, self.max_length, self.batch_size, self.bucketed = tokenizer, 24, 8, True

    def _decode(self, source):
        return np.concatenate([source[:, :1], np.full((len(source), 1), END_ID)], axis=1)

    def _decode_n_best(self, source, n, cross_attention=False):
        tokens = self._decode(source)[:, None, :]
        scores = np.zeros((len(source), 1))
        return NBest(tokens, scores, scores, np.zeros(tokens.shape))


@pytest.fixture(scope="module")
def front_end(trained_run):
    return _FirstTokenEngine(SentencePieceTokenizer(str(trained_run / VOCABULARY_FILE)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=400), invalid=st.sampled_from(["skip", "replace"]))
def test_any_bytes_on_stdin_give_one_output_line_per_input_line_and_no_traceback(raw, invalid, front_end,
                                                                                monkeypatch):
    monkeypatch.setattr(commands, "_translator", lambda args: front_end)
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(raw)))
    out = io.StringIO()
    args = build_parser().parse_args(["translate", "--model", "unused", "--invalid-input", invalid])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = commands.translate(args, out)
    lines = raw.split(b"\n")
    if not lines[-1]:
        lines.pop()
    assert out.getvalue().count("\n") == len(lines)
    assert status == (0 if invalid == "replace" else int(any(map(_is_bad, lines))))


def _is_bad(line):
    try:
        decode_line(line.removesuffix(b"\r"), 1)
        return False
    except BadLine:
        return True


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(st.text(), st.text(alphabet=st.characters(min_codepoint=0xD800,
                                                                           max_codepoint=0xDFFF)),
                                st.binary().map(lambda b: b.decode("utf-8", "surrogateescape"))), max_size=12))
def test_the_front_end_and_tokenizer_take_any_text_with_one_translation_each(texts, front_end):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown characters, lone surrogates: warned, not raised
        outputs = front_end(texts)
    assert len(outputs) == len(texts) and all(isinstance(text, str) for text in outputs)


@given(pieces=st.lists(st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))))
def test_each_lone_surrogate_and_nothing_else_becomes_one_replacement_character(pieces):
    text = "".join(pieces)
    cleaned, replaced = replace_lone_surrogates(text)
    surrogates = {i for i, character in enumerate(text) if "\ud800" <= character <= "\udfff"}
    assert replaced == len(surrogates) and len(cleaned) == len(text)
    assert all((after == "\ufffd") if i in surrogates else (after == before)
               for i, (before, after) in enumerate(zip(text, cleaned)))
    cleaned.encode("utf-8")  # no lone surrogate left


def test_jsonl_gives_each_line_its_own_warnings_and_stderr_the_batchs_as_before(front_end, monkeypatch):
    monkeypatch.setattr(commands, "_translator", lambda args: front_end)
    texts = ["Sea la luz", "luz " * 30, "我爱你中国"]
    tokens = len(np.asarray(front_end.tokenizer.tokenize([texts[1]])[0]).reshape(-1))
    out = io.StringIO()
    args = build_parser().parse_args(["translate", "--model", "unused", "--format", "jsonl", *texts])
    with pytest.warns(UserWarning) as said:
        assert commands.translate(args, out) == 0
    plain, long, unknown = map(json.loads, out.getvalue().splitlines())
    assert "warnings" not in plain
    assert tokens > 24 and long["warnings"] == ["1 sentence longer than the model takes was cut at clause boundaries "
                                                "and translated in pieces"]
    assert unknown["warnings"] == ["5 of 5 characters are unknown to the vocabulary, so the translation is a guess"]
    assert [str(warning.message) for warning in said if issubclass(warning.category, UserWarning)] == [
        "mostly unknown to the vocabulary, so the translation is a guess: '我爱你中国': 5 of 5 characters (100%)."]
    whole = io.StringIO()
    commands.translate(build_parser().parse_args(["translate", "--model", "unused", "--format", "jsonl",
                                                  "--no-sentence-splitting", texts[1]]), whole)
    assert json.loads(whole.getvalue())["warnings"] == [f"longer than max_length=24 tokens ({tokens}); truncated"]


def test_each_lone_surrogate_becomes_one_replacement_character_and_its_translation_says_so(front_end):
    with pytest.warns(UserWarning, match=r"^1 of 2 inputs held bytes that are not UTF-8 \(lone surrogates\)"):
        escaped, clean = front_end.n_best(["Sea \udcff\udcfe luz", "Sea la luz"], 1)
    assert escaped.source == "Sea \ufffd\ufffd luz" and clean.source == "Sea la luz"
    assert escaped.warnings == ("held 2 lone surrogates (bytes that are not UTF-8); each replaced by U+FFFD",)
    assert clean.warnings == ()


def test_warn_false_keeps_pythons_warnings_quiet_and_gives_each_translation_its_own_alike(front_end):
    texts = ["luz " * 30, "我爱你中国", "Sea \udcff luz", "Sea la luz", ""]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        told = front_end.n_best(texts, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = front_end.n_best(texts, 1, warn=False)
        front_end(texts, warn=False)
    assert len([warning for warning in said if issubclass(warning.category, UserWarning)]) == 2  # unknown, surrogate
    assert [translation.warnings for translation in quiet] == [translation.warnings for translation in told]
    assert [len(translation.warnings) for translation in quiet] == [1, 1, 1, 0, 0]


def test_a_cache_folder_that_cannot_be_written_falls_back_to_the_keras_model_with_a_warning(trained_run, tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    result = _run(_command("translate", "--model", str(trained_run), SENTENCES[0]), not_a_folder)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert len(result.stdout.decode().splitlines()) == 1
    assert b"cannot be used" in result.stderr and b"Traceback" not in result.stderr


def test_a_lone_sentence_decodes_in_one_row_as_it_would_in_a_batch(trained_run, warm_cache):
    from keras_transformer_runtime.compiled_translator import load_compiled_translator

    cache, first_translations = warm_cache
    translator = load_compiled_translator(str(trained_run), ProgramCache(cache / "keras-transformer"), beam_width=4)
    shapes = []
    outputs = translator._outputs
    translator._outputs = lambda source: shapes.append(source.shape) or outputs(source)
    alone = [translator(sentence) for sentence in SENTENCES]
    assert [rows for rows, _ in shapes] == [1, 1]
    translator.batch_cores = 1  # both in one batch, not a lone sentence a core
    assert translator(SENTENCES) == alone == first_translations
    assert shapes[-1][0] == min(8, translator.batch_size) > 1 and (1, shapes[0][1]) in translator.batch_shapes()


def test_a_program_exported_for_a_gpu_never_goes_through_the_fused_attention_kernel(monkeypatch):
    # On a GPU the fused kernel is cuDNN's flash attention, a custom call jax.export refuses to write.
    import keras

    from keras_transformer import models
    from keras_transformer.layers import attention
    from keras_transformer.translation.translation_program import attention_kernels_for_export

    def refused(*args, **kwargs):
        raise RuntimeError("a custom call without a compatibility guarantee")

    model = models.transformer(50, 50, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
    monkeypatch.setattr(attention, "fused_attention", refused)
    inputs = {"encoder_tokens": np.array([[5, 6, 7, 0]]), "decoder_tokens": np.array([[1, 8, 9, 0]])}
    with attention_kernels_for_export(model, "gpu"):
        logits = keras.ops.convert_to_numpy(model(inputs))
    assert logits.shape == (1, 4, 50) and np.isfinite(logits).all()
    with pytest.raises(RuntimeError, match="compatibility"):  # outside, and for a CPU, the layers are as they were
        model(inputs)
    with attention_kernels_for_export(model, "cpu"), pytest.raises(RuntimeError, match="compatibility"):
        model(inputs)


@pytest.mark.end_to_end
def test_a_greedy_call_of_many_sentences_is_decoded_in_queues_refilling_rows_to_the_translations_of_batches(
        trained_run, warm_cache, monkeypatch):
    from keras_transformer.data.corpus import load_bible_pairs
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator

    cache, _ = warm_cache
    sources = [pair.source for pair in load_bible_pairs("test")][:40]
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE_DIR", str(cache))  # where the child writing the program looks
    translator = load_compiled_translator(str(trained_run), ProgramCache(cache / "keras-transformer"), beam_width=1,
                                          write=write_program_in_a_child)
    shapes = []
    outputs = translator._outputs
    translator._outputs = lambda source: shapes.append(source.shape) or outputs(source)
    queued = translator(sources)
    assert translator.queue_size and all(rows > translator.batch_size for rows, _ in shapes)
    shapes.clear()
    translator.queue_size = None  # the batch program: batches of 8, each until its longest output ends
    assert translator(sources) == queued and all(rows == translator.batch_size for rows, _ in shapes)
    keras_engine = _run(_command("translate", "--engine", "keras", "--beam", "1", "--model", str(trained_run),
                                 *sources[:12]), cache, extra_env={"KERAS_BACKEND": "jax"})
    assert keras_engine.returncode == 0, keras_engine.stderr.decode()[-3000:]
    assert keras_engine.stdout.decode().splitlines() == queued[:12]
