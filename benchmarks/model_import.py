"""A Hugging Face translator of a real model's shape, imported: the wait, the memory, logits and translations.

Builds, offline, a random model of `--shape` with transformers (random biases and LayerNorms:
`tests/marian_fixtures.py`, `tests/nllb_fixtures.py`): `opus-mt`, opus-mt-es-en's `MarianMTModel` (65,001
tokens shared by both sides, d_model 512, 6 + 6 layers, 8 heads, feed-forward 2,048, swish); `tc-big`, a
Tatoeba-Challenge `MarianMTModel` whose target has a table of its own (34,000 + 32,000 ids, d_model 1,024,
6 + 6 layers, 16 heads, feed-forward 4,096); `nllb-600m`, NLLB-200-distilled-600M's
`M2M100ForConditionalGeneration` (256,206 tokens, d_model 1,024, 12 + 12 layers, 16 heads, feed-forward
4,096, ReLU; a small BPE tokenizer with NLLB's 202 language codes; 1,024 positions as NLLB's); `nllb-1.3b`,
NLLB-200-1.3B's (24 + 24 layers, feed-forward 8,192, otherwise as `nllb-600m`); `tiny-marian` (tables of their own) and
`tiny-nllb`, the same steps on a few thousand parameters (a smoke test).

Then, each in a fresh process as a user runs it (wall time and its own peak resident memory,
`import_wait.run_process`): transformers' `from_pretrained` and one sentence's greedy `generate`, twice;
`keras-transformer import`; `keras-transformer translate` of one sentence on a cold program cache (the call
that writes the program), again, and on the Keras engine. It loads the run and, on a padded batch of 8
sentences, compares its teacher-forced logits with transformers' (largest difference, arg-max agreement) and
greedy-decodes with both (`generate`, this package's cached loop), token by token and as text. A Marian
shape's run is last exported (`export --format marian` and `ctranslate2`, fresh processes): the Marian
folder's ids, logits and greedy tokens, and CTranslate2's greedy translations, against the original's.

    python -m benchmarks.model_import --shape opus-mt --out benchmarks/results/cpu-marian-import
    python -m benchmarks.model_import --shape tiny-nllb --out /tmp/tiny-nllb   # a smoke test

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
from benchmarks.machine import cpu_name

SENTENCE = "¿Dónde está el niño?"
SENTENCES = ["¿Dónde está el niño? Tiene 123 ovejas.", "Y dijo Dios: Sea la luz.", "a",
             "En el principio creó Dios los cielos y la tierra.", "Ωmega ½ ñandú",
             "Y vio Dios que la luz era buena.", "¿Quién eres?", "Los hijos de Israel salieron de Egipto."]
TARGETS = ["Where is the boy?", "And God said: Let there be light.", "x", "In the beginning God created.",
           "Omega", "God saw the light, that it was good.", "Who are you?", "The children of Israel went out."]
SHAPES = {
    "opus-mt": ("marian", dict(d_model=512, encoder_layers=6, decoder_layers=6, heads=8, ffn_dim=2048,
                               max_position_embeddings=512, vocabulary_size=65001)),
    "tc-big": ("marian", dict(d_model=1024, encoder_layers=6, decoder_layers=6, heads=16, ffn_dim=4096,
                              max_position_embeddings=512, vocabulary_size=34000, target_vocabulary_size=32000,
                              separate_vocabularies=True)),
    "tiny-marian": ("marian", dict(d_model=16, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=32,
                                   max_position_embeddings=64, vocabulary_size=300, target_vocabulary_size=250,
                                   separate_vocabularies=True)),
    "nllb-600m": ("nllb", dict(d_model=1024, layers=12, heads=16, ffn=4096, vocabulary_size=256206,
                               max_positions=1024)),
    "nllb-1.3b": ("nllb", dict(d_model=1024, layers=24, heads=16, ffn=8192, vocabulary_size=256206,
                               max_positions=1024)),
    "tiny-nllb": ("nllb", dict(d_model=32, layers=2, heads=4, ffn=64, vocabulary_size=1000, max_positions=256)),
}
MAX_NEW_TOKENS = {"marian": 24, "nllb": 32}
LANGUAGES = {"marian": {}, "nllb": {"source_language": "spa_Latn", "target_language": "eng_Latn"}}

_TRANSFORMERS = """
import sys, time
start = time.perf_counter()
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder, sentence, limit, languages = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
model = AutoModelForSeq2SeqLM.from_pretrained(folder, local_files_only=True).eval()
source = {"src_lang": languages[0]} if languages else {}
tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **source)
forced = {"forced_bos_token_id": tokenizer.convert_tokens_to_ids(languages[1])} if languages else {}
loaded = time.perf_counter() - start
times = []
for _ in range(2):
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(**tokenizer([sentence], return_tensors="pt"), num_beams=1, do_sample=False,
                       max_new_tokens=limit, **forced)
    times.append(time.perf_counter() - start)
