"""The search flags of `translate` and `evaluate`, each left out taken from the run (`search_defaults`)."""

# The flags `resolve_search` takes, by their `args` names (its arguments, but `no_repeat_ngram`).
SEARCH_FLAGS = ("beam", "beam_search", "length_penalty", "early_stopping", "max_new_tokens", "no_repeat_ngram")


def apply_search_defaults(args):
    """Sets every search flag left out (None) to the run's default, and `args.search`; once per `args`.

    Args:
        args: the parsed flags of `translate` or `evaluate` (`args.model`, the run folder).

    Returns:
        The `search_defaults.SearchSettings`.

    Raises:
        UserInputError: a `--max-new-tokens` the model cannot take.

    Example:

    >>> import argparse
    >>> args = argparse.Namespace(model="no such run", beam=None, beam_search="pooled", length_penalty=None,
    ...                           early_stopping=None, max_new_tokens=None, no_repeat_ngram=None)
    >>> apply_search_defaults(args).flags, args.beam, args.length_penalty
    (('--beam-search',), 4, 1.0)
    """
    from keras_transformer_runtime.search_defaults import resolve_search

    if getattr(args, "search", None) is not None:
        return args.search
    search = resolve_search(args.model, **{name: getattr(args, name, None) for name in SEARCH_FLAGS})
    for name in SEARCH_FLAGS:
        setattr(args, name, getattr(search, name))
    args.search = search
    return search
