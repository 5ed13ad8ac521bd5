"""One run served under a name: its translators for each setting a request may ask for.

A request chooses a beam width and a length limit (among those the
command line served) and whether it wants alignments; each such setting is
its own decoding program (`Setting`). `ServedModel` loads them all once,
compiles every batch shape before the server says it is ready, and
translates a batch of one setting into `Translation`s, `translate --format
jsonl`'s objects, each with the warnings about its own sentence
(truncated, mostly unknown characters).
"""

import dataclasses
import os
import threading

# A request's `source_language` asking for each text's own language, detected (`documents.languages`).
AUTO_SOURCE = "auto"


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a batch is decoded with: the beam width, the cross-attention read or not, the languages, the length limit.

    Example:

    >>> Setting(4, alignments=True)
    Setting(beam=4, alignments=True, languages=(), max_new_tokens=None, split_sentences=True)
    """

    beam: int
    alignments: bool = False
    # An NLLB-200 model's (source, target) codes: a batch holds one pair.
    languages: tuple = ()
    # The longest translation in tokens; None: the run's own limit.
    max_new_tokens: object = None
    # Each text split into sentences and put back (`documents.paragraphs`), or handed to the model whole.
    split_sentences: bool = True


def model_name(argument):
    """The name and run folder of a `--model` argument: `NAME=FOLDER`, or a folder named by its last part.

    Example:

    >>> model_name("runs/es-en/"), model_name("bible=runs/es-en")
    (('es-en', 'runs/es-en/'), ('bible', 'runs/es-en'))
    """
    name, separator, folder = argument.partition("=")
    if not separator:
        folder = argument
        name = os.path.basename(os.path.normpath(argument))
    return name, folder


class ServedModel:
    """A run's translators, one per `Setting` served, behind one name.

    Args:
        name: what requests call the model.
        run_directory: the run folder (`--output` of `train`, or of `import`).
        beams: the beam widths served, the default (what a request that names
            none gets) first.
        load_translator: `load_translator(run_directory, setting, weights_of)
            -> TextTranslator` with `n_best` of `setting.beam` hypotheses (and
            the cross-attention when `setting.alignments`); `weights_of` is an
            already loaded translator of the run, or None.
        engine: a few words on what runs the model (said at start and in `/v1/models`).
        limits: the length limits served (`max_new_tokens`), the default
            first; `(None,)` (the default): the run's own, the only one.

    Example (`translate` needs `load()` first):

    >>> served = ServedModel("es-en", "runs/es-en", [4, 1], load_translator=None, engine="compiled", limits=[64, 16])
    >>> [(setting.beam, setting.max_new_tokens, setting.alignments) for setting in served.settings()][:3]
    [(4, 64, False), (4, 64, True), (4, 16, False)]
    >>> len(served.settings())
    8
    """

    def __init__(self, name, run_directory, beams, load_translator, engine, limits=(None,)):
        self.name = name
        self.run_directory = run_directory
        self.beams = tuple(int(beam) for beam in beams)
        self.limits = tuple(limits)
        self.engine = engine
        self._load_translator = load_translator
        self._translators = {}
        self._detector = None
        self._detector_lock = threading.Lock()

    @property
    def default_beam(self):
        return self.beams[0]

    def settings(self):
        """Every `Setting` served: each beam width and length limit, with and without alignments."""
        return [Setting(beam, alignments, max_new_tokens=limit) for beam in self.beams for limit in self.limits
                for alignments in (False, True)]

    def load(self, log=lambda line: None):
        """Loads each setting's translator and compiles its batch shapes (where the engine compiles ahead)."""
        first = None
        for setting in self.settings():
            translator = self._load_translator(self.run_directory, setting, first)
            first = first or translator
            if hasattr(translator, "compile_batch_shapes"):
                shapes = translator.compile_batch_shapes()
                limit = f", at most {setting.max_new_tokens} tokens" if len(self.limits) > 1 else ""
                log(f"{self.name}: beam {setting.beam}{limit}{' with alignments' if setting.alignments else ''}: "
                    f"{len(shapes)} batch shapes compiled")
            self._translators[setting] = translator

    @property
    def batch_rows(self):
        """The rows the engine decodes at once (its `batch_size`; 1 if it has none)."""
        return int(getattr(next(iter(self._translators.values())), "batch_size", 1))

    @property
    def language_codes(self):
        """The codes of a multi-target model's target languages (`fra` for `>>fra<<`); empty for one language.

        Empty too until the model is loaded: a request then waits for it (503) whatever its codes.
        """
        loaded = next(iter(self._translators.values()), None)
        if self.translates_between_languages:  # NLLB-200's codes are request fields, not tokens in the text
            return ()
        return tuple(getattr(getattr(loaded, "tokenizer", None), "language_codes", ()))

    @property
    def translates_between_languages(self):
        """Whether each request names its source and target languages (an NLLB-200 run)."""
        loaded = next(iter(self._translators.values()), None)
        return hasattr(getattr(loaded, "tokenizer", None), "forced_first_id")

    def check_languages(self, source_language, target_language):
        """Raises `UserInputError` (close codes named) unless both are the NLLB-200 model's languages.

        A `source_language` of `"auto"` checks the target alone (each text's source is detected).
        """
        tokenizer = next(iter(self._translators.values())).tokenizer
        if source_language == AUTO_SOURCE:
            if target_language is None:
                from keras_transformer_runtime.errors import UserInputError

                raise UserInputError("--source-language auto detects the source: pass --target-language CODE")
            source_language = target_language
        tokenizer.with_languages(source_language, target_language).check_languages()

    def source_languages(self, texts):
        """Each text's source language, detected among the model's codes (None for a text given as None), and
        `{index: reason}` for those refused (`documents.languages.source_languages`).

        Raises:
            UserInputError: the language detector is not installed.
        """
        from keras_transformer_runtime.documents.languages import LanguageDetector
        from keras_transformer_runtime.documents.languages import source_languages

        with self._detector_lock:  # built once, on the first request that asks (its model loads then)
            if self._detector is None:
                tokenizer = next(iter(self._translators.values())).tokenizer
                self._detector = LanguageDetector(tokenizer.language_codes)
        return source_languages(texts, self._detector)

    @property
    def max_length(self):
        """The longest source in tokens; longer ones are cut, with a warning."""
        return next(iter(self._translators.values())).max_length

    def translate(self, setting, texts):
        """Each of `texts` translated with `setting`: one `Translation` each, in order, with its warnings.

        Runs in the server's decoding thread. The translator says nothing
        through Python's warnings (which are process-wide, and would name
        the batch, not the request): each sentence's warnings come on its
        `Translation` instead.
        """
        translator = self._translators[dataclasses.replace(setting, languages=(), split_sentences=True)]
        if setting.languages:
            translator = translator.with_languages(*setting.languages)
        return translator.n_best(list(texts), setting.beam, alignments=setting.alignments, warn=False,
                                 split_sentences=setting.split_sentences)
