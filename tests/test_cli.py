"""The command line as a newcomer meets it: help, quiet start, clean stdout, plain warnings."""

import argparse
import dataclasses
import inspect
import os
import re
import shutil
import subprocess
import sys

import pytest

import keras_transformer_cli as cli
from keras_transformer_cli import arguments
from keras_transformer_cli import commands
from keras_transformer.training.presets import ACCELERATOR_TRAINING_DEFAULTS
from keras_transformer.training.presets import DEFAULT_PRESET
from keras_transformer.training.presets import PRESETS
from keras_transformer.training.presets import TRAINING_DEFAULTS
from keras_transformer.training.train_config import TrainConfig
from conftest import FIXTURE_CORPUS

pytestmark = pytest.mark.backend_independent

EMOJI = "🙂🎉🔥 😀"


def _subparsers(parser):
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def _run(*args, **kwargs):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, **kwargs)


def _native_log_lines(stderr):
    """The lines TensorFlow's, XLA's and absl's C++ logging wrote, e.g. "E0000 00:00:17.2 123 util.cc:131] ..."."""
    return [line for line in stderr.splitlines() if re.match(r"[IWEF]\d{4} \d\d:\d\d:\d\d", line)]


def test_every_flag_of_every_verb_has_help_and_the_top_level_help_lists_each_verb_in_one_line(capsys):
    parser = cli.build_parser()
    verbs = _subparsers(parser)
    assert set(verbs) == {"train", "translate", "evaluate", "export", "import", "serve", "ablate", "cache"}
    for name, verb in verbs.items():
        for action in verb._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for name, verb in verbs.items():
        assert f"    {name}" in text, f"--help does not list {name}"


def test_train_help_states_every_default_and_the_default_presets_size(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for flag, default in (("--dropout", "0.1"), ("--seed", "0"),
                          ("--label-smoothing", "0.1"), ("--batch-tokens", "4096; 8192 for tiny on a GPU")):
        entry = re.search(rf"{flag} [A-Z_]+ (.{{0,400}})", text)  # the option's own entry, not the usage line
        assert entry and f"(default: {default})" in entry.group(1), flag
    tiny = TRAINING_DEFAULTS["tiny"]  # the help states the presets' own defaults
    for key in ("epochs", "steps_per_epoch", "warmup_steps", "vocabulary_size"):
        assert f"{tiny[key]} for tiny" in text, key
    gpu = ACCELERATOR_TRAINING_DEFAULTS["tiny"]  # and the GPU's, each flag's and the description's
    for key in ("epochs", "steps_per_epoch", "warmup_steps"):
        assert f"{gpu[key]} for tiny on a GPU" in text, key
    assert f"on a GPU, {gpu['epochs']} x {gpu['steps_per_epoch']} steps of about {gpu['batch_tokens']:,} tokens" in text
    assert f"on a CPU, {tiny['epochs']} x {tiny['steps_per_epoch']} steps of about {tiny['batch_tokens']:,} tokens" in text
    sizes = PRESETS["tiny"]
    assert cli.build_parser().parse_args(["train"]).preset is None and DEFAULT_PRESET == "tiny"
    assert f"The default preset is tiny: {sizes['num_layers']}+{sizes['num_layers']} layers" in text
    assert f"d_model {sizes['d_model']}, {sizes['num_heads']} heads" in text
    assert "see docs/training.md" in text and "EPYC" not in text  # timings live in the docs, not the help
    assert re.search(r"--max-length MAX_LENGTH [^(]*\(default: 128, or the --from run's\)", text)


def test_the_parsers_defaults_are_the_configs():
    args = vars(cli.build_parser().parse_args(["train"]))
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    shared = set(args) & set(defaults) - {"jit_compile"}  # "auto" is the CLI's None
    assert len(shared) > 15
    assert {key: args[key] for key in shared} == {key: defaults[key] for key in shared}
    assert set(arguments.PRESET_NAMES) == set(PRESETS)


def test_the_decoding_defaults_of_a_run_trained_here_are_the_translators(tmp_path):
    from keras_transformer.translation.translator import DEFAULT_BATCH_SIZE
    from keras_transformer.translation.translator import DEFAULT_BEAM_WIDTH
    from keras_transformer.translation.translator import DEFAULT_NO_REPEAT_NGRAM_SIZE
    from keras_transformer.translation.translator import Translator
    from keras_transformer_cli.search_flags import apply_search_defaults
    from keras_transformer_runtime.search_defaults import PACKAGE_DEFAULTS

    (tmp_path / "config.json").write_text('{"max_length": 40}')
    for verb in (["translate", "--model", str(tmp_path)], ["evaluate", "--model", str(tmp_path)]):
        arguments = cli.build_parser().parse_args(verb)
        assert arguments.beam is None and arguments.beam_search is None  # the run's, once resolved
        search = apply_search_defaults(arguments)
        assert arguments.no_repeat_ngram == DEFAULT_NO_REPEAT_NGRAM_SIZE == cli.NO_REPEAT_NGRAM
        assert arguments.beam == DEFAULT_BEAM_WIDTH == cli.BEAM_WIDTH
        assert arguments.batch_size == DEFAULT_BATCH_SIZE
        decoding = search.decoding
        assert (decoding.beam_search, decoding.length_penalty, decoding.early_stopping, decoding.max_new_tokens) == (
            "kept", 0.6, False, 39)
    defaults = inspect.signature(Translator).parameters
    assert PACKAGE_DEFAULTS["beam_search"] == defaults["beam_search"].default
    assert PACKAGE_DEFAULTS["early_stopping"] == defaults["early_stopping"].default


@pytest.mark.parametrize("forced_eos, ends", [(0, True), (None, False)])
def test_an_imported_run_counts_a_closing_end_at_the_limit_only_where_the_model_forces_one(tmp_path, forced_eos,
                                                                                          ends):
    import json

    from keras_transformer_runtime.search_defaults import resolve_search
    from keras_transformer_runtime.search_defaults import run_ends_at_limit
    from keras_transformer_runtime.search_defaults import write_generation_file

    model, run = tmp_path / "model", tmp_path / "run"
    model.mkdir(), run.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 64, "forced_eos_token_id": forced_eos}))
    (model / "generation_config.json").write_text(json.dumps({"num_beams": 4, "max_length": 30}))
    assert run_ends_at_limit(str(run))  # a run without generation.json: the package's searches, as always
    write_generation_file(str(model), str(run))
    assert run_ends_at_limit(str(run)) is ends
    # transformers' max_length counts the start token, and the forced end where there is one.
    assert resolve_search(str(run)).decoding.max_new_tokens == (28 if ends else 29)


