"""The commands a GPU session runs (benchmarks/README.md, "A session lent a GPU"),
in miniature on a CPU: a crash a CPU could have shown must not cost device minutes.

These cover the GPU check's training and decoding and the recipe ablation of
issue 14.
"""

import json
import os
import subprocess
import sys
import time

import keras
import pytest

from benchmarks import preset_ablation
from conftest import FIXTURE_CORPUS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINIATURE = (f"corpus={FIXTURE_CORPUS},num_layers=1,d_model=16,num_heads=2,ff_dim=32,max_length=128,"
             "vocabulary_size=400,batch_tokens=240,warmup_steps=2,dev_bleu_sentences=4")
# For the recipe tools, which score every variant on the test and held-out splits: an untrained
# model translates to max_length, and 24 tokens say as much as 128 there at a fifth of the decoding.
SHORT_MINIATURE = MINIATURE.replace("max_length=128", "max_length=24")

# As on the lent machines: no TensorFlow, the package's code from the checkout.
GPU_CHECK_WITHOUT_TENSORFLOW = """
import sys
sys.modules["tensorflow"] = None  # any `import tensorflow` now raises ImportError
from benchmarks import gpu_check
sys.exit(gpu_check.main(sys.argv[1:]))
"""


@pytest.mark.end_to_end
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the GPU plan's first call runs it on JAX")
def test_the_gpu_check_trains_decodes_and_reports_without_tensorflow(tmp_path):
    out = tmp_path / "jax"
    result = subprocess.run(
        [sys.executable, "-c", GPU_CHECK_WITHOUT_TENSORFLOW, "--lengths", "8", "--steps", "4",
         "--steps-per-epoch", "2", "--preset", "tiny", "--train-settings", MINIATURE,
         "--run-folder", str(tmp_path / "run"), "--out", str(out)],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    report = json.loads((out / "results.json").read_text())
    assert report["passed"] and report["backend"] == "jax"
    assert {row["length"] for row in report["attention"]["rows"]} == {8}
    assert [row["step"] for row in report["train"]["curve"]] == [2, 4]
    assert report["train"]["summary"]["completed_steps"] == 4
    assert report["decode"]["same_sequences"] == report["decode"]["sentences"] == 16
    assert "## decode: cached = uncached greedy tokens for 16/16" in (out / "results.md").read_text()


@pytest.mark.backend_independent
def test_the_gpu_check_refuses_settings_it_cannot_check(capsys):
    from benchmarks import gpu_check

    with pytest.raises(SystemExit):
        gpu_check.main(["--checks", "train", "--steps", "25"])
    assert "at least twice --steps-per-epoch" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="'batch_size' is not a TrainConfig field"):
        gpu_check.main(["--checks", "train", "--train-settings", "batch_size=64"])


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_a_recipe_ablation_scores_each_variant_prunes_it_and_skips_it_when_run_again(tmp_path, capsys):
    out = tmp_path / "recipe"
    base = ["--out", str(out), "--prune", "--base", f"preset=tiny,epochs=1,steps_per_epoch=2,{SHORT_MINIATURE}"]
    preset_ablation.main(base + ["--variant", "d01:dropout=0.1", "--variant", "d03:dropout=0.3"])

    rows = {row["variant"]: row for row in json.loads((out / "ablation.json").read_text())}
    assert list(rows) == ["d01", "d03"]
    assert rows["d03"]["settings"]["dropout"] == 0.3 and rows["d03"]["settings"]["d_model"] == 16
    for row in rows.values():
        assert row["steps"] == 2 and row["beam"] == 4  # scored as `evaluate` scores by default
        assert row["test"]["sentences"] > 0 and 0.0 <= row["test"]["bleu"] <= 100.0
        assert row["heldout"]["sentences"] > 0
    for name in rows:
        kept = set(os.listdir(out / name))
        assert {"summary.json", "log.csv", "config.json"} <= kept
        assert not kept & {"model.keras", "backup"}, kept
    table = (out / "ablation.md").read_text()
    assert "| d01 |" in table and "| d03 |" in table

    # The next call of a GPU session: the scored variants are neither trained
    # nor scored again (their models are gone), the new one joins the table.
    summary_written = os.path.getmtime(out / "d01" / "summary.json")
    capsys.readouterr()
    preset_ablation.main(base + ["--variant", "d01:dropout=0.1", "--variant", "w1:warmup_steps=1"])
    assert "d01: scored already" in capsys.readouterr().out
    assert os.path.getmtime(out / "d01" / "summary.json") == summary_written
    rows = {row["variant"]: row for row in json.loads((out / "ablation.json").read_text())}
    assert list(rows) == ["d01", "d03", "w1"] and rows["w1"]["settings"]["warmup_steps"] == 1

    with pytest.raises(SystemExit, match="scored it with other settings"):
        preset_ablation.main(base + ["--variant", "d01:dropout=0.2"])


