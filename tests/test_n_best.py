"""N-best lists with scores: the first is the translation, the scores are the model's log-probabilities."""

import numpy as np
import pytest

import keras

from keras_transformer.decoding import mask_forbidden_tokens
from keras_transformer.model_parts import DECODER_TOKENS
from keras_transformer.model_parts import ENCODER_TOKENS
from keras_transformer.translation.translator import Translator
from keras_transformer_runtime.hypotheses import Translation
from keras_transformer_runtime.special_tokens import START_ID

SENTENCES = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz.", "Dios"]


@pytest.fixture(scope="module")
def translator(trained_run):
    # No loop guard: the recomputed scores below use the model's distribution without it.
    return Translator.from_directory(str(trained_run), max_new_tokens=8, beam_width=4, no_repeat_ngram_size=0)


@pytest.mark.parametrize("beam_width", [1, 4])
def test_the_first_hypothesis_is_the_translation(trained_run, beam_width):
    translator = Translator.from_directory(str(trained_run), max_new_tokens=8, beam_width=beam_width)
    translations = translator.n_best(SENTENCES + [""], beam_width)
    assert [translation.text for translation in translations] == translator(SENTENCES + [""])
    assert all(isinstance(translation, Translation) for translation in translations)
    assert translations[-1].hypotheses[0].text == "" and len(translations[-1].hypotheses) == 1
    assert translator.n_best(SENTENCES[0], 1).text == translator(SENTENCES[0])


def test_scores_are_the_sums_of_the_log_probabilities_the_whole_model_gives(translator):
    translations = translator.n_best(SENTENCES, 3)
    rows = []  # (source ids, hypothesis, its token ids): every hypothesis of every sentence
    for text, translation in zip(SENTENCES, translations):
        assert 1 <= len(translation.hypotheses) <= 3
        normalized = [hypothesis.normalized_score for hypothesis in translation.hypotheses]
        assert normalized == sorted(normalized, reverse=True)
        source = [int(i) for i in np.asarray(translator.tokenizer.tokenize([text])[0]).reshape(-1)]
        for hypothesis in translation.hypotheses:
            rows.append((source, hypothesis, [int(translator.tokenizer.token_to_id(p)) for p in hypothesis.tokens]))
    # The whole model on the whole prefixes (no cache): one teacher-forced pass over every hypothesis,
    # padded after its end (padded sources are masked, the causal mask hides later positions).
    sources = np.zeros((len(rows), max(len(source) for source, _, _ in rows)), "int32")
    prefixes = np.zeros((len(rows), max(len(ids) for _, _, ids in rows)), "int32")
    for row, (source, _, ids) in enumerate(rows):
        sources[row, : len(source)] = source
        prefixes[row, : len(ids)] = [START_ID] + ids[:-1]
    logits = translator.model({ENCODER_TOKENS: sources, DECODER_TOKENS: prefixes})
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(mask_forbidden_tokens(
        keras.ops.cast(logits, "float32")), axis=-1))
    for row, (_, hypothesis, ids) in enumerate(rows):
        expected = [float(log_probs[row, position, token]) for position, token in enumerate(ids)]
        np.testing.assert_allclose(hypothesis.token_scores, expected, rtol=1e-4, atol=1e-4)
        assert hypothesis.score == pytest.approx(sum(expected), rel=1e-4, abs=1e-4)
        penalty = ((5 + len(ids)) / 6) ** translator.length_penalty
        assert hypothesis.normalized_score == pytest.approx(hypothesis.score / penalty, rel=1e-5)


def test_the_hypotheses_of_a_source_differ_and_serialize(translator):
    import json

    translation = translator.n_best(SENTENCES[0], 4)
    tokens = [hypothesis.tokens for hypothesis in translation.hypotheses]
    assert len(set(tokens)) == len(tokens)
    record = json.loads(json.dumps(translation.to_json()))
    assert record["source"] == SENTENCES[0]
    assert [h["text"] for h in record["hypotheses"]] == [h.text for h in translation.hypotheses]
    assert "token_scores" not in translation.to_json(token_scores=False)["hypotheses"][0]


@pytest.mark.parametrize("n", [0, 5, 1.5, True])
def test_more_hypotheses_than_the_beam_keeps_are_refused(translator, n):
    with pytest.raises(ValueError, match="beam's width, 4"):
        translator.n_best(SENTENCES, n)


# The command line's printing, against the Python API's lists (checked on every backend above).
@pytest.mark.backend_independent
def test_the_command_line_prints_n_best_lines_and_json_lines_that_match_python(trained_run, capsys):
    import json

    from keras_transformer_cli import main

    model = str(trained_run)
    main(["translate", "--model", model, "--engine", "keras", *SENTENCES])
    plain = capsys.readouterr().out.splitlines()
    main(["translate", "--model", model, "--engine", "keras", "--n-best", "2", "--beam", "4", *SENTENCES])
    lines = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(fields[0]) for fields in lines] == [0, 0, 1, 1, 2, 2] and all(len(f) == 4 for f in lines)
    assert [fields[1] for fields in lines[::2]] == plain
    assert float(lines[0][3]) >= float(lines[1][3])
    main(["translate", "--model", model, "--engine", "keras", "--format", "jsonl", "--n-best", "3", "--token-scores",
          *SENTENCES])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    python = Translator.from_directory(model).n_best(SENTENCES, 3)
    assert records == [json.loads(json.dumps(translation.to_json())) for translation in python]


@pytest.mark.parametrize("flags, message", [
    (["--n-best", "5", "--beam", "4"], "--n-best 5 is more than the --beam 4"),
    (["--token-scores"], "--token-scores adds to the scores of --n-best or --format jsonl"),
])
def test_bad_combinations_get_one_line_errors(trained_run, capsys, flags, message):
    from keras_transformer_cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["translate", "--model", str(trained_run), *flags, "Dios"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 2 and message in error[-1]  # argparse's usage line, then the one-line error
