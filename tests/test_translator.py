"""Translator and BLEU on a model trained for a few steps on the fixture."""


import pytest

from keras_transformer.translation.evaluation import score_translations
from keras_transformer.translation.translator import DEFAULT_BEAM_WIDTH
from keras_transformer.translation.translator import Translator

from conftest import FIXTURE_CORPUS as FIXTURE
SENTENCES = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz."]


@pytest.fixture(scope="module")
def run_dir(trained_run):
    return trained_run


@pytest.fixture(scope="module")
def translator(run_dir):
    return Translator.from_directory(str(run_dir), max_new_tokens=6)


def test_strings_in_strings_out(translator):
    outputs = translator(SENTENCES)
    assert isinstance(outputs, list) and len(outputs) == 2
    assert all(isinstance(text, str) for text in outputs)
    assert translator(SENTENCES[0]) == outputs[0]


def test_empty_strings_translate_to_empty_and_do_not_disturb_the_batch(translator):
    outputs = translator(["", SENTENCES[0], "   ", SENTENCES[1]])
    assert outputs[0] == "" and outputs[2] == ""
    assert outputs[1::2] == translator(SENTENCES)


def test_inputs_handed_whole_beyond_max_length_are_truncated_with_a_warning(translator):
    long_text = " ".join([SENTENCES[0]] * 20)
    with pytest.warns(UserWarning, match="truncated"):
        outputs = translator([long_text, SENTENCES[1]], split_sentences=False)
    assert isinstance(outputs[0], str) and outputs[1] == translator(SENTENCES[1])


def test_invalid_utf8_bytes_are_replaced_not_fatal(translator):
    outputs = translator([b"Y dijo Dios \xff\xfe luz", SENTENCES[0].encode("utf-8")])
    assert all(isinstance(text, str) for text in outputs)
    assert outputs[1] == translator(SENTENCES[0])


def test_the_default_decodes_with_a_beam_of_four(run_dir, translator):
    # (beam_search with width 1 equals greedy_search: tests/test_decoding.py)
    assert translator.beam_width == DEFAULT_BEAM_WIDTH == 4
    explicit = Translator.from_directory(str(run_dir), beam_width=4, max_new_tokens=6)
    assert explicit(SENTENCES) == translator(SENTENCES)
    for width in (1, 3):
        other = Translator.from_directory(str(run_dir), beam_width=width, max_new_tokens=6)
        assert all(isinstance(text, str) for text in other(SENTENCES))


def test_compiled_decoding_with_bucketed_sources_translates_the_same(run_dir, translator):
    compiled = Translator.from_directory(str(run_dir), max_new_tokens=6, jit_compile=True)
    source = compiled._source_tokens(SENTENCES)
    assert source.shape[1] % 16 == 0 or source.shape[1] == compiled.max_length
    assert compiled(SENTENCES) == translator(SENTENCES)
    assert compiled(SENTENCES[1]) == translator(SENTENCES[1])


def test_a_vocabulary_of_another_size_is_refused(translator):
    from keras_transformer.data.tokenizer import load_tokenizer
    from keras_transformer.data.tokenizer import train_tokenizer

    other = load_tokenizer(train_tokenizer(["Sea la luz.", "Let there be light."], vocabulary_size=20))
    with pytest.raises(ValueError, match="not trained together"):
        Translator(translator.model, other)


def test_missing_model_folder_raises_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="keras-transformer train"):
        Translator.from_directory(str(tmp_path))


def test_bleu_uses_every_reference():
    hypotheses = ["in the beginning god created the heaven and the earth"]
    single = score_translations(hypotheses, [("In the beginning, God created the heavens and the earth.",)])
    both = score_translations(
        hypotheses,
        [("In the beginning, God created the heavens and the earth.",
          "in the beginning god created the heaven and the earth")],
    )
    assert both["bleu"] == pytest.approx(100.0) and single["bleu"] < 60.0
    assert both["references_per_sentence"] == 2 and "nrefs:2" in both["bleu_signature"]
    with pytest.raises(ValueError, match="hypotheses"):
        score_translations(hypotheses, [])


