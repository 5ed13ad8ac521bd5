"""Importing a model of opus-mt-es-en's exact shape: the wait, the memory, and the logits against transformers.

Builds, offline, a random `MarianMTModel` of OPUS-MT's base shape (65,001
tokens, d_model 512, 6 + 6 layers, 8 heads, feed-forward 2,048, swish;
random biases, LayerNorms and final logits bias: `tests/marian_fixtures.py`),
then times `keras-transformer import` on it as a user runs it (a fresh
process, wall time and its peak resident memory), loads the run and
compares its logits with transformers' on a padded batch.

    python -m benchmarks.marian_import --out benchmarks/results/cpu-marian-import

Writes `results.json` and `results.md` in `--out`.
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

SENTENCES = ["¿Dónde está el niño? Tiene 123 ovejas.", "Y dijo Dios: Sea la luz.", "a",
             "En el principio creó Dios los cielos y la tierra."]


def cpu_name():
    """The CPU's model name and whether it has AVX-512, as /proc/cpuinfo says."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    return f"{name} ({'AVX-512' if 'avx512f' in text else 'no AVX-512'}, {os.cpu_count()} cores)"


def measure(work):
    """Builds the model, imports it in a fresh process and compares the logits; returns the figures."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    import torch
    from marian_fixtures import make_marian_folder
    from transformers import MarianMTModel
    from transformers import MarianTokenizer

    start = time.perf_counter()
    folder = make_marian_folder(work / "opus-mt-shape", d_model=512, encoder_layers=6, decoder_layers=6, heads=8,
                                ffn_dim=2048, max_position_embeddings=512, vocabulary_size=65001)
    built = time.perf_counter() - start
    run = work / "run"
    command = [sys.executable, "-m", "keras_transformer_cli", "import", folder, "--output", str(run)]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=1800)
    wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    import keras

    from keras_transformer.translation.translator import Translator

    translator = Translator.from_directory(str(run))
    tokenizer = translator.tokenizer
    reference = MarianMTModel.from_pretrained(folder, local_files_only=True).eval()
    their_tokenizer = MarianTokenizer.from_pretrained(folder, local_files_only=True)
    batch = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    targets = their_tokenizer(text_target=["God said.", "Let there be light.", "x", "In the beginning"],
                              return_tensors="pt", padding=True)["input_ids"]
    decoder_input = torch.cat([torch.full((len(SENTENCES), 1), reference.config.pad_token_id), targets[:, :-1]], 1)
    with torch.no_grad():
        theirs = reference(**batch, decoder_input_ids=decoder_input).logits.numpy()[:, :, tokenizer.marian_ids]
    ours_of = np.argsort(tokenizer.marian_ids)
    real = batch["attention_mask"].numpy().astype(bool)
    logits = keras.ops.convert_to_numpy(translator.model({
        "encoder_tokens": (ours_of[batch["input_ids"].numpy()] * real).astype("int32"),
        "decoder_tokens": ours_of[decoder_input.numpy()].astype("int32")}))
    eos = targets.numpy() == reference.config.eos_token_id
    target_real = (np.cumsum(eos, axis=1) - eos) == 0
    return {
        "command": " ".join(["keras-transformer", *command[3:]]),
        "cpu": cpu_name(),
        "keras_backend": keras.backend.backend(),
        "parameters": int(translator.model.count_params()),
        "reference_parameters": int(reference.num_parameters()),
        "build_reference_seconds": round(built, 1),
        "import_wall_seconds": round(wall, 1),
        "import_peak_resident_mb": round(peak_mb),
        "max_abs_logit_difference": float(np.abs(logits[target_real] - theirs[target_real]).max()),
        "largest_abs_logit": float(np.abs(theirs).max()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        figures = measure(pathlib.Path(work))
    (out / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    lines = ["# Importing a model of opus-mt-es-en's shape", "",
             f"`python -m benchmarks.marian_import --out {args.out}` on {figures['cpu']}, "
             f"KERAS_BACKEND={figures['keras_backend']}.", "", "| what | figure |", "|---|---:|"]
    lines += [f"| {key.replace('_', ' ')} | {value} |" for key, value in figures.items()
              if key not in ("cpu", "command", "keras_backend")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