print(loaded, *times)
"""


def _cli(*arguments):
    return [sys.executable, "-m", "keras_transformer_cli", *map(str, arguments)]


def _until_end(row, end):
    """A row of generated ids before its first `end` (all of it where none): Marian's `forced_eos_token_id`
    writes `end` at transformers' limit, where this package's loop stops without it."""
    row = list(row)
    return row[: row.index(end)] if end in row else row


def _identical(ours, theirs):
    """`"k / n"`: how many of the `n` rows of `theirs` equal `ours`'."""
    return f"{sum(a == b for a, b in zip(ours, theirs))} / {len(theirs)}"


def compare_logits(ours, theirs, real):
    """`(largest absolute difference, "k / n" positions whose arg-max agrees)` of two logit arrays where `real`."""
    agree = ours.argmax(-1)[real] == theirs.argmax(-1)[real]
    return float(np.abs(ours[real] - theirs[real]).max()), f"{int(agree.sum())} / {agree.size}"


def build(work, shape):
    """Writes the random model of `shape` as transformers saves it; returns `(family, folder, reference loader)`."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    family, sizes = SHAPES[shape]
    if family == "marian":
        from marian_fixtures import load_reference
        from marian_fixtures import make_marian_folder

        return family, pathlib.Path(make_marian_folder(work / f"{shape}-shape", **sizes)), load_reference
    from nllb_fixtures import load_nllb_reference
    from nllb_fixtures import make_nllb_folder
    from nllb_fixtures import make_nllb_tokenizer

    sizes = dict(sizes)
    extra_rows = sizes.pop("vocabulary_size") - len(make_nllb_tokenizer(work / "tokenizer-only"))
    folder = make_nllb_folder(work / f"{shape}-shape", extra_rows=extra_rows, init_std=0.02, **sizes)
    return family, pathlib.Path(folder), load_nllb_reference


def time_processes(work, family, folder, run):
    """transformers' load and `generate`, then `import` and `translate`, each timed in a fresh process."""
    limit = MAX_NEW_TOKENS[family]
    env = dict(os.environ, KERAS_TRANSFORMER_CACHE_DIR=str(work / "cache"))  # cold: the first translate writes it
    languages = list(LANGUAGES[family].values())
    flags = [arg for key, value in LANGUAGES[family].items() for arg in (f"--{key.replace('_', '-')}", value)]
    _, their_peak, stdout, _ = run_process([sys.executable, "-c", _TRANSFORMERS, folder, SENTENCE, limit,
                                            *languages], env)
    their_load, their_first, their_second = map(float, stdout.split()[-3:])
    import_seconds, import_peak, _, _ = run_process(_cli("import", folder, "--output", run), env)
    translate = _cli("translate", "--model", run, "--beam", 1, "--max-new-tokens", limit, *flags)
    first, second = (run_process([*translate, SENTENCE], env)[0] for _ in range(2))
    keras_engine = run_process([*translate, "--engine", "keras", SENTENCE], env)[0]
    return {
        "translate_command": " ".join(["keras-transformer", *translate[3:], repr(SENTENCE)]).replace(str(run), "RUN"),
        "transformers_from_pretrained_seconds": round(their_load, 2),
        "transformers_generate_first_seconds": round(their_first, 2),
        "transformers_generate_second_seconds": round(their_second, 2),
        "transformers_peak_resident_mb": round(their_peak),
        "import_wall_seconds": round(import_seconds, 1),
        "import_peak_resident_mb": round(import_peak),
        "translate_first_wall_seconds": round(first, 1),
        "translate_second_wall_seconds": round(second, 1),
        "translate_keras_engine_wall_seconds": round(keras_engine, 1),
    }