def test_ablate_help_names_the_settings_defaults():
    from keras_transformer.training import ablation

    full, quick = ablation.AblationSettings(), ablation.QUICK
    for key, text in cli.ABLATE_SETTINGS.items():
        value = getattr(full, key)
        if isinstance(value, int):
            assert f"(default: {value}" in text, key
            if getattr(quick, key) != value:
                assert f"{getattr(quick, key)} with --quick" in text, key


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["train", "--bogus"], ["translate"]])
def test_help_and_bad_flags_answer_without_importing_keras(argv):
    probe = (
        "import sys, keras_transformer_cli\n"
        "try:\n"
        f"    keras_transformer_cli.main({argv!r})\n"
        "except SystemExit as exit_:\n"
        "    code = exit_.code\n"
        "print('keras imported:', 'keras' in sys.modules, 'tensorflow imported:', 'tensorflow' in sys.modules,"
        " 'exit', code, file=sys.stderr)\n"
    )
    result = _run("-c", probe)
    assert "keras imported: False tensorflow imported: False" in result.stderr, result.stderr[-2000:]
    assert ("exit 0" if "--help" in argv else "exit 2") in result.stderr


def test_piped_stdout_holds_only_results_and_warnings_are_plain_lines(trained_run):
    result = _run("-m", "keras_transformer_cli", "translate", "--model", str(trained_run),
                  "Y dijo Dios: Sea la luz.", EMOJI)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.stdout.splitlines()) == 2
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    warning_lines = [line for line in result.stderr.splitlines() if "mostly unknown" in line]
    assert len(warning_lines) == 1, result.stderr[-3000:]
    assert warning_lines[0].startswith("keras-transformer: warning: mostly unknown to the vocabulary")
    assert f"{EMOJI!r}: 4 of 4 characters (100%)" in warning_lines[0]
    assert "warnings.warn" not in result.stderr and "UserWarning" not in result.stderr
    # TensorFlow's and XLA's C++ start-up lines stay out of the terminal.
    for noise in ("absl::InitializeLog", "cuInit", "cpu_feature_guard", "cudart_stub"):
        assert noise not in result.stderr
    assert not _native_log_lines(result.stderr), result.stderr[-3000:]


