"""`resolve_search`: the run's search settings under `DecodingSettings`' names, the flags over them."""

import dataclasses
import inspect
import json

import pytest

from keras_transformer_cli.search_flags import SEARCH_FLAGS
from keras_transformer_runtime.decoding_settings import DecodingSettings
from keras_transformer_runtime.search_defaults import GENERATION_FILE
from keras_transformer_runtime.search_defaults import PACKAGE_DEFAULTS
from keras_transformer_runtime.search_defaults import SearchSettings
from keras_transformer_runtime.search_defaults import generation_defaults
from keras_transformer_runtime.search_defaults import resolve_search
from keras_transformer_runtime.search_defaults import write_generation_file

pytestmark = pytest.mark.backend_independent

FIELDS = {field.name for field in dataclasses.fields(DecodingSettings)}


def _imported_run(tmp_path, generation_config):
    model, run = tmp_path / "model", tmp_path / "run"
    model.mkdir(), run.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 64, "forced_eos_token_id": 0}))
    (model / "generation_config.json").write_text(json.dumps(generation_config))
    return model, run


def test_every_search_option_has_the_name_decoding_settings_gives_it():
    options = set(inspect.signature(resolve_search).parameters) - {"run_directory"}
    assert options == set(PACKAGE_DEFAULTS) == set(SEARCH_FLAGS.values())
    assert options <= FIELDS
    assert {field.name for field in dataclasses.fields(SearchSettings)} == {"decoding", "defaults", "flags", "notes"}
    assert set(PACKAGE_DEFAULTS) <= set(generation_defaults("no such config.json"))
    # The package's defaults are the settings' own.
    assert resolve_search("no such run").decoding == DecodingSettings()


def test_a_flag_given_wins_under_its_settings_name():
    search = resolve_search("no such run", beam_width=1, no_repeat_ngram_size=0, beam_search="pooled")
    assert search.decoding == DecodingSettings(beam_width=1, no_repeat_ngram_size=0, beam_search="pooled",
                                               length_penalty=1.0)
    assert search.flags == ("--beam", "--beam-search", "--no-repeat-ngram")


def test_generation_json_keeps_its_keys_and_reads_back_as_the_settings(tmp_path):
    model, run = _imported_run(tmp_path, {"num_beams": 5, "no_repeat_ngram_size": 2, "length_penalty": 1.1,
                                          "early_stopping": True, "max_length": 30})
    written = write_generation_file(str(model), str(run))
    on_disk = json.loads((run / GENERATION_FILE).read_text())
    assert on_disk == written
    # The file format of the runs imported before: `beam` and `no_repeat_ngram`.
    assert (on_disk["beam"], on_disk["no_repeat_ngram"]) == (5, 2)
    assert not {"beam_width", "no_repeat_ngram_size"} & set(on_disk)
    search = resolve_search(str(run))
    assert search.decoding == DecodingSettings(beam_width=5, beam_search="pooled", length_penalty=1.1,
                                               early_stopping=True, no_repeat_ngram_size=2, max_new_tokens=28)
    assert search.flags == () and GENERATION_FILE in search.defaults


def test_a_generation_json_written_before_reads_the_same(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / GENERATION_FILE).write_text(json.dumps({
        "beam_search": "pooled", "beam": 6, "length_penalty": 1.0, "early_stopping": False, "no_repeat_ngram": 0,
        "max_new_tokens": 40, "from": "generation_config.json", "notes": ["do_sample=True"], "end_at_limit": True}))
    search = resolve_search(str(run), no_repeat_ngram_size=3)
    assert (search.decoding.beam_width, search.decoding.no_repeat_ngram_size) == (6, 3)
    assert search.notes == ("do_sample=True",) and search.flags == ("--no-repeat-ngram",)


def test_the_command_line_sets_each_flag_from_the_setting_of_its_name(tmp_path):
    from keras_transformer_cli import build_parser
    from keras_transformer_cli.search_flags import apply_search_defaults
    from keras_transformer_cli.search_flags import decoding_settings

    (tmp_path / "config.json").write_text('{"max_length": 40}')
    args = build_parser().parse_args(["translate", "--model", str(tmp_path), "--beam", "2", "--no-repeat-ngram", "0"])
    assert set(SEARCH_FLAGS) <= set(vars(args))  # the flags' own names, mapped in one place
    search = apply_search_defaults(args)
    assert (args.beam, args.no_repeat_ngram) == (2, 0)
    assert decoding_settings(args) == search.decoding.replace(max_output_ratio=None)


@pytest.mark.parametrize("settings", [
    DecodingSettings(beam_width=1, beam_search="kept", length_penalty=0.6, early_stopping=False, max_new_tokens=7,
                     no_repeat_ngram_size=0, max_output_ratio=0.0),
    DecodingSettings(beam_width=4, beam_search="pooled", length_penalty=1.25, early_stopping=True,
                     max_new_tokens=None, no_repeat_ngram_size=3, max_output_ratio=3.5),
], ids=["greedy", "beam"])
def test_the_flags_a_child_translate_gets_parse_back_to_the_same_search(settings):
    from keras_transformer_cli import build_parser
    from keras_transformer_cli.search_flags import decoding_settings
    from keras_transformer_cli.search_flags import search_flag_arguments

    args = build_parser().parse_args(["translate", "--model", "RUN", *search_flag_arguments(settings), "text"])
    assert decoding_settings(args) == settings
