"""A digest of the decoding loop's compiled program, to show that a change left it as it was.

    KERAS_BACKEND=jax python -m benchmarks.loop_program_digest --model runs/es-en

Lowers `sampler.search_tensors` for the run's model (greedy, and beam 4
with its length penalty; the loop guard of `translate`) to StableHLO with
`jax.jit(...).lower`, drops the source locations (which name files and
lines), and prints each program's length and SHA-256. Run it from two
checkouts (e.g. a worktree of the commit before a change): the same digest
means XLA compiles the same program, whatever the Python around it
became, so the change cannot have made that loop slower.
"""

import argparse
import functools
import hashlib
import re


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--batch", type=int, default=8, help="rows of the traced batch (default: %(default)s)")
    parser.add_argument("--source-length", type=int, default=32, help="(default: %(default)s)")
    parser.add_argument("--save", help="write each program to SAVE<choice>.mlir, to diff them")
    args = parser.parse_args(argv)

    import jax
    import keras
    import numpy as np

    from keras_transformer.decoding import BeamChoice
    from keras_transformer.decoding import GreedyChoice
    from keras_transformer.decoding.sampler import search_tensors
    from keras_transformer.decoding.sampler import with_variable_values
    from keras_transformer.translation.translator import DEFAULT_BEAM_WIDTH
    from keras_transformer.translation.translator import Translator

    if keras.backend.backend() != "jax":
        parser.error("lowers with jax.jit: run it with KERAS_BACKEND=jax.")
    translator = Translator.from_directory(args.model)
    decoder = translator.decoder
    source = np.zeros((args.batch, args.source_length), "int32")
    source[:, :5] = 7
    values = [variable.value for variable in decoder.model.variables]
    for choice in (GreedyChoice(), BeamChoice(width=DEFAULT_BEAM_WIDTH, length_penalty=translator.length_penalty)):
        loop = functools.partial(search_tensors, decoder, choice=choice, max_new_tokens=translator.max_new_tokens,
                                 no_repeat_ngram_size=translator.no_repeat_ngram_size)
        text = jax.jit(with_variable_values(loop, decoder.model.variables)).lower(values, source).as_text()
        text = re.sub(r"#loc\d*[^\n]*|loc\([^)]*\)", "", text)
        name = type(choice).__name__
        print(f"{name}: {len(text)} characters, sha256 {hashlib.sha256(text.encode()).hexdigest()}")
        if args.save:
            with open(f"{args.save}{name}.mlir", "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