@pytest.mark.backend_independent
def test_the_recipe_race_docstring_examples_run():
    import doctest

    from benchmarks import recipe_race

    result = doctest.testmod(recipe_race)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_a_recipe_race_scores_variants_side_by_side_and_reports_a_failed_one(tmp_path):
    from benchmarks import recipe_race

    out = tmp_path / "race"
    code = recipe_race.main([
        "--out", str(out), "--budget", "500",
        "--base", f"preset=tiny,epochs=1,steps_per_epoch=2,{SHORT_MINIATURE},dev_bleu_sentences=0",
        "--variant", "jax/fast:dropout=0.2",
        "--variant", "torch/too-large:vocabulary_size=100000",  # more pieces than the corpus has: refused
    ])
    assert code == 1  # not every variant scored
    race = json.loads((out / "race.json").read_text())
    entries = {entry["variant"]: entry for entry in race["variants"]}
    assert entries["fast"]["state"] == "scored" and entries["fast"]["backend"] == "jax"
    row = entries["fast"]["row"]
    assert row["settings"]["dropout"] == 0.2 and row["steps"] == 2 and row["test"]["sentences"] > 0
    assert entries["too-large"]["state"] == "failed" and entries["too-large"]["exit_code"] != 0
    assert "--vocabulary-size" in (out / "too-large.log").read_text()
    table = (out / "race.md").read_text()
    assert "| fast | jax | scored |" in table and "| too-large | torch | failed |" in table


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_a_recipe_race_stops_what_outlasts_its_budget_and_prunes_every_variant(tmp_path):
    from benchmarks import recipe_race
    from keras_transformer.training import run_folder

    assert recipe_race.HEAVY_FOLDERS == (run_folder.BACKUP_FOLDER, run_folder.CHECKPOINT_FOLDER)
    assert recipe_race.HEAVY_FILES == (run_folder.MODEL_FILE,)
    pids = tmp_path / "pids"

    def stuck(name, settings, base, out):
        # A variant that wrote a model and a backup and then hangs, with a child of its own.
        script = (f"import os, subprocess, sys, time; run = os.path.join({out!r}, {name!r}, {name!r}); "
                  "os.makedirs(os.path.join(run, 'backup')); open(os.path.join(run, 'model.keras'), 'w').close(); "
                  "open(os.path.join(run, 'log.csv'), 'w').close(); "
                  "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                  f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}} '); time.sleep(600)")
        return [sys.executable, "-c", script]

    started = time.perf_counter()
    summary = recipe_race.race([("jax", "a", ""), ("torch", "b", "")], "", str(tmp_path / "race"), budget=6,
                               poll=0.2, command=stuck)
    assert time.perf_counter() - started < 60
    assert [entry["state"] for entry in summary] == ["stopped by the budget"] * 2
    for name in "ab":
        run = tmp_path / "race" / name / name
        assert sorted(os.listdir(run)) == ["log.csv"]  # the backup and the model are gone, the logs stay
    for pid in map(int, pids.read_text().split()):  # the variants and their children are gone
        assert not _running(pid), pid


def _running(pid):
    """True while `pid` runs (a zombie whose parent died runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# The flags of `MINIATURE` as `train` takes them.
MINIATURE_TRAIN_FLAGS = (f"--corpus {FIXTURE_CORPUS} --num-layers 1 --d-model 16 --num-heads 2 --ff-dim 32 "
                         "--max-length 24 --vocabulary-size 400 --batch-tokens 240 --warmup-steps 2 "
                         "--dev-bleu-sentences 4 --epochs 2 --steps-per-epoch 3")


@pytest.mark.end_to_end
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the GPU session runs it on JAX")
def test_the_users_wait_times_each_command_and_counts_its_compilations(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_user_wait", "--out", str(out), "--run", str(tmp_path / "run"),
         "--train-flags", MINIATURE_TRAIN_FLAGS, "--steps", "train", "translate", "variant",
         "--variant", "again=--epochs 1", "--variant", f"fresh=KERAS_TRANSFORMER_CACHE_DIR={tmp_path / 'fresh'} --epochs 1"],
        cwd=ROOT, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")), capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    steps = json.loads((out / "results.json").read_text())["steps"]
    assert list(steps) == ["train", "translate-first", "translate-again", "variant-again", "variant-fresh"]
    assert steps["train"]["summary"]["trained_steps_this_run"] == 6
    assert steps["variant-again"]["summary"]["trained_steps_this_run"] == 3
    assert steps["train"]["compilations"]["by_function"]  # JAX_LOG_COMPILES reached the command
    # A second `train` of the same model loads its training step from the compilation cache; with an
    # empty cache (the variant's own KERAS_TRANSFORMER_CACHE_DIR) it compiles it again.
    def train_step_seconds(name):
        return steps[name]["compilations"]["by_function"]["jit(train_step)"][1]

    assert steps["variant-again"]["compilations"]["cache_hits"] >= 1
    assert train_step_seconds("variant-again") < train_step_seconds("train") / 2
    assert train_step_seconds("variant-fresh") > train_step_seconds("variant-again") * 2
    # The second process finds the program and its XLA code in the caches the first one wrote.
    assert steps["translate-again"]["compilations"]["cache_hits"] >= 1
    assert steps["translate-again"]["compilations"]["seconds"] < steps["translate-first"]["compilations"]["seconds"]
    assert (out / "train.log").read_text().splitlines()[1].split()[0].replace(".", "").isdigit()  # stamped
