"""A model of NLLB-200-distilled-600M's exact shape: import, memory, first and second `translate`, logits.

Builds, offline, a random `M2M100ForConditionalGeneration` of
NLLB-200-distilled-600M's shape (256,206 tokens, d_model 1024, 12 + 12
layers, 16 heads, feed-forward 4,096, ReLU; random biases and LayerNorms:
`tests/nllb_fixtures.py`, whose tokenizer is a small BPE with NLLB's 202
language codes), then, each in a fresh process as a user runs it:
transformers' `from_pretrained` and one sentence's `generate` (twice);
`keras-transformer import` (wall time and peak resident memory); and
`keras-transformer translate` of one sentence on the default (compiled)
engine, first call (which writes the program) and second, then on the
Keras engine. Last
it loads the run and compares its logits with transformers' on a padded batch.

    python -m benchmarks.nllb_import --out benchmarks/results/cpu-nllb-import
    python -m benchmarks.nllb_import --shape tiny --out /tmp/nllb-tiny   # a minute's check

Writes `results.json` and `results.md` in `--out`.
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

from benchmarks.import_wait import run_process
from benchmarks.marian_import import cpu_name

SENTENCE = "¿Dónde está el niño?"
SENTENCES = ["Y dijo Dios: Sea la luz.", SENTENCE, "La luz era buena."]
# NLLB-200-distilled-600M's shape, and a tiny one that checks this script in a minute.
SHAPES = {"nllb-600m": (dict(d_model=1024, layers=12, heads=16, ffn=4096), 256206),
          "tiny": (dict(d_model=32, layers=2, heads=4, ffn=64), 1000)}
MAX_NEW_TOKENS = 32

_TRANSFORMERS = """
import sys, time
start = time.perf_counter()
import torch
from transformers import AutoTokenizer, M2M100ForConditionalGeneration
model = M2M100ForConditionalGeneration.from_pretrained(sys.argv[1], local_files_only=True).eval()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True, src_lang="spa_Latn")
loaded = time.perf_counter() - start
times = []
for _ in range(2):
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(**tokenizer([sys.argv[2]], return_tensors="pt"), num_beams=1, do_sample=False,
                       max_new_tokens=int(sys.argv[3]), forced_bos_token_id=tokenizer.convert_tokens_to_ids("eng_Latn"))
    times.append(time.perf_counter() - start)
print(loaded, *times)
"""


def _timed(command):
    """`(seconds, its own peak resident MB)` of one command run to its end in a fresh process.

    The process's own high-water mark (`import_wait.run_process`): the
    children's `ru_maxrss` is the largest of every child so far (transformers'
    included) and holds the parent's size at `fork`.
    """
    wall, peak_mb, _, _ = run_process(command, env=dict(os.environ))
    return wall, peak_mb


def measure(work, shape="nllb-600m"):
    """Builds the model, times both toolkits in fresh processes, and compares the logits; returns the figures."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    from nllb_fixtures import make_nllb_tokenizer
    from nllb_fixtures import make_nllb_folder

    start = time.perf_counter()
    sizes, vocabulary = SHAPES[shape]
    extra_rows = vocabulary - len(make_nllb_tokenizer(work / "tokenizer-only"))
    folder = make_nllb_folder(work / f"{shape}-shape", extra_rows=extra_rows, init_std=0.02, **sizes)
    built = time.perf_counter() - start
    weights_mb = (folder / "model.safetensors").stat().st_size / 2**20

    _, their_peak, stdout, _ = run_process([sys.executable, "-c", _TRANSFORMERS, str(folder), SENTENCE,
                                            str(MAX_NEW_TOKENS)], env=dict(os.environ))
    their_load, their_first, their_second = map(float, stdout.split()[-3:])

    run = work / "run"
    import_command = [sys.executable, "-m", "keras_transformer_cli", "import", str(folder), "--output", str(run)]
    import_seconds, import_peak = _timed(import_command)
    translate_command = [sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(run),
                         "--beam", "1", "--max-new-tokens", str(MAX_NEW_TOKENS),
                         "--source-language", "spa_Latn", "--target-language", "eng_Latn", SENTENCE]
    os.environ["KERAS_TRANSFORMER_CACHE_DIR"] = str(work / "cache")  # a cold program cache: the first call writes
    first, _ = _timed(translate_command)
    second, _ = _timed(translate_command)
    keras_engine, _ = _timed([*translate_command[:-1], "--engine", "keras", SENTENCE])

    import keras
    import torch
    from nllb_fixtures import load_nllb_reference

    from keras_transformer.translation.translator import Translator

    translator = Translator.from_directory(str(run), source_language="spa_Latn", target_language="eng_Latn")
    tokenizer = translator.tokenizer
    reference, their_tokenizer = load_nllb_reference(folder)
    their_tokenizer.src_lang = "spa_Latn"
    batch = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    decoder_ids = torch.tensor([[2, their_tokenizer.convert_tokens_to_ids("eng_Latn"), 40, 41, 42]] * len(SENTENCES))
    with torch.no_grad():
        theirs = reference(**batch, decoder_input_ids=decoder_ids).logits.numpy()
    ours_of = np.argsort(tokenizer.model_ids)
    source = (ours_of[batch["input_ids"].numpy()] * batch["attention_mask"].numpy()).astype("int32")
    logits = keras.ops.convert_to_numpy(translator.model({"encoder_tokens": source,
                                                          "decoder_tokens": ours_of[decoder_ids.numpy()]}))
    return {
        "command": "keras-transformer import FOLDER --output RUN",
        "translate_command": " ".join(["keras-transformer", *translate_command[3:-1], repr(SENTENCE)]).replace(
            str(run), "RUN"),
        "cpu": cpu_name(),
        "keras_backend": keras.backend.backend(),
        "parameters": int(translator.model.count_params()),
        "reference_parameters": int(reference.num_parameters()),
        "weights_file_mb": round(weights_mb),
        "build_reference_seconds": round(built, 1),
        "transformers_from_pretrained_seconds": round(their_load, 2),
        "transformers_generate_first_seconds": round(their_first, 2),
        "transformers_generate_second_seconds": round(their_second, 2),
        "transformers_peak_resident_mb": round(their_peak),
        "import_wall_seconds": round(import_seconds, 1),
        "import_peak_resident_mb": round(import_peak),
        "translate_first_wall_seconds": round(first, 1),
        "translate_second_wall_seconds": round(second, 1),
        "translate_keras_engine_wall_seconds": round(keras_engine, 1),
        "max_abs_logit_difference": float(np.abs(logits[..., ours_of] - theirs).max()),
        "largest_abs_logit": float(np.abs(theirs).max()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="nllb-600m",
                        help="the model's shape (tiny: a minute's check of this script)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        figures = measure(pathlib.Path(work), args.shape)
    (out / "results.json").write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
    lines = ["# A model of NLLB-200-distilled-600M's shape, imported", "",
             f"`python -m benchmarks.nllb_import --shape {args.shape} --out {args.out}` on {figures['cpu']}, "
             f"KERAS_BACKEND={figures['keras_backend']}; one sentence, greedy, at most {MAX_NEW_TOKENS} new tokens, "
             f"`{figures['translate_command']}`.", "", "| what | figure |", "|---|---:|"]
    lines += [f"| {key.replace('_', ' ')} | {value} |" for key, value in figures.items()
              if key not in ("cpu", "command", "translate_command", "keras_backend")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