@pytest.mark.end_to_end
@pytest.mark.skipif(not commands.importable("tensorflow"), reason="the tf.data pipeline needs TensorFlow")
def test_train_keeps_tensorflows_cpp_logging_out_of_the_terminal_after_the_start(tmp_path):
    # oneDNN logs an ERROR line the first time tf.data transposes int64
    # (ragged concat), between the "corpus:" and "batches:" log lines.
    corpus = str(FIXTURE_CORPUS)
    result = _run("-m", "keras_transformer_cli", "train", "--output", str(tmp_path / "run"), "--corpus", corpus,
                  "--input-pipeline", "tf.data", "--num-layers", "1", "--d-model", "16", "--num-heads", "2",
                  "--ff-dim", "32", "--max-length", "24", "--vocabulary-size", "400", "--batch-tokens", "240",
                  "--epochs", "1", "--steps-per-epoch", "1", "--warmup-steps", "1", "--dev-bleu-sentences", "0",
                  env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batches: " in result.stderr and "backend tensorflow" in result.stderr
    assert not _native_log_lines(result.stderr), result.stderr[-3000:]


def test_evaluate_to_a_pipe_sends_the_progress_bar_to_stderr(trained_run, tmp_path):
    corpus = str(FIXTURE_CORPUS)
    result = _run("-m", "keras_transformer_cli", "evaluate", "--model", str(trained_run), "--split", "heldout",
                  "--limit", "3", "--corpus", corpus)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0].split() == ["split", "beam", "sentences", "BLEU", "chrF", "loops"]
    assert "\x1b" not in result.stdout and "\r" not in result.stdout and "sentence" in result.stderr


def test_translator_warns_only_for_mostly_unknown_input(trained_run):
    from keras_transformer.translation.translator import Translator

    translator = Translator.from_directory(str(trained_run))
    with pytest.warns(UserWarning, match=r"mostly unknown .*'我爱你中国': 5 of 5 characters \(100%\)"):
        translator(["Y dijo Dios.", "我爱你中国"])
    assert translator.unknown_characters("Sea la luz 🙂") == (1, 9)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        translator(["Y dijo Dios: Sea la luz. 🙂"])  # one unknown character of 21: no warning


def test_a_truncated_model_is_reported_as_damaged(trained_run, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(trained_run, folder)
    whole = (folder / "model.keras").read_bytes()
    (folder / "model.keras").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["translate", "--model", str(folder), "Sea la luz."])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert f"model.keras' is damaged: {len(whole) // 2:,} bytes, not a complete .keras archive" in error
    assert "not found" not in error.lower()


@pytest.mark.parametrize("export_format", ["savedmodel", "ctranslate2"])
def test_export_refuses_a_folder_that_holds_files_or_the_run_itself(export_format, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    for out, expected in ((taken, "exists and is not empty"), (run, "is the run folder"), (tmp_path, "holds it")):
        with pytest.raises(SystemExit) as refused:
            cli.main(["export", "--model", str(run), "--out", str(out), "--format", export_format, "--force"
                      ] if expected != "exists and is not empty" else
                     ["export", "--model", str(run), "--out", str(out), "--format", export_format])
        assert refused.value.code == 2
        assert expected in capsys.readouterr().err
    assert (taken / "keep.txt").read_text() == "mine" and run.exists()


@pytest.mark.backend_independent
def test_translate_ends_its_process_once_flushed_and_the_other_verbs_return_their_status(monkeypatch):
    from keras_transformer_cli import console

    exits = []
    monkeypatch.setattr(console, "main", lambda argv: 1)
    monkeypatch.setattr(console.os, "_exit", exits.append)
    assert console.console_main(["evaluate", "--model", "runs/x"]) == 1 and exits == []
    console.console_main(["--verbose", "translate", "--model", "runs/x", "Hola."])
    assert exits == [1]
    from importlib.metadata import entry_points

    (script,) = [entry for entry in entry_points(group="console_scripts") if entry.name == "keras-transformer"]
    assert script.value == "keras_transformer_cli.console:console_main"