def measure(work, shape):
    """Builds the model, times both toolkits in fresh processes, compares logits and greedy tokens; the figures."""
    start = time.perf_counter()
    family, folder, load_reference = build(work, shape)
    figures = {"command": "keras-transformer import FOLDER --output RUN", "cpu": cpu_name(), "shape": shape,
               **SHAPES[shape][1], "weights_file_mb": round((folder / "model.safetensors").stat().st_size / 2**20),
               "build_reference_seconds": round(time.perf_counter() - start, 1)}
    run = work / "run"
    figures.update(time_processes(work, family, folder, run))

    import keras
    import torch

    from keras_transformer.decoding import greedy_search
    from keras_transformer.translation.translator import Translator

    limit = MAX_NEW_TOKENS[family]
    # No output cap (transformers has none) and each text whole (below): the search compared with generate's alone.
    translator = Translator.from_directory(str(run), beam_width=1, no_repeat_ngram_size=0, max_new_tokens=limit,
                                           max_output_ratio=0.0, **LANGUAGES[family])
    tokenizer = translator.tokenizer
    source_ids, target_ids = ((tokenizer.marian_ids, tokenizer.target_marian_ids) if family == "marian"
                              else (tokenizer.model_ids, tokenizer.model_ids))  # this package's id -> theirs
    source_of, target_of = np.argsort(source_ids), np.argsort(target_ids)
    reference, their_tokenizer = load_reference(str(folder))
    config = reference.config
    batch = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    # Padded by hand: MarianTokenizer pads targets with the source table's <pad>, outside a decoder's own table.
    rows = their_tokenizer(text_target=TARGETS)["input_ids"]
    width = max(map(len, rows))
    targets = torch.tensor([row + [config.pad_token_id] * (width - len(row)) for row in rows])
    decoder_input = torch.cat([torch.full((len(SENTENCES), 1), config.decoder_start_token_id), targets[:, :-1]], 1)
    start = time.perf_counter()
    with torch.no_grad():
        theirs = reference(**batch, decoder_input_ids=decoder_input).logits.numpy()[:, :, target_ids]
    their_forward = time.perf_counter() - start
    source = (source_of[batch["input_ids"].numpy()] * batch["attention_mask"].numpy()).astype("int32")
    logits = keras.ops.convert_to_numpy(translator.model({
        "encoder_tokens": source, "decoder_tokens": target_of[decoder_input.numpy()].astype("int32")}))
    eos = targets.numpy() == config.eos_token_id
    target_real = (np.cumsum(eos, axis=1) - eos) == 0
    difference, agreement = compare_logits(logits, theirs, target_real)

    forced = {"forced_bos_token_id": int(target_ids[translator.forced_first_id])} if family == "nllb" else {}
    start = time.perf_counter()
    with torch.no_grad():  # Marian's forced </s> takes a position of its own at the limit: one more
        generated = reference.generate(**batch, num_beams=1, do_sample=False,
                                       max_new_tokens=limit + (family == "marian"), **forced)
    their_greedy = time.perf_counter() - start
    their_rows = [_until_end(row[1:], config.eos_token_id) for row in generated.numpy().tolist()]
    timings = []
    for _ in range(2):  # the first call compiles the loop
        start = time.perf_counter()
        ours = greedy_search(translator.decoder, source, limit, no_repeat_ngram_size=0,
                             forced_first_id=translator.forced_first_id)
        timings.append(time.perf_counter() - start)
    end = int(target_of[config.eos_token_id])
    our_rows = [target_ids[_until_end(row, end)].tolist() for row in np.asarray(ours).tolist()]
    # Cut at </s> first: transformers pads a finished row with the decoder's <pad>, which Marian's
    # skip_special_tokens (the source table's ids) would keep as text.
    their_texts = their_tokenizer.batch_decode(their_rows, skip_special_tokens=True)
    figures.update({
        "keras_backend": keras.backend.backend(),
        "parameters": int(translator.model.count_params()),
        "reference_parameters": int(reference.num_parameters()),
        "logit_positions_compared": int(target_real.sum()) * logits.shape[-1],
        "max_abs_logit_difference": difference,
        "largest_abs_logit": float(np.abs(theirs).max()),
        "argmax_agreement": agreement,
        "transformers_forward_seconds": round(their_forward, 2),
        "sentences": len(SENTENCES),
        "greedy_max_new_tokens": limit,
        "greedy_tokens_compared": sum(map(len, their_rows)),
        "greedy_rows_identical": _identical(our_rows, their_rows),
        "greedy_texts_identical": _identical(translator(SENTENCES, split_sentences=False), their_texts),
        "transformers_greedy_seconds": round(their_greedy, 2),
        "our_greedy_seconds_first_call": round(timings[0], 3),
        "our_greedy_seconds_second_call": round(timings[1], 3),
    })
    if family == "marian":
        figures.update(measure_exports(work, run, their_tokenizer, theirs, target_real, their_rows, their_texts))
    return figures


