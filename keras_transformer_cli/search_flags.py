"""The search flags of `translate` and `evaluate`, each left out taken from the run (`search_defaults`)."""

# The search flags by their `args` names (the flags': `--beam`, `--no-repeat-ngram`), each with the
# `DecodingSettings` field it sets: the one place where the command line's names meet the settings'.
SEARCH_FLAGS = {"beam": "beam_width", "beam_search": "beam_search", "length_penalty": "length_penalty",
                "early_stopping": "early_stopping", "max_new_tokens": "max_new_tokens",
                "no_repeat_ngram": "no_repeat_ngram_size"}


def search_arguments(args, **values):
    """The search flags of `args` as `DecodingSettings`' fields (`resolve_search`'s keyword arguments).

    Args:
        args: the parsed flags; a flag it lacks is None.
        **values: flags by their `args` names, in place of `args`' (`serve`'s
            one `--beam` and `--max-new-tokens` of several).

    Returns:
        A dict of `DecodingSettings`' names.

    Example:

    >>> import argparse
    >>> search_arguments(argparse.Namespace(beam=2, no_repeat_ngram=0), beam=1)["beam_width"]
    1
    """
    flags = {name: getattr(args, name, None) for name in SEARCH_FLAGS} | values
    return {SEARCH_FLAGS[name]: value for name, value in flags.items()}


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
    search = resolve_search(args.model, **search_arguments(args))
    for name, field in SEARCH_FLAGS.items():
        setattr(args, name, getattr(search.decoding, field))
    args.search = search
    return search


def decoding_settings(args, **changes):
    """The `DecodingSettings` of the search flags (`--beam` ... `--max-output-ratio`) holding the run's defaults.

    Args:
        args: the parsed flags (`apply_search_defaults` has run).
        **changes: other fields (`n_best`, `cross_attention`).

    Returns:
        A `DecodingSettings`.

    Example:

    >>> import argparse
    >>> decoding_settings(argparse.Namespace(beam=4, beam_search="pooled", length_penalty=1.0,
    ...                   early_stopping=False, max_new_tokens=62, no_repeat_ngram=0)).beam_search
    'pooled'
    """
    from keras_transformer_runtime.decoding_settings import DecodingSettings

    return DecodingSettings(**search_arguments(args), max_output_ratio=getattr(args, "max_output_ratio", None),
                            **changes)


def search_flag_arguments(settings):
    """The command-line flags that ask for a `DecodingSettings`' search, as a child `translate` takes them.

    Args:
        settings: a `DecodingSettings`.

    Returns:
        A list of strings: each search flag of `SEARCH_FLAGS` and
        `--max-output-ratio` with its value (one whose value is None left
        out: the run's default).

    Example:

    >>> from keras_transformer_runtime.decoding_settings import DecodingSettings
    >>> search_flag_arguments(DecodingSettings(beam_width=1, early_stopping=False))[:2]
    ['--beam', '1']
    """
    arguments = []
    for name, field in SEARCH_FLAGS.items():
        flag, value = "--" + name.replace("_", "-"), getattr(settings, field)
        if isinstance(value, bool):
            arguments.append(flag if value else f"--no-{flag[2:]}")
        elif value is not None:
            arguments += [flag, repr(value) if isinstance(value, float) else str(value)]
    ratio = settings.max_output_ratio
    return arguments if ratio is None else [*arguments, "--max-output-ratio", repr(ratio)]

