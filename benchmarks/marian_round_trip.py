"""A trained run in transformers: `export --format marian`, then MarianMTModel against this package.

    keras-transformer train --output runs/es-en      # the README's first command
    python -m benchmarks.marian_round_trip --model runs/es-en --out benchmarks/results/cpu-marian-round-trip

Exports the run as a Hugging Face Marian folder, loads it with
`MarianMTModel` and `MarianTokenizer`, and compares on the test split:
the token ids, the logits of a padded batch, and greedy translations
(no n-gram guard on either side), once with the source ids this package
gives (`add_special_tokens=False`) and once with `MarianTokenizer`'s
default, which appends `</s>` to each source. Writes `results.json` and
`results.md` in `--out`.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.machine import cpu_name


def _greedy(model, tokenizer, texts, max_new_tokens, add_special_tokens, batch_size=32):
    import torch

    outputs = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], add_special_tokens=add_special_tokens,
                          return_tensors="pt", padding=True)
        with torch.no_grad():
            generated = model.generate(**batch, num_beams=1, max_length=max_new_tokens + 2, no_repeat_ngram_size=0)
        outputs += tokenizer.batch_decode(generated, skip_special_tokens=True)
    return outputs


def measure(run, work, limit=None):
    import sacrebleu
    import torch
    from transformers import MarianMTModel
    from transformers import MarianTokenizer

    import keras

    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.translation.translator import Translator

    exported = work / "marian"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "keras_transformer_cli", "export", "--model", str(run), "--out",
                    str(exported), "--format", "marian"], check=True, capture_output=True, timeout=1800)
    export_seconds = time.perf_counter() - start
    pairs = ParallelCorpus().read().require("test")[:limit]
    sources = [pair.source for pair in pairs]
    references = [list(pair.references) for pair in pairs]
    translator = Translator.from_directory(str(run), beam_width=1, no_repeat_ngram_size=0)
    model = MarianMTModel.from_pretrained(str(exported), local_files_only=True).eval()
    tokenizer = MarianTokenizer.from_pretrained(str(exported), local_files_only=True)
    ours_ids = translator.tokenizer.tokenize(sources)
    their_ids = tokenizer(sources, add_special_tokens=False)["input_ids"]
    width = 24
    batch = [row[:width] + [0] * (width - len(row[:width])) for row in ours_ids[:16]]
    source = np.array(batch, "int64")
    target = np.concatenate([np.full((16, 1), 2), source[:, :8] % 50 + 4], axis=1)  # any target ids
    ours_logits = keras.ops.convert_to_numpy(translator.model({"encoder_tokens": source.astype("int32"),
                                                               "decoder_tokens": target.astype("int32")}))
    with torch.no_grad():
        their_logits = model(input_ids=torch.tensor(source), attention_mask=torch.tensor(source != 0),
                             decoder_input_ids=torch.tensor(target)).logits.numpy()
    ours = translator(sources)
    max_new_tokens = translator.max_new_tokens
    same_ids = _greedy(model, tokenizer, sources, max_new_tokens, add_special_tokens=False)
    with_end = _greedy(model, tokenizer, sources, max_new_tokens, add_special_tokens=True)

    def bleu(hypotheses):
        return round(sacrebleu.corpus_bleu(hypotheses, [list(r) for r in zip(*references)]).score, 2)

    return {
        "cpu": cpu_name(), "keras_backend": keras.backend.backend(), "sentences": len(sources),
        "export_seconds": round(export_seconds, 1),
        "token_ids_equal": sum(a == b for a, b in zip(ours_ids, their_ids)),
        "max_abs_logit_difference": float(np.abs(ours_logits - their_logits).max()),
        "largest_abs_logit": float(np.abs(their_logits).max()),
        "greedy_identical_same_ids": sum(a == b for a, b in zip(ours, same_ids)),
        "greedy_identical_with_appended_end": sum(a == b for a, b in zip(ours, with_end)),
        "bleu_ours": bleu(ours), "bleu_transformers_same_ids": bleu(same_ids),
        "bleu_transformers_with_appended_end": bleu(with_end),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a run folder (the README's runs/es-en)")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--limit", type=int, help="the first N test sentences (default: all)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        figures = measure(pathlib.Path(args.model), pathlib.Path(work), args.limit)
    (out / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    lines = ["# A trained run in transformers (export --format marian)", "",
             f"`python -m benchmarks.marian_round_trip --model {args.model} --out {args.out}` on {figures['cpu']}, "
             f"KERAS_BACKEND={figures['keras_backend']}; greedy, no n-gram guard.", "",
             "| what | figure |", "|---|---:|"]
    lines += [f"| {key.replace('_', ' ')} | {value} |" for key, value in figures.items()
              if key not in ("cpu", "keras_backend")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
