"""Which search a run decodes with when no flag says: the run's own defaults, then the flags.

A run trained here decodes with this package's beam search by default
(`"kept"`: a finished hypothesis keeps its slot; beam 4, GNMT's length
penalty 0.6, the 3-gram loop guard, up to the model's positions less one
token). A run imported from Hugging Face holds `generation.json`, written
by `keras-transformer import` from the model's `generation_config.json`
(`write_generation_file`): its defaults are what transformers' `generate()`
does with that model (`"pooled"`, `num_beams`, `length_penalty`,
`early_stopping`, `no_repeat_ngram_size`, the length `max_length` allows,
and whether a hypothesis open at the limit counts a closing `</s>`:
`run_ends_at_limit`).
`resolve_search` gives the settings of one call: a flag given wins, the
rest come from the run. `translate`, `evaluate` and `serve` all take their
settings from it; `SearchSettings.describe` is the line `--verbose` prints.
The settings are a `decoding_settings.DecodingSettings` under its names
(`beam_width`, `no_repeat_ngram_size`); only `generation.json` keeps the
older keys (`beam`, `no_repeat_ngram`), translated where it is read and written.
Keras-free: it reads JSON files only.
"""

import dataclasses
import json
import os

# `DEFAULT_MAX_OUTPUT_RATIO` and `checked_output_ratio` are `DecodingSettings`' and stay importable from here.
from keras_transformer_runtime.decoding_settings import DEFAULT_MAX_OUTPUT_RATIO  # noqa: F401
from keras_transformer_runtime.decoding_settings import PACKAGE_DEFAULTS
from keras_transformer_runtime.decoding_settings import SEARCHES
from keras_transformer_runtime.decoding_settings import DecodingSettings
from keras_transformer_runtime.decoding_settings import checked_output_ratio  # noqa: F401
from keras_transformer_runtime.errors import UserInputError

GENERATION_FILE = "generation.json"
# `generation.json`'s keys that name an option otherwise than `DecodingSettings` (the file format of the runs
# imported before the two met), read and written by `_run_defaults` and `write_generation_file` only.
GENERATION_FILE_KEYS = {"beam_width": "beam", "no_repeat_ngram_size": "no_repeat_ngram"}
RUN_CONFIG_FILE = "config.json"
# What an imported run keeps of the model's config.json (`checkpoints.marian.run_import.MARIAN_CONFIG_FILE`).
IMPORTED_CONFIG_FILE = "marian_config.json"
# Each search's own length penalty and early stopping, for a search the run's defaults do not describe.
SEARCH_DEFAULTS = {"kept": {"length_penalty": 0.6, "early_stopping": False},
                   "pooled": {"length_penalty": 1.0, "early_stopping": False}}
# `generate`'s values where the model sets none (transformers 5.24,
# `GenerationConfig._get_default_generation_params`): one beam, 20 new tokens.
TRANSFORMERS_DEFAULT_NEW_TOKENS = 20
# A translation writes at most `max_output_ratio * its source's ids + OUTPUT_SLACK` tokens
# (`decoding_settings.DEFAULT_MAX_OUTPUT_RATIO`, `keras_transformer.decoding.output_limit`).
OUTPUT_SLACK = 10
# Generation settings `generate` applies that this package's searches do not, with the value that changes nothing.
_NOT_APPLIED = {"do_sample": False, "repetition_penalty": 1.0, "min_length": 0, "min_new_tokens": None,
                "num_beam_groups": 1, "diversity_penalty": 0.0, "encoder_no_repeat_ngram_size": 0,
                "forced_bos_token_id": None, "suppress_tokens": None, "begin_suppress_tokens": None,
                "exponential_decay_length_penalty": None, "encoder_repetition_penalty": 1.0}
# Each option a run's defaults set, by its `DecodingSettings` name, and the flag that overrides it.
_FLAGS = {"beam_width": "--beam", "beam_search": "--beam-search", "length_penalty": "--length-penalty",
          "early_stopping": "--early-stopping", "max_new_tokens": "--max-new-tokens",
          "no_repeat_ngram_size": "--no-repeat-ngram"}


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """How one call decodes, and where each setting came from.

    Args:
        decoding: the `DecodingSettings` of the search (`beam_width`,
            `beam_search`, `length_penalty`, `early_stopping`,
            `no_repeat_ngram_size`, `max_new_tokens`); a call adds its own
            fields with `decoding.replace(n_best=..., max_output_ratio=...)`.
        defaults: str, where the defaults came from.
        flags: tuple of the command-line flags that overrode them.
        notes: tuple of str, generation settings of the run not applied.

    Example:

    >>> SearchSettings(DecodingSettings(max_new_tokens=127), "the package's").describe()
    "search: kept, beam 4, length penalty 0.6, max new tokens 127, no-repeat-ngram 3; defaults: the package's"
    """

    decoding: DecodingSettings
    defaults: str
    flags: tuple = ()
    notes: tuple = ()

    def describe(self):
        """One line: the search, its settings, where the defaults came from and which flags overrode them.

        Returns:
            str, as `--verbose` prints it.

        Example:

        >>> line = SearchSettings(DecodingSettings(beam_width=1), "the package's", ("--beam",)).describe()
        >>> line.startswith("search: kept, beam 1 (greedy), "), line.endswith("from the command line: --beam")
        (True, True)
        """
        decoding = self.decoding
        greedy = " (greedy)" if decoding.beam_width == 1 else ""
        search = f"{decoding.beam_search}, beam {decoding.beam_width}{greedy}"
        if decoding.beam_width > 1:
            search += f", length penalty {float(decoding.length_penalty)!r}"
            if decoding.beam_search == "pooled":
                search += f", early stopping {'on' if decoding.early_stopping else 'off'}"
        limit = decoding.max_new_tokens if decoding.max_new_tokens is not None else "the model's positions less one"
        line = f"search: {search}, max new tokens {limit}, no-repeat-ngram {decoding.no_repeat_ngram_size}; " \
               f"defaults: {self.defaults}"
        if self.flags:
            line += f"; from the command line: {' '.join(self.flags)}"
        if self.notes:
            line += f"; not applied: {', '.join(self.notes)}"
        return line