def measure_exports(work, run, their_tokenizer, theirs, target_real, their_rows, their_texts):
    """The run exported back to Marian and to CTranslate2: ids, logits and greedy tokens against the original.

    `theirs` is the original's logits on `SENTENCES` and `TARGETS` (columns in this package's target ids, real
    target tokens where `target_real`); `their_rows` and `their_texts` its greedy Marian ids (without `</s>`) and texts.
    """
    import torch
    from marian_fixtures import load_reference

    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator
    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

    tokenizer, limit = MarianTokenizer(run), MAX_NEW_TOKENS["marian"]
    marian_seconds = run_process(_cli("export", "--model", run, "--out", work / "marian", "--format", "marian"))[0]
    model, exported_tokenizer = load_reference(str(work / "marian"))
    ids = [tokenizer.marian_ids[row].tolist() for row in exported_tokenizer(SENTENCES)["input_ids"]]
    targets = exported_tokenizer(text_target=TARGETS)["input_ids"]
    rows = [tokenizer.target_marian_ids[row].tolist() for row in targets]
    batch = exported_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    start, pad, width = model.config.decoder_start_token_id, model.config.pad_token_id, target_real.shape[1]
    decoder_input = torch.tensor([([start, *row] + [pad] * width)[:width] for row in targets])
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input).logits.numpy()
        generated = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit + 1)
    exported_rows = [tokenizer.target_marian_ids[_until_end(row[1:], model.config.eos_token_id)].tolist()
                     for row in generated.numpy().tolist()]
    ctranslate2_seconds = run_process(_cli("export", "--model", run, "--out", work / "ct2", "--format",
                                           "ctranslate2"))[0]
    ctranslate2 = CTranslate2Translator(str(work / "ct2"), beam_width=1, no_repeat_ngram_size=0,
                                        max_new_tokens=limit)(SENTENCES, split_sentences=False)
    return {
        "export_marian_wall_seconds": round(marian_seconds, 1),
        "export_marian_source_rows_with_the_originals_ids": _identical(ids, their_tokenizer(SENTENCES)["input_ids"]),
        "export_marian_target_rows_with_the_originals_ids": _identical(
            rows, their_tokenizer(text_target=TARGETS)["input_ids"]),
        "export_marian_max_abs_logit_difference": compare_logits(logits, theirs, target_real)[0],
        "export_marian_greedy_rows_identical": _identical(exported_rows, their_rows),
        "export_ctranslate2_wall_seconds": round(ctranslate2_seconds, 1),
        "export_ctranslate2_greedy_texts_identical": _identical(ctranslate2, their_texts),
    }


def main(argv=None):
    """Measures one shape (`--shape`) and writes `results.json` and `results.md` in `--out`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(SHAPES), required=True,
                        help="opus-mt (opus-mt-es-en's), tc-big (Tatoeba-Challenge, a target table of its own), "
                             "nllb-600m (NLLB-200-distilled-600M's), nllb-1.3b (NLLB-200-1.3B's); tiny-marian and "
                             "tiny-nllb: a smoke test of "
                             "the same steps on a model of a few thousand parameters")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        figures = measure(pathlib.Path(work), args.shape)
    figures["benchmark_wall_seconds"] = round(time.perf_counter() - start, 1)
    (out / "results.json").write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
    lines = [f"# A model of {args.shape}'s shape, imported, against transformers", "",
             f"`KERAS_BACKEND={figures['keras_backend']} python -m benchmarks.model_import --shape {args.shape} "
             f"--out {args.out}` on {figures['cpu']}; greedy, at most {figures['greedy_max_new_tokens']} new tokens; "
             f"`{figures['translate_command']}`.", "", "| what | figure |", "|---|---:|"]
    lines += [f"| {key.replace('_', ' ')} | {value} |" for key, value in figures.items()
              if key not in ("cpu", "command", "translate_command", "keras_backend")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
