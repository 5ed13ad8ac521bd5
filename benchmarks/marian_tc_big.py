"""A tc-big Marian model whose target has a table of its own: imported and exported, against transformers.

Builds, offline, a random `MarianMTModel` of the Tatoeba-Challenge
"tc-big" shape (d_model 1,024, 6 + 6 layers, 16 heads, feed-forward 4,096,
swish) with two tables and two embedding matrices, as the newer
conversions have them (`separate_vocabs`, `target_vocab.json`,
`decoder_vocab_size`, `share_encoder_decoder_embeddings: false`): a source
table of 34,000 ids and a target table of 32,000, with random biases,
LayerNorms and final logits bias (`tests/marian_fixtures.py`), written by
`save_pretrained`. Then it times `keras-transformer import` on it as a
user runs it (a fresh process: wall time, peak resident memory), loads
the run, compares its logits with transformers' on a padded batch
(teacher forcing), and greedy-decodes the same sentences with both
(transformers' `generate`, and this package's cached loop), token by token.
Last, it exports the run back (`export --format marian` and `--format
ctranslate2`, fresh processes) and compares the Marian folder's ids,
logits and greedy tokens, and CTranslate2's greedy translations, with
the original's.

    KERAS_BACKEND=jax python -m benchmarks.marian_tc_big --out benchmarks/results/cpu-marian-tc-big

`--shape tiny` runs the same steps on a model of a few thousand
parameters (a smoke test). Writes `results.json` and `results.md` in `--out`.
"""

import argparse
import json
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.marian_import import cpu_name

SENTENCES = ["¿Dónde está el niño? Tiene 123 ovejas.", "Y dijo Dios: Sea la luz.", "a",
             "En el principio creó Dios los cielos y la tierra.", "Ωmega ½ ñandú",
             "Y vio Dios que la luz era buena.", "¿Quién eres?", "Los hijos de Israel salieron de Egipto."]
TARGETS = ["Where is the boy?", "And God said: Let there be light.", "x", "In the beginning God created.",
           "Omega", "God saw the light, that it was good.", "Who are you?", "The children of Israel went out."]
SHAPES = {
    "tc-big": dict(d_model=1024, encoder_layers=6, decoder_layers=6, heads=16, ffn_dim=4096,
                   max_position_embeddings=512, vocabulary_size=34000, target_vocabulary_size=32000),
    "tiny": dict(d_model=16, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=32, max_position_embeddings=64,
                 vocabulary_size=300, target_vocabulary_size=250),
}
MAX_NEW_TOKENS = 24


def _until_end(row, end):
    """A row of generated ids before its first `end` (all of it where none).

    transformers' `max_length` forces `end` at the limit, where this
    package's loop stops without it: the rows are compared without it.
    """
    row = list(row)
    return row[: row.index(end)] if end in row else row