def model_positions(run_directory):
    """The model's positions (its `max_length`) as the run's `config.json` says, or None without one.

    Example:

    >>> model_positions("no such run") is None
    True
    """
    config = _read_json(os.path.join(run_directory, RUN_CONFIG_FILE))
    value = config.get("max_length") if config else None
    return int(value) if isinstance(value, int) and value > 1 else None


def resolve_search(run_directory, beam_width=None, beam_search=None, length_penalty=None, early_stopping=None,
                   max_new_tokens=None, no_repeat_ngram_size=None):
    """The settings one call decodes with: each argument given (not None) wins, the run gives the rest.

    A run with `generation.json` (imported from Hugging Face) takes its
    settings; an imported run from before it, transformers' defaults read
    from its `marian_config.json`; any other run, `PACKAGE_DEFAULTS`. A
    `beam_search` other than the run's takes that search's own length
    penalty and early stopping (`SEARCH_DEFAULTS`).

    Args:
        run_directory: the run folder.
        beam_width, beam_search, length_penalty, early_stopping,
            max_new_tokens, no_repeat_ngram_size: `DecodingSettings`'
            fields, as the command line gives them; None where not given.

    Returns:
        A `SearchSettings`: its `decoding`, and where each option came from.

    Raises:
        UserInputError: `max_new_tokens` is not a positive int, or more
            than the model's positions less one (`model_positions`); an
            option out of its range (`DecodingSettings`).

    Example:

    >>> settings = resolve_search("no such run", beam_width=2)
    >>> settings.decoding.beam_search, settings.decoding.beam_width, settings.decoding.length_penalty, settings.flags
    ('kept', 2, 0.6, ('--beam',))
    """
    run, defaults = _run_defaults(run_directory)
    given = {"beam_width": beam_width, "beam_search": beam_search, "length_penalty": length_penalty,
             "early_stopping": early_stopping, "max_new_tokens": max_new_tokens,
             "no_repeat_ngram_size": no_repeat_ngram_size}
    given = {key: value for key, value in given.items() if value is not None}
    if given.get("beam_search", run["beam_search"]) not in SEARCHES:
        raise UserInputError(f"--beam-search {given['beam_search']!r}: expected one of {', '.join(SEARCHES)}.")
    settings = {key: run[key] for key in PACKAGE_DEFAULTS}
    if given.get("beam_search", run["beam_search"]) != run["beam_search"]:
        settings.update(SEARCH_DEFAULTS[given["beam_search"]])
    settings.update(given)
    positions = model_positions(run_directory)
    settings["max_new_tokens"] = _checked_new_tokens(settings["max_new_tokens"], positions, "max_new_tokens" in given)
    try:
        decoding = DecodingSettings(**settings)
    except ValueError as error:
        raise UserInputError(str(error)) from None
    return SearchSettings(decoding, defaults, tuple(_FLAGS[key] for key in given), tuple(run.get("notes", ())))


def _checked_new_tokens(value, positions, given):
    limit = f", at most {positions - 1} (the model's {positions} positions less the start token)" if positions else ""
    if value is None:
        return positions - 1 if positions else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (positions and value > positions - 1):
        if not given and positions:  # a run's own setting beyond its model: the model's limit
            return positions - 1
        raise UserInputError(f"--max-new-tokens {value}: expected a positive integer{limit}.")
    return value


def _run_defaults(run_directory):
    """`(settings, where from)`: the run's `generation.json`, an older import's config, or the package's."""
    generation = _read_json(os.path.join(run_directory, GENERATION_FILE))
    if generation:
        keys = {name: GENERATION_FILE_KEYS.get(name, name) for name in PACKAGE_DEFAULTS}
        settings = {**PACKAGE_DEFAULTS, **{name: generation[key] for name, key in keys.items() if key in generation}}
        settings["notes"] = tuple(generation.get("notes", ()))
        settings["end_at_limit"] = generation.get("end_at_limit", True)
        return settings, f"the run's {GENERATION_FILE} (from the model's {generation.get('from', 'generation config')})"
    imported_config = os.path.join(run_directory, IMPORTED_CONFIG_FILE)
    if os.path.isfile(imported_config):
        where = f"transformers' defaults read from the run's {IMPORTED_CONFIG_FILE}"
        return generation_defaults(imported_config), where
    return dict(PACKAGE_DEFAULTS), "the package's (a run trained here)"


