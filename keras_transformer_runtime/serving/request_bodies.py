"""What a request may say, checked before anything is queued: every refusal is one line and a 4xx.

Two shapes are read: this server's own `POST /v1/translate` body, and
TensorFlow Serving's REST `predict` body (`instances` or `inputs`, strings
or `{"b64": ...}`), so a client written for the exported SavedModel under
TensorFlow Serving works unchanged. Nothing a request says is ever used as
a path: models are looked up by the names the command line gave them.
"""

import base64
import binascii
import dataclasses
import json

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.target_language import each_with_target_language
from keras_transformer_runtime.text_cleaning import replace_lone_surrogates

# The fields of `POST /v1/translate` and their meaning (also the OpenAPI description's).
TRANSLATE_FIELDS = {
    "model": "the model's name, as `serve --model` gave it; may be left out when one model is served",
    "text": "a sentence, or a list of them",
    "beam": "the beam width, one of those served (`serve --beam`; default: the first)",
    "n_best": "how many hypotheses each sentence gets, 1 to the beam width (default 1)",
    "max_new_tokens": "the longest translation in tokens, one of the limits served (`serve --max-new-tokens`; "
                      "default: the first)",
    "alignments": "each hypothesis' word alignment to the source, and the source's pieces (default false)",
    "attention_weights": "with the alignments, each hypothesis' cross-attention over the source pieces (default false)",
    "token_scores": "each hypothesis' subword pieces and their log-probabilities (default false)",
    "target_language": "a multi-target model's language to write (`fra`: `>>fra<<` before each sentence that has "
                       "no code of its own; an NLLB-200 model's: `eng_Latn`); such a model refuses a sentence "
                       "without one",
    "source_language": "an NLLB-200 model's source language (`spa_Latn`), needed with `target_language`; `auto`: "
                       "each text's own, detected (its answer says which: `source_language`)",
    "sentence_splitting": "split each text into sentences, translate them together and put them back with the "
                          "text's own whitespace (default true); false hands each text to the model whole",
    "format": "`text` (the default), or `html`: each text an HTML page or fragment, answered with its markup kept "
              "(tags, attributes, entities; inline tags carried to the words they cover); one hypothesis, no "
              "alignments or token scores",
}
SIGNATURE_NAME = "serving_default"
SIGNATURE_INPUT = "texts"


class RequestError(Exception):
    """A request the server refuses: an HTTP status (4xx) and a one-line reason.

    Example:

    >>> error = RequestError(400, "'beam' must be an int")
    >>> error.status, str(error)
    (400, "'beam' must be an int")
    """

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class TranslateRequest:
    """A checked request: which model, which sentences, and how to decode and answer them."""

    model: str
    texts: tuple
    beam: int
    n_best: int = 1
    alignments: bool = False
    attention_weights: bool = False
    token_scores: bool = False
    text_warnings: tuple = ()
    languages: tuple = ()
    max_new_tokens: object = None
    split_sentences: bool = True
    format: str = "text"
    # `(index, reason)` of each text the model cannot take: answered with its error, the others translated.
    refused: tuple = ()