def test_cli_translates_arguments_and_evaluates_a_split(run_dir, capsys):
    import json

    from keras_transformer_cli import main

    main(["translate", "--model", str(run_dir), SENTENCES[0], SENTENCES[1]])
    assert len(capsys.readouterr().out.splitlines()) == 2  # one line each, even if empty
    main(["evaluate", "--model", str(run_dir), "--split", "heldout", "--limit", "3", "--corpus", FIXTURE])
    assert "BLEU" in capsys.readouterr().out
    report = json.loads((run_dir / "evaluation-heldout-beam4-norepeat3.json").read_text())
    assert report["sentences"] == 3 and len(report["translations"]) == 3 and report["bleu"] >= 0.0


MORE_SENTENCES = [
    "Y dijo Dios: Sea la luz.",
    "En el principio creó Dios los cielos y la tierra.",
    "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la haz del abismo.",
    "Luz.",
    "Y vió Dios que la luz era buena.",
]


def test_a_call_of_several_batches_translates_each_sentence_as_alone_in_input_order(run_dir, translator):
    batched = Translator.from_directory(str(run_dir), max_new_tokens=6, batch_size=2)
    reported = []
    outputs = batched(["", *MORE_SENTENCES], progress=reported.append, split_sentences=False)
    assert outputs[0] == ""
    assert outputs[1:] == [translator(text, split_sentences=False) for text in MORE_SENTENCES]
    assert sum(reported) == len(MORE_SENTENCES) + 1 and len(reported) == 4  # the empty one, then 3 batches


def test_compiled_batches_come_in_a_few_shapes(run_dir):
    import keras

    compiled = Translator.from_directory(str(run_dir), max_new_tokens=6, jit_compile=True, batch_size=16)
    shapes = {compiled._padded_batch([[5] * length] * rows).shape
              for length in range(1, compiled.max_length + 1, 5) for rows in range(1, 17)}
    # Widths of 32 and up (batch_buckets.source_widths), at most max_length (the fixture's is 24).
    assert {width for _, width in shapes} == {min(32, compiled.max_length)}
    assert {rows for rows, _ in shapes} == {8, 16}
    # A call's last, smaller batch is as large as its others.
    assert compiled._padded_batch([[5, 6]] * 3, batch_rows=16).shape == (16, min(32, compiled.max_length))
    # Eager (JAX compiles its loop whatever is asked): no padding beyond the longest source.
    eager = Translator.from_directory(str(run_dir), max_new_tokens=6, jit_compile=False)
    expected = (8, min(32, eager.max_length)) if keras.backend.backend() == "jax" else (2, 2)
    assert eager._padded_batch([[5, 6], [7]]).shape == expected


def test_decoding_compiles_by_default_where_xla_is(run_dir):
    import keras

    default = Translator.from_directory(str(run_dir), max_new_tokens=6)
    assert default.decoder.jit_compile == (keras.backend.backend() in ("tensorflow", "jax"))
    with pytest.raises(ValueError, match="jit_compile"):
        Translator.from_directory(str(run_dir), jit_compile="yes")
    with pytest.raises(ValueError, match="batch_size"):
        Translator.from_directory(str(run_dir), batch_size=0)
    from keras_transformer.machine import has_accelerator
    from keras_transformer.translation.translator import BATCH_SIZE
    from keras_transformer.translation.translator import COMPILED_CPU_BATCH_SIZE

    # On a CPU: 8 where the loop compiles (TensorFlow by default; JAX always), 64 where it runs eagerly.
    cpu = not has_accelerator()
    backend = keras.backend.backend()
    assert default.batch_size == (COMPILED_CPU_BATCH_SIZE if cpu and backend != "torch" else BATCH_SIZE)
    eager = Translator.from_directory(str(run_dir), jit_compile=False)
    assert eager.batch_size == (COMPILED_CPU_BATCH_SIZE if cpu and backend == "jax" else BATCH_SIZE)
    assert Translator.from_directory(str(run_dir), batch_size=5).batch_size == 5
