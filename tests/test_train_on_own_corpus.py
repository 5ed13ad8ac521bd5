"""`train`, `evaluate` and `ablate` on your own parallel files (French -> English fixture)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import keras_transformer_cli as cli
from keras_transformer.data.parallel_corpus import ParallelCorpus
from keras_transformer.errors import UserInputError
from keras_transformer.training.train_config import TrainConfig

pytestmark = pytest.mark.backend_independent

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TSV = str(FIXTURES / "bible_fr_en_small.tsv")
FRENCH, ENGLISH = str(FIXTURES / "bible_fr_en_small.fr.gz"), str(FIXTURES / "bible_fr_en_small.en.gz")
TINY_FLAGS = [
    "--preset", "tiny", "--num-layers", "1", "--d-model", "16", "--num-heads", "2", "--ff-dim", "32",
    "--max-length", "24", "--vocabulary-size", "300", "--batch-tokens", "240", "--warmup-steps", "2",
    "--epochs", "1", "--steps-per-epoch", "2",
]


def _run(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "keras_transformer_cli", *args], capture_output=True, text=True,
                          timeout=600, **kwargs)


def test_the_corpus_flags_reach_the_train_config_and_three_paths_are_refused(capsys):
    parser = cli.build_parser()
    args = parser.parse_args([
        "train", "--corpus", FRENCH, ENGLISH, "--test", "t.fr", "t.en", "--dev-fraction", "0.1", "--header",
        "--skip-bad-lines", "--source-language", "fr", "--target-language", "en",
    ])
    options = {k: v for k, v in vars(args).items() if k not in ("command", "overwrite", "handler", "verbose")}
    config = TrainConfig(**options)
    assert config.parallel_corpus() == ParallelCorpus(
        (FRENCH, ENGLISH), test=("t.fr", "t.en"), dev_fraction=0.1, header=True, skip_bad_lines=True,
        source_language="fr", target_language="en",
    )
    assert parser.parse_args(["train", "--corpus", TSV]).corpus == TSV
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--corpus", "a", "b", "c"])
    assert "--corpus: takes one TSV file or two aligned text files (source, target), got 3 paths" in (
        capsys.readouterr().err)


def test_the_default_output_folder_is_named_after_the_languages_or_the_corpus_file():
    assert TrainConfig(preset="tiny").resolved().output == os.path.join("runs", "es-en")
    named = TrainConfig(preset="tiny", corpus=[FRENCH, ENGLISH], source_language="fr", target_language="en")
    assert named.resolved().output == os.path.join("runs", "fr-en")
    resolved = TrainConfig(preset="tiny", corpus=(FRENCH, ENGLISH)).resolved()
    assert resolved.output == os.path.join("runs", "bible_fr_en_small")
    assert resolved.corpus == [FRENCH, ENGLISH]  # one spelling in config.json, whatever was passed


@pytest.mark.end_to_end
def test_cli_trains_on_aligned_gzipped_files_and_evaluates_on_the_runs_own_test_split(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # the default --output, runs/fr-en, lands here
    cli.main(["train", "--corpus", FRENCH, ENGLISH, "--source-language", "fr", "--target-language", "en",
              "--dev-fraction", "0.1", "--test-fraction", "0.1", *TINY_FLAGS])
    run = tmp_path / "runs" / "fr-en"
    summary = json.loads((run / "summary.json").read_text())
    splits = ParallelCorpus((FRENCH, ENGLISH), dev_fraction=0.1, test_fraction=0.1).read()
    assert (summary["source_language"], summary["target_language"], summary["corpus_format"]) == ("fr", "en", "aligned")
    assert (summary["train_pairs"], summary["dev_pairs"]) == (len(splits["train"]), len(splits["dev"]))
    assert summary["completed_steps"] == 2 and summary["skipped_lines"] == {}
    assert "corpus: fr -> en (aligned)" in capsys.readouterr().err  # log lines: stderr when stdout is not a terminal
    # No corpus flag: the run's own corpus and split, from its config.json.
    cli.main(["evaluate", "--model", str(run), "--split", "test", "--limit", "3"])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("test ")]
    assert table[0].split()[:3] == ["test", "4", str(min(3, len(splits["test"])))]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["evaluate", "--model", str(run), "--split", "heldout"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "keras-transformer: error: only the embedded Bible corpus has a heldout split (whole books); "
        "use --split dev or test.")


@pytest.mark.end_to_end
def test_cli_a_bad_line_is_one_line_naming_file_and_line_and_skipping_it_warns_with_counts(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text(pathlib.Path(TSV).read_text(encoding="utf-8") + "une ligne sans traduction\n", encoding="utf-8")
    output = tmp_path / "run"
    stopped = _run("train", "--corpus", str(bad), "--output", str(output), *TINY_FLAGS)
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith(
        f"keras-transformer: error: {bad}:259: 1 column, expected source<TAB>target")
    assert not output.exists()  # nothing written: the same command with --skip-bad-lines starts afresh
    with pytest.warns(UserWarning) as caught:
        cli.main(["train", "--corpus", str(bad), "--output", str(output), "--skip-bad-lines", "--dev-fraction", "0.1",
                  *TINY_FLAGS])
    assert [str(w.message) for w in caught if "skipped" in str(w.message)] == [
        f"{bad}: skipped 1 bad line: 1 with the wrong number of columns (first: line 259)."]
    assert json.loads((output / "summary.json").read_text())["skipped_lines"] == {"columns": 1}


def test_ablate_flags_build_the_corpus_and_shared_data_reads_it(tmp_path, monkeypatch):
    from keras_transformer.training import ablation

    seen = {}
    monkeypatch.setattr(ablation, "run_ablation", lambda variants, **kwargs: seen.update(kwargs) or [])
    monkeypatch.setattr(ablation, "write_results", lambda rows, out: "table")
    args = cli.build_parser().parse_args(
        ["ablate", "--corpus", FRENCH, ENGLISH, "--dev-fraction", "0.1", "--vocabulary-size", "200",
         "--d-model", "16", "--num-heads", "2", "--out", str(tmp_path)])
    args.handler(args, open(os.devnull, "w"))
    settings = seen["settings"]
    assert settings.corpus == ParallelCorpus((FRENCH, ENGLISH), dev_fraction=0.1)
    data = ablation.SharedData(settings, str(tmp_path))
    assert data.dev_pairs == ParallelCorpus((FRENCH, ENGLISH), dev_fraction=0.1).read()["dev"]
    assert data.dev_pairs[0].id.startswith("bible_fr_en_small.fr.gz:")
    with pytest.raises(UserInputError, match="--dev must be in the format of --corpus"):
        bad = cli.build_parser().parse_args(["ablate", "--corpus", FRENCH, ENGLISH, "--dev", TSV])
        bad.handler(bad, open(os.devnull, "w"))