def json_body(body):
    """The JSON object of a request body (bytes), or a `RequestError` (400) saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(400, f"the body is not UTF-8 (byte {error.start})")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise RequestError(400, f"the body is not JSON: {error.msg} at line {error.lineno} column {error.colno}")
    except RecursionError:
        raise RequestError(400, "the body is not JSON this server reads: nested too deep")
    if not isinstance(value, dict):
        raise RequestError(400, f"the body must be a JSON object, not {_json_type(value)}")
    return value


def parse_translate(body, models, max_texts):
    """The `TranslateRequest` of a `POST /v1/translate` body.

    Args:
        body: the request's bytes.
        models: dict of name -> `ServedModel`.
        max_texts: the most sentences a request may send (more: 413).

    Returns:
        A `TranslateRequest`.

    Raises:
        RequestError: what is wrong, as a 400 (or 413 for too many texts).

    Example:

    >>> import types
    >>> models = {"es-en": types.SimpleNamespace(beams=(4, 1), default_beam=4, limits=(None,))}
    >>> parse_translate(b'{"text": "Hola.", "n_best": 2}', models, 64).texts
    ('Hola.',)
    """
    value = json_body(body)
    unknown = sorted(set(value) - set(TRANSLATE_FIELDS))
    if unknown:
        raise RequestError(400, f"unknown field {unknown[0]!r}; the fields are {', '.join(TRANSLATE_FIELDS)}")
    model = _model(value.get("model"), models)
    if "text" not in value:
        raise RequestError(400, "'text' is missing: give a sentence or a list of them")
    texts, text_warnings = _texts(value["text"], "'text'", max_texts)
    served = models[model].beams
    beam = _integer(value, "beam", models[model].default_beam)
    if beam not in served:
        raise RequestError(400, f"'beam' {beam} is not served; this server serves beam "
                                f"{' or '.join(map(str, served))} for {model!r} (serve --beam)")
    n_best = _integer(value, "n_best", 1)
    if not 1 <= n_best <= beam:
        raise RequestError(400, f"'n_best' must be from 1 to the beam width {beam}, got {n_best}")
    limits = models[model].limits
    limit = _integer(value, "max_new_tokens", None) if "max_new_tokens" in value else limits[0]
    if limit not in limits:
        served_limits = " or ".join(map(str, limits)) if limits != (None,) else "only the run's own limit"
        raise RequestError(400, f"'max_new_tokens' {limit} is not served; this server serves {served_limits} for "
                                f"{model!r} (serve --max-new-tokens)")
    flags = {name: _boolean(value, name) for name in ("alignments", "attention_weights", "token_scores")}
    flags["alignments"] = flags["alignments"] or flags["attention_weights"]
    flags["split_sentences"] = _boolean(value, "sentence_splitting", True)
    flags["format"] = value.get("format", "text")
    if flags["format"] not in ("text", "html"):
        raise RequestError(400, f"'format' must be \"text\" or \"html\", not {flags['format']!r:.40}")
    if flags["format"] == "html" and (n_best > 1 or flags["alignments"] or flags["token_scores"]):
        raise RequestError(400, "'format': 'html' answers one translation a page: no 'n_best' above 1, "
                                "'alignments', 'attention_weights' or 'token_scores'")
    if flags["format"] == "html" and value.get("source_language") == "auto":
        raise RequestError(400, "'format': 'html' takes a named 'source_language', not 'auto'")
    source_language, target_language = (value.get(f"{side}_language") for side in ("source", "target"))
    for side, language in (("source", source_language), ("target", target_language)):
        if language is not None and not isinstance(language, str):
            raise RequestError(400, f"'{side}_language' must be a string, not {_json_type(language)}")
    if getattr(models[model], "translates_between_languages", False):
        languages = languages_checked(models[model], source_language, target_language)
        return TranslateRequest(model, texts, beam, n_best, text_warnings=text_warnings, languages=languages,
                                max_new_tokens=limit, **flags)
    if source_language is not None:
        raise RequestError(400, f"'source_language' is an NLLB-200 model's field; {model!r} reads any source")
    texts, refused = language_checked(texts, models[model], target_language)
    return TranslateRequest(model, texts, beam, n_best, text_warnings=text_warnings, max_new_tokens=limit,
                            refused=refused, **flags)


def languages_checked(model, source_language, target_language):
    """`(source, target)`: an NLLB-200 model's two languages, checked against its codes.

    Raises:
        RequestError: a language is missing or not the model's (400; close codes named).

    Example:

    >>> import types
    >>> model = types.SimpleNamespace(check_languages=lambda source, target: None)
    >>> languages_checked(model, "spa_Latn", "eng_Latn")
    ('spa_Latn', 'eng_Latn')
    """
    try:
        model.check_languages(source_language, target_language)
    except UserInputError as error:
        raise RequestError(400, str(error).replace("--source-language", "'source_language'")
                           .replace("--target-language", "'target_language'")) from None
    return source_language, target_language


def language_checked(texts, model, target_language=None):
    """`texts` with the target-language token a multi-target `model` needs, each text checked on its own.

    Args:
        texts: the request's sentences.
        model: the `ServedModel` (its `language_codes`).
        target_language: the request's `target_language`, or None.

    Returns:
        `(texts, refused)`: a tuple of str (a refused text as given), and a
        tuple of `(index, reason)` for each text the model cannot take (no
        code, or one it does not write; the reason lists its codes).

    Raises:
        RequestError: 400, `target_language` itself is not one the model writes.

    Example:

    >>> import types
    >>> language_checked(("Hola.", ">>xx<< Hola."), types.SimpleNamespace(language_codes=("fra", "por")), "por")[0]
    ('>>por<< Hola.', '>>xx<< Hola.')
    """
    try:
        checked, refused = each_with_target_language(list(texts), getattr(model, "language_codes", ()),
                                                     target_language)
    except UserInputError as error:
        raise RequestError(400, str(error)) from None
    return (tuple(text if text is not None else texts[i] for i, text in enumerate(checked)),
            tuple(sorted(refused.items())))


def refused_request(texts, refused):
    """One 400 naming every refused text, for an endpoint whose answer has no place for an error a text.

    Example:

    >>> str(refused_request(("a", "b"), ((1, "no code"),)))
    "1 of 2 texts refused: text 1 ('b'): no code"
    """
    named = "; ".join(f"text {i} ({texts[i][:30]!r}): {reason}" for i, reason in refused)
    return RequestError(400, f"{len(refused)} of {len(texts)} texts refused: {named}")


def parse_predict(body, max_texts):
    """The sentences of a TensorFlow Serving REST `predict` body, and each one's warnings.

    Takes the row format (`{"instances": [...]}`) and the columnar one
    (`{"inputs": [...]}` or `{"inputs": {"texts": [...]}}`); an instance is
    a string, `{"b64": ...}` (UTF-8 bytes in base64) or `{"texts": ...}`.

    Returns:
        `(texts, text_warnings, columnar)`.

    Raises:
        RequestError: 400, or 413 for too many texts.

    Example:

    >>> parse_predict(b'{"instances": ["Hola.", {"texts": {"b64": "QWRpw7NzLg=="}}]}', 64)[0]
    ('Hola.', 'Adiós.')
    """
    value = json_body(body)
    signature = value.get("signature_name", SIGNATURE_NAME)
    if signature != SIGNATURE_NAME:
        raise RequestError(400, f"unknown signature_name {signature!r}: the model has {SIGNATURE_NAME!r} only")
    unknown = sorted(set(value) - {"instances", "inputs", "signature_name"})
    if unknown or ("instances" in value) == ("inputs" in value):
        raise RequestError(400, "the body must hold one of 'instances' (rows) or 'inputs' (columns), "
                                "and optionally 'signature_name'")
    columnar = "inputs" in value
    rows = value["inputs"] if columnar else value["instances"]
    if columnar and isinstance(rows, dict):
        rows = _named_input(rows, "'inputs'")
    if not isinstance(rows, list):
        raise RequestError(400, f"{'inputs' if columnar else 'instances'} must be a list, not {_json_type(rows)}")
    if not columnar:
        rows = [_named_input(row, f"instances[{i}]") if isinstance(row, dict) and "b64" not in row else row
                for i, row in enumerate(rows)]
    rows = [_base64(row, i) for i, row in enumerate(rows)]
    texts, text_warnings = _texts(rows, "'instances'", max_texts)
    return texts, text_warnings, columnar


def _named_input(value, where):
    if set(value) != {SIGNATURE_INPUT}:
        raise RequestError(400, f"{where} must name the one input {SIGNATURE_INPUT!r}, got {sorted(value)}")
    return value[SIGNATURE_INPUT]


def _base64(value, index):
    if not isinstance(value, dict):
        return value
    if set(value) != {"b64"} or not isinstance(value["b64"], str):
        raise RequestError(400, f"instance {index} must be a string or {{\"b64\": string}}")
    try:
        return base64.b64decode(value["b64"], validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise RequestError(400, f"instance {index}: 'b64' is not base64 of UTF-8 text")


def _model(name, models):
    if name is None:
        if len(models) == 1:
            return next(iter(models))
        raise RequestError(400, f"'model' is missing: this server serves {', '.join(sorted(models))}")
    if not isinstance(name, str) or name not in models:
        raise RequestError(400, f"unknown model {name!r:.80}: this server serves {', '.join(sorted(models))}")
    return name


def _texts(value, where, max_texts):
    """`(texts, warnings)`: the sentences as a tuple of str, lone surrogates replaced (and warned about)."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise RequestError(400, f"{where} must be a string or a list of strings, not {_json_type(value)}")
    if len(texts) > max_texts:
        raise RequestError(413, f"{len(texts)} sentences in one request; the most is {max_texts} (serve --max-texts)")
    cleaned, text_warnings = [], []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise RequestError(400, f"{where}[{i}] must be a string, not {_json_type(text)}")
        text, replaced = replace_lone_surrogates(text)  # JSON's "\ud800", which no UTF-8 answer can hold
        text_warnings.append(("held lone surrogates (\\ud800-\\udfff escapes); replaced by U+FFFD",) if replaced
                             else ())
        cleaned.append(text)
    return tuple(cleaned), tuple(text_warnings)


def _integer(value, name, default):
    number = value.get(name, default)
    if isinstance(number, bool) or not isinstance(number, int):
        raise RequestError(400, f"{name!r} must be an integer, not {_json_type(number)}")
    return number


def _boolean(value, name, default=False):
    flag = value.get(name, default)
    if not isinstance(flag, bool):
        raise RequestError(400, f"{name!r} must be true or false, not {_json_type(flag)}")
    return flag


def _json_type(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
