"""`translate --input FILE`: a whole document translated into `--output` (or stdout), its structure kept.

Everything that can be refused is checked before the model loads: the
flags that only lines take, the file's kind, its bytes, a SubRip file's
cues. The translation is written as it goes, a chunk at a time, with a
progress bar on stderr (`tqdm`), so an interrupted run keeps what it wrote.
"""

import os
import sys

LINE_ONLY_FLAGS = (("n_best", "--n-best"), ("alignments", "--alignments"), ("attention_map", "--attention-map"),
                   ("attention_weights", "--attention-weights"), ("token_scores", "--token-scores"))


def translate_file(args, out, translator_of):
    """Translates `args.input` into `args.output` (or `out`); returns the exit status (0).

    Args:
        args: `translate`'s flags.
        out: where the document goes without `--output` (stdout).
        translator_of: callable, `args` -> the translator (`engines.translator`).

    Raises:
        UserInputError: a flag for lines, an unreadable or foreign file, or `--output` naming `--input`.

    Example:

    >>> translate_file(args, sys.stdout, engines.translator)  # doctest: +SKIP
    """
    from keras_transformer_runtime.documents.files import UNITS
    from keras_transformer_runtime.documents.files import document_units
    from keras_transformer_runtime.documents.files import file_kind
    from keras_transformer_runtime.documents.files import read_document
    from keras_transformer_runtime.documents.files import write_translated_document
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.target_language import with_target_language
    from keras_transformer_runtime.timings import phase

    given = [flag for name, flag in LINE_ONLY_FLAGS if getattr(args, name, None)]
    given += ["TEXT arguments"] if args.text else []
    given += ["--format jsonl"] if args.format == "jsonl" else []
    if given:
        raise UserInputError(f"--input translates a document into a document; {', '.join(given)} "
                             "belong to lines (pipe them to stdin instead)")
    if args.output and os.path.exists(args.output) and os.path.samefile(args.input, args.output):
        raise UserInputError(f"--output {args.output} is the --input file; write the translation elsewhere")
    kind = file_kind(args.input, args.input_format)
    text = read_document(args.input)
    units = document_units(text, kind, args.input)
    args.alignments = kind == "html"  # HTML's inline tags follow the words they cover through the alignments
    translator = translator_of(args)
    codes = getattr(getattr(translator, "tokenizer", None), "language_codes", None)
    split = None if args.split_sentences else False
    keep_patterns = getattr(translator, "keep_patterns", ())

    def with_language(texts):
        if codes and not hasattr(translator.tokenizer, "forced_first_id"):
            return with_target_language(texts, codes, args.target_language)
        return texts

    def translate(texts, keep=()):
        translator.keep_patterns = keep_patterns + tuple(keep)  # Markdown's inline syntax, kept as it is
        try:
            with phase("work"):
                return translator(with_language(texts), split_sentences=split, warn=False)
        finally:
            translator.keep_patterns = keep_patterns

    def aligned(texts):
        with phase("work"):
            translations = translator.n_best(with_language(texts), 1, alignments=True, warn=False,
                                             split_sentences=split)
        return [(translation.hypotheses[0].text, translation.hypotheses[0].alignment) for translation in translations]

    what = UNITS[kind]
    target = open(args.output, "w", encoding="utf-8", newline="") if args.output else out
    try:
        with _progress(units, what) as bar:
            done = write_translated_document(text, kind, translate, target, bar.update, args.input, aligned)
    finally:
        if args.output:
            target.close()
    print(f"keras-transformer: translated {done} {what} of {args.input}"
          + (f" into {args.output}" if args.output else ""), file=sys.stderr)
    return 0


def _progress(total, unit):
    """A progress bar on stderr (shown on a terminal only) counting `total` `unit`."""
    from tqdm import tqdm

    return tqdm(total=total, unit=f" {unit}", file=sys.stderr, disable=None, leave=False)
