"""The embedded Bible corpus written out as TSV files, one per split, with one English reference.

The corpus holds two English translations of every verse: the modern World
English Bible (WEB, what `keras-transformer train` learns by default) and
the King James Version (KJV, 1611 English: "thee", "hath", "unto"). Written
out with the KJV as the only target, it is a real shift of style for
fine-tuning, with the corpus' own splits kept:

    python -m keras_transformer.data.bible_tsv --reference kjv --out data/es-kjv
    keras-transformer train --from runs/es-en --corpus data/es-kjv/train.tsv \\
        --dev data/es-kjv/dev.tsv --test data/es-kjv/test.tsv --output runs/es-kjv

Each line is `Spanish<TAB>English`, no header, the format `--corpus` reads.
"""

import argparse
import os

from keras_transformer.data import corpus as bible

REFERENCES = ("web", "kjv")


def write_bible_tsv(folder, reference="kjv", path=None):
    """Writes `train.tsv`, `dev.tsv`, `test.tsv` and `heldout.tsv` of the Bible corpus.

    Args:
        folder: where the files go (created if missing).
        reference: `"kjv"` or `"web"`, the English side written.
        path: the corpus file; None for the one embedded in the package.

    Returns:
        dict `{split: pairs written}`. Verses without that reference are
        left out.

    Example:

    >>> import tempfile
    >>> counts = write_bible_tsv(tempfile.mkdtemp(), "kjv")
    >>> sorted(counts), counts["train"] > 25000
    (['dev', 'heldout', 'test', 'train'], True)
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}.")
    os.makedirs(folder, exist_ok=True)
    column = REFERENCES.index(reference)
    files = {split: open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") for split in bible.SPLITS}
    counts = dict.fromkeys(bible.SPLITS, 0)
    try:
        for pair in bible.load_bible_pairs("all", path=path):
            if len(pair.references) <= column:
                continue
            files[pair.split].write(f"{pair.source}\t{pair.references[column]}\n")
            counts[pair.split] += 1
    finally:
        for f in files.values():
            f.close()
    return counts


def main(argv=None):
    """`python -m keras_transformer.data.bible_tsv --reference kjv --out DIR`."""
    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.data.bible_tsv",
        description="Write the embedded Spanish -> English Bible corpus as TSV files, one per split "
                    "(train, dev, test, heldout), with one English reference.",
    )
    parser.add_argument("--reference", choices=REFERENCES, default="kjv",
                        help="kjv: King James Version (1611 English); web: World English Bible (default: kjv)")
    parser.add_argument("--out", required=True, help="folder for train.tsv, dev.tsv, test.tsv and heldout.tsv")
    args = parser.parse_args(argv)
    counts = write_bible_tsv(args.out, args.reference)
    print(", ".join(f"{split} {count}" for split, count in counts.items()) + f" pairs written to {args.out}")


if __name__ == "__main__":
    main()
