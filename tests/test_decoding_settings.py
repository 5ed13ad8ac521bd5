"""`DecodingSettings`: one decoding setting, checked once, named once in the program cache."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from keras_transformer_runtime.decoding_settings import DecodingSettings
from keras_transformer_runtime.search_defaults import DEFAULT_MAX_OUTPUT_RATIO

pytestmark = pytest.mark.backend_independent

# The options that change what a program computes, each with a few values.
OPTIONS = {
    "beam_width": st.sampled_from([1, 2, 4]),
    "beam_search": st.sampled_from(["kept", "pooled"]),
    "length_penalty": st.sampled_from([0.0, 0.6, 1.0]),
    "early_stopping": st.booleans(),
    "no_repeat_ngram_size": st.sampled_from([0, 3]),
    "max_new_tokens": st.sampled_from([16, 127]),
    "max_output_ratio": st.sampled_from([0.0, 2.0, 3.5]),
    "n_best": st.sampled_from([None, 1, 4]),
    "cross_attention": st.booleans(),
}


def _computed(settings, end_at_limit):
    """What a program of `settings` computes: the options that matter for its search, nothing else."""
    fields = dataclasses.asdict(settings)
    if settings.beam_search != "pooled":  # early stopping and the forced end are a pooled search's
        fields["early_stopping"], end_at_limit = False, True
    return tuple(sorted(fields.items())), end_at_limit


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries(OPTIONS), st.fixed_dictionaries(OPTIONS), st.booleans(), st.booleans())
def test_two_settings_share_a_program_file_exactly_when_they_compute_the_same(first, second, first_end, second_end):
    one, other = DecodingSettings(**first), DecodingSettings(**second)
    same_file = one.program_file(end_at_limit=first_end) == other.program_file(end_at_limit=second_end)
    assert same_file == (_computed(one, first_end) == _computed(other, second_end))


def test_the_refilling_program_has_a_file_of_its_own():
    settings = DecodingSettings(beam_width=1, max_new_tokens=64)
    assert settings.program_file() != settings.program_file(refill_slots=8)
    assert settings.program_file(refill_slots=8).startswith("refill8-")


def test_values_are_normalized_once_and_the_setting_is_frozen():
    settings = DecodingSettings(beam_width=2, length_penalty=1, early_stopping=0, max_output_ratio=None,
                                cross_attention=True)
    assert (settings.length_penalty, settings.early_stopping) == (1.0, False)
    assert isinstance(settings.length_penalty, float)
    assert settings.max_output_ratio == DEFAULT_MAX_OUTPUT_RATIO
    assert settings.cross_attention is False  # the cross-attention comes with an n-best list only
    assert DecodingSettings(n_best=2, cross_attention=True).cross_attention is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.beam_width = 4
    assert settings.replace(beam_width=1).beam_width == 1 and settings.beam_width == 2


@pytest.mark.parametrize("options, message", [
    ({"beam_width": 0}, "beam_width must be an int >= 1"),
    ({"beam_width": True}, "beam_width must be an int >= 1"),
    ({"beam_width": 2.0}, "beam_width must be an int >= 1"),
    ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size must be an int >= 0"),
    ({"max_new_tokens": 0}, "max_new_tokens must be an int >= 1"),
    ({"n_best": 0}, "n_best must be an int >= 1"),
    ({"beam_search": "greedy"}, "beam_search 'greedy': expected one of kept, pooled"),
    ({"max_output_ratio": -1}, "max_output_ratio must be a number >= 0"),
])
def test_a_setting_out_of_range_is_refused_when_made(options, message):
    with pytest.raises(ValueError, match=message):
        DecodingSettings(**options)


def test_a_program_file_needs_a_length_limit():
    with pytest.raises(ValueError, match="max_new_tokens"):
        DecodingSettings().program_file()
    assert "-new99" in DecodingSettings().program_file(99)


def test_the_translator_arguments_reach_a_translator_unchanged():
    keras = pytest.importorskip("keras")
    import keras_transformer as kt
    from keras_transformer.translation.translator import Translator

    class Tokenizer:
        def vocabulary_size(self):
            return 20

        def tokenize(self, texts):
            raise AssertionError("not called")

        detokenize = tokenize

    settings = DecodingSettings(beam_width=2, beam_search="pooled", length_penalty=1.0, early_stopping=True,
                                no_repeat_ngram_size=0, max_new_tokens=5, max_output_ratio=2.0)
    keras.utils.set_random_seed(0)
    model = kt.models.transformer(20, 20, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
    translator = Translator(model, Tokenizer(), **settings.translator_arguments())
    for name, value in settings.translator_arguments().items():
        assert getattr(translator, name) == value, name