def measure(work, shape):
    """Builds the model, imports it in a fresh process, compares logits and greedy tokens; returns the figures."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    import torch
    from marian_fixtures import load_reference
    from marian_fixtures import make_marian_folder

    start = time.perf_counter()
    folder = make_marian_folder(work / f"opus-mt-{shape}-shape", separate_vocabularies=True, **SHAPES[shape])
    built = time.perf_counter() - start
    run = work / "run"
    command = [sys.executable, "-m", "keras_transformer_cli", "import", folder, "--output", str(run)]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=1800)
    wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    import keras

    from keras_transformer.decoding import greedy_search
    from keras_transformer.translation.translator import Translator

    translator = Translator.from_directory(str(run), beam_width=1, no_repeat_ngram_size=0,
                                           max_new_tokens=MAX_NEW_TOKENS)
    tokenizer = translator.tokenizer
    reference, their_tokenizer = load_reference(folder)
    config = reference.config
    source_of, target_of = np.argsort(tokenizer.marian_ids), np.argsort(tokenizer.target_marian_ids)

    batch = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    # Padded by hand: MarianTokenizer pads targets with the source table's <pad>, outside the decoder's table.
    rows = their_tokenizer(text_target=TARGETS)["input_ids"]
    width = max(map(len, rows))
    targets = torch.tensor([row + [config.pad_token_id] * (width - len(row)) for row in rows])
    decoder_input = torch.cat([torch.full((len(SENTENCES), 1), config.decoder_start_token_id), targets[:, :-1]], 1)
    start = time.perf_counter()
    with torch.no_grad():
        theirs = reference(**batch, decoder_input_ids=decoder_input).logits.numpy()[:, :, tokenizer.target_marian_ids]
    their_forward = time.perf_counter() - start
    real = batch["attention_mask"].numpy().astype(bool)
    source = (source_of[batch["input_ids"].numpy()] * real).astype("int32")
    logits = keras.ops.convert_to_numpy(translator.model({
        "encoder_tokens": source, "decoder_tokens": target_of[decoder_input.numpy()].astype("int32")}))
    eos = targets.numpy() == config.eos_token_id
    target_real = (np.cumsum(eos, axis=1) - eos) == 0
    agree = logits.argmax(-1)[target_real] == theirs.argmax(-1)[target_real]

    start = time.perf_counter()
    with torch.no_grad():
        generated = reference.generate(**batch, num_beams=1, do_sample=False, max_length=MAX_NEW_TOKENS + 2)
    their_greedy = time.perf_counter() - start
    their_rows = [_until_end(row[1:], config.eos_token_id) for row in generated.numpy().tolist()]
    timings = []
    for _ in range(2):  # the first call compiles the loop
        start = time.perf_counter()
        ours = greedy_search(translator.decoder, source, MAX_NEW_TOKENS, no_repeat_ngram_size=0)
        timings.append(time.perf_counter() - start)
    end = int(target_of[config.eos_token_id])
    our_rows = [tokenizer.target_marian_ids[_until_end(row, end)].tolist() for row in np.asarray(ours).tolist()]
    # Cut at </s> first: transformers pads a finished row with the decoder's <pad>, which its
    # skip_special_tokens (the source table's ids) would keep as text.
    their_texts = their_tokenizer.batch_decode(their_rows, skip_special_tokens=True)
    texts_equal = translator(SENTENCES) == their_texts
    exports = measure_exports(work, run, (reference, their_tokenizer), theirs, target_real, their_rows, their_texts)
    return {
        "command": " ".join(["keras-transformer", *command[3:]]),
        "cpu": cpu_name(),
        "keras_backend": keras.backend.backend(),
        "shape": shape, **{key: value for key, value in SHAPES[shape].items()},
        "parameters": int(translator.model.count_params()),
        "reference_parameters": int(reference.num_parameters()),
        "build_reference_seconds": round(built, 1),
        "import_wall_seconds": round(wall, 1),
        "import_peak_resident_mb": round(peak_mb),
        "logit_positions_compared": int(target_real.sum()) * logits.shape[-1],
        "max_abs_logit_difference": float(np.abs(logits[target_real] - theirs[target_real]).max()),
        "largest_abs_logit": float(np.abs(theirs).max()),
        "argmax_agreement": f"{int(agree.sum())} / {agree.size}",
        "transformers_forward_seconds": round(their_forward, 2),
        "sentences": len(SENTENCES),
        "greedy_max_new_tokens": MAX_NEW_TOKENS,
        "greedy_tokens_compared": sum(map(len, their_rows)),
        "greedy_rows_identical": f"{sum(a == b for a, b in zip(our_rows, their_rows))} / {len(their_rows)}",
        "greedy_texts_identical": texts_equal,
        "transformers_greedy_seconds": round(their_greedy, 2),
        "our_greedy_seconds_first_call": round(timings[0], 3),
        "our_greedy_seconds_second_call": round(timings[1], 3),
        **exports,
    }


def _export(run, out, format):
    """Runs `keras-transformer export --format FORMAT` in a fresh process; returns its wall seconds."""
    command = [sys.executable, "-m", "keras_transformer_cli", "export", "--model", str(run), "--out", str(out),
               "--format", format]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=1800)
    return time.perf_counter() - start


def measure_exports(work, run, reference, theirs, target_real, their_rows, their_texts):
    """The run exported back to Marian and to CTranslate2: ids, logits and greedy tokens against the original.

    Args:
        work: a scratch folder.
        run: the imported run.
        reference: the original's `(MarianMTModel, MarianTokenizer)`.
        theirs: the original's logits on `SENTENCES` and `TARGETS`, columns in this package's target ids.
        target_real: which of their positions are real target tokens.
        their_rows, their_texts: the original's greedy Marian ids (without `</s>`) and texts.
    """
    import torch
    from marian_fixtures import load_reference

    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator
    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

    tokenizer = MarianTokenizer(run)
    their_model, their_tokenizer = reference
    marian_seconds = _export(run, work / "marian", "marian")
    model, exported_tokenizer = load_reference(str(work / "marian"))
    ids = exported_tokenizer(SENTENCES)["input_ids"]
    same_ids = sum(tokenizer.marian_ids[row].tolist() == theirs_ for row, theirs_ in
                   zip(ids, their_tokenizer(SENTENCES)["input_ids"]))
    targets = exported_tokenizer(text_target=TARGETS)["input_ids"]
    rows = [tokenizer.target_marian_ids[row].tolist() for row in targets]
    same_target_ids = sum(a == b for a, b in zip(rows, their_tokenizer(text_target=TARGETS)["input_ids"]))
    batch = exported_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    start, pad, width = model.config.decoder_start_token_id, model.config.pad_token_id, target_real.shape[1]
    decoder_input = torch.tensor([([start, *row] + [pad] * width)[:width] for row in targets])
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits.numpy()
        generated = model.generate(**batch, num_beams=1, do_sample=False, max_length=MAX_NEW_TOKENS + 2)
    exported_rows = [tokenizer.target_marian_ids[_until_end(row[1:], model.config.eos_token_id)].tolist()
                     for row in generated.numpy().tolist()]
    ctranslate2_seconds = _export(run, work / "ct2", "ctranslate2")
    ctranslate2 = CTranslate2Translator(str(work / "ct2"), beam_width=1, no_repeat_ngram_size=0,
                                        max_new_tokens=MAX_NEW_TOKENS)(SENTENCES)
    return {
        "export_marian_wall_seconds": round(marian_seconds, 1),
        "export_marian_source_rows_with_the_originals_ids": f"{same_ids} / {len(ids)}",
        "export_marian_target_rows_with_the_originals_ids": f"{same_target_ids} / {len(rows)}",
        "export_marian_max_abs_logit_difference": float(np.abs(logits[target_real] - theirs[target_real]).max()),
        "export_marian_greedy_rows_identical": f"{sum(a == b for a, b in zip(exported_rows, their_rows))} / "
                                               f"{len(their_rows)}",
        "export_ctranslate2_wall_seconds": round(ctranslate2_seconds, 1),
        "export_ctranslate2_greedy_texts_identical": f"{sum(a == b for a, b in zip(ctranslate2, their_texts))} / "
                                                     f"{len(their_texts)}",
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tc-big",
                        help="tc-big (default), or tiny for a smoke test")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        figures = measure(pathlib.Path(work), args.shape)
    figures["benchmark_wall_seconds"] = round(time.perf_counter() - start, 1)
    (out / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    shape = "" if args.shape == "tc-big" else f" --shape {args.shape}"
    lines = [f"# A {args.shape} Marian model whose target has a vocabulary of its own, against transformers", "",
             f"`KERAS_BACKEND={figures['keras_backend']} python -m benchmarks.marian_tc_big{shape} --out {args.out}` "
             f"on {figures['cpu']}.", "", "| what | figure |", "|---|---:|"]
    lines += [f"| {key.replace('_', ' ')} | {value} |" for key, value in figures.items()
              if key not in ("cpu", "command", "keras_backend")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