def generation_defaults(config_path, generation_config_path=None):
    """What `generate()` does by default with a Hugging Face model, as this package's search settings.

    From `generation_config.json` when there is one; else from what
    transformers reads of `config.json` (its generation keys, then
    `generate`'s own defaults: one beam, 20 new tokens). transformers'
    `max_length` counts the start token; a model with a
    `forced_eos_token_id` (Marian's) also spends the last one on `</s>`, so
    `max_new_tokens` is `max_length - 2`, and `max_length - 1` for one
    without (NLLB-200's), at most the model's positions less one.

    Args:
        config_path: the model's `config.json`.
        generation_config_path: its `generation_config.json`, or None.

    Returns:
        A dict of `PACKAGE_DEFAULTS`' keys (`DecodingSettings`' names;
        `beam_search` `"pooled"`), with `from` (the file read), `notes`
        (settings not applied) and `end_at_limit` (whether
        `forced_eos_token_id` is set).

    Example:

    >>> generation_defaults("no such config.json")["beam_width"]
    1
    """
    config = _read_json(config_path) or {}
    generation = _read_json(generation_config_path) if generation_config_path else None
    source = os.path.basename(generation_config_path) if generation else os.path.basename(config_path)
    generation = generation if generation else config
    positions = config.get("max_position_embeddings") or 1 << 30
    if generation.get("max_new_tokens") is not None:
        max_length = int(generation["max_new_tokens"]) + 1
    elif generation.get("max_length") is not None:
        max_length = int(generation["max_length"])
    else:  # transformers: 20 new tokens, at most the positions
        max_length = min(TRANSFORMERS_DEFAULT_NEW_TOKENS + 1, positions)
    length_penalty = float(generation.get("length_penalty") if generation.get("length_penalty") is not None else 1.0)
    early_stopping = generation.get("early_stopping") or False
    notes = [f"{key}={generation[key]!r}" for key, neutral in _NOT_APPLIED.items()
             if generation.get(key, neutral) not in (neutral, None)]
    if early_stopping == "never":
        if length_penalty > 0:
            notes.append("early_stopping='never' (runs as False)")
        early_stopping = False
    pad = config.get("pad_token_id")
    if generation.get("bad_words_ids") not in (None, [], [[pad]]):
        notes.append(f"bad_words_ids beyond <pad> ({generation['bad_words_ids']!r})")
    forces_end = generation.get("forced_eos_token_id", config.get("forced_eos_token_id")) is not None
    beam = int(generation.get("num_beams") or 1)
    return {"beam_search": "pooled", "beam_width": beam, "length_penalty": length_penalty,
            "early_stopping": bool(early_stopping),
            "no_repeat_ngram_size": int(generation.get("no_repeat_ngram_size") or 0),
            "max_new_tokens": max(1, min(max_length - (2 if forces_end else 1), positions - 1)), "from": source,
            "notes": notes, "end_at_limit": forces_end}


def run_ends_at_limit(run_directory):
    """Whether a pooled beam search of the run counts a closing `</s>` in the length of a hypothesis open at the limit.

    `generate` forces `</s>` as the last token where the model sets a
    `forced_eos_token_id` (Marian's): a hypothesis still open at
    `max_length` ends with it, and its length penalty counts it. NLLB-200
    sets none, and such a hypothesis counts the tokens it has. An imported
    run says which in `generation.json` (`end_at_limit`); a run trained
    here, or imported before the key, counts the `</s>` (this package's
    searches always did).

    Args:
        run_directory: the run folder.

    Returns:
        bool.

    Example:

    >>> run_ends_at_limit("no such run")
    True
    """
    return bool(_run_defaults(run_directory)[0].get("end_at_limit", True))


def write_generation_file(model_directory, run_directory):
    """Writes `generation.json` into an imported run: `generation_defaults` of the Hugging Face folder.

    The file keeps its keys (`beam`, `no_repeat_ngram`: `GENERATION_FILE_KEYS`),
    which the runs imported before hold; `resolve_search` reads them back as
    `DecodingSettings`' names.

    Args:
        model_directory: the Hugging Face model's folder (`config.json`,
            and `generation_config.json` where it has one).
        run_directory: the run folder being written.

    Returns:
        The dict written (the file's keys).

    Example:

    >>> write_generation_file("opus-mt-es-en", "runs/opus-mt-es-en")["beam_search"]  # doctest: +SKIP
    'pooled'
    """
    generation_config = os.path.join(model_directory, "generation_config.json")
    settings = generation_defaults(os.path.join(model_directory, "config.json"),
                                   generation_config if os.path.isfile(generation_config) else None)
    settings = {GENERATION_FILE_KEYS.get(key, key): value for key, value in settings.items()}
    with open(os.path.join(run_directory, GENERATION_FILE), "w") as f:
        json.dump(settings, f, indent=2)
    return settings


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
