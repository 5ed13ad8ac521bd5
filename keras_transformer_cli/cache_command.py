"""`keras-transformer cache`: what the program cache holds, and clearing it."""

CACHE_DESCRIPTION = (
    "Show what the translation program cache holds: each entry's run, its decoding programs and its weights "
    "(a run's float weights are read from its model.keras, not copied; a quantized model's are kept beside its "
    "programs), XLA's compiled code, and the total on disk. The cache is $KERAS_TRANSFORMER_CACHE_DIR, else "
    "$XDG_CACHE_HOME/keras-transformer, else ~/.cache/keras-transformer; KERAS_TRANSFORMER_CACHE_MB bounds its "
    "programs and XLA's code (default 1024).")


def add_arguments(parser):
    """The flags of `keras-transformer cache`.

    Example:

    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> parser.parse_args(["--clear"]).clear
    True
    """
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--clear", action="store_true", help="remove everything the cache holds")
    action.add_argument("--prune", action="store_true",
                        help="remove the entries of runs removed or retrained, then the least recently used "
                             "programs and XLA code over the limit")


def cache(args, out):
    """Prints the cache's contents (`cache_contents.describe_cache`); `--clear` or `--prune` first.

    Args:
        args: the parsed flags (`clear`, `prune`).
        out: where the lines go.

    Example:

    >>> import argparse, io, os, tempfile, unittest.mock
    >>> out = io.StringIO()
    >>> with unittest.mock.patch.dict(os.environ, {"KERAS_TRANSFORMER_CACHE_DIR": tempfile.mkdtemp()}):
    ...     cache(argparse.Namespace(clear=True, prune=False), out)
    >>> out.getvalue().splitlines()[0].startswith("cleared: ")
    True
    """
    from keras_transformer_runtime.cache_contents import describe_cache
    from keras_transformer_runtime.program_cache import ProgramCache

    store = ProgramCache()
    if args.clear or args.prune:
        before = store.size_bytes() if store.directory.is_dir() else 0
        store.clear() if args.clear else store.prune()
        after = store.size_bytes() if store.directory.is_dir() else 0
        print(f"{'cleared' if args.clear else 'pruned'}: {(before - after) / 2 ** 20:,.1f} MB freed", file=out)
    for line in describe_cache(store):
        print(line, file=out)
