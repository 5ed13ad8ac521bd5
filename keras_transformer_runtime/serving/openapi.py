"""The server's OpenAPI 3.1 description (`GET /openapi.json`), written out rather than inferred.

The request fields come from `request_bodies.TRANSLATE_FIELDS`, so the
description and what the server accepts cannot drift apart; a test checks
that every route is described.
"""

from keras_transformer_runtime.serving.request_bodies import TRANSLATE_FIELDS

_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
_TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_FIELD_SCHEMAS = {
    "model": {"type": "string"},
    "text": _TEXTS,
    "beam": {"type": "integer", "minimum": 1},
    "n_best": {"type": "integer", "minimum": 1, "default": 1},
    "max_new_tokens": {"type": "integer", "minimum": 1},
    "alignments": {"type": "boolean", "default": False},
    "attention_weights": {"type": "boolean", "default": False},
    "token_scores": {"type": "boolean", "default": False},
    "target_language": {"type": "string"},
    "source_language": {"type": "string"},
    "sentence_splitting": {"type": "boolean", "default": True},
    "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
}
_HYPOTHESIS = {"type": "object", "required": ["text", "score", "normalized_score"], "properties": {
    "text": {"type": "string"},
    "score": {"type": "number", "description": "log-probability"},
    "normalized_score": {"type": "number", "description": "the length-normalized score the beam ranked by"},
    "tokens": {"type": "array", "items": {"type": "string"}},
    "token_scores": {"type": "array", "items": {"type": "number"}},
    "alignment": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}},
                  "description": "[source word, target word] pairs, from 0"},
    "attention": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
    "segments": {"type": "array", "items": {"type": "object", "properties": {
        "source": {"type": "array", "items": {"type": "integer"}},
        "target": {"type": "array", "items": {"type": "integer"}}}},
        "description": "a text of several sentences: each sentence's [start, end) characters in the source and "
                       "in the hypothesis' text"},
}}
_TRANSLATION = {"type": "object", "required": ["source", "hypotheses"], "properties": {
    "source": {"type": "string"},
    "source_tokens": {"type": "array", "items": {"type": "string"}},
    "hypotheses": {"type": "array", "items": _HYPOTHESIS},
    "warnings": {"type": "array", "items": {"type": "string"}},
    "source_language": {"type": "string", "description": "the language detected (a request's "
                                                         "`source_language`: `auto`)"},
    "format": {"type": "string", "description": "`html` for a page translated with its markup"},
}}
_REFUSED = {"type": "object", "required": ["source", "error"], "properties": {
    "source": {"type": "string"},
    "error": {"type": "string", "description": "why the model cannot take this text (the others are translated)"},
}}


def _json(schema, description="OK"):
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes):
    reasons = {400: "a request that is wrong (one-line reason)", 401: "no or a wrong bearer token",
               413: "a body or a list of sentences over the limits", 503: "loading, shutting down or too busy "
               "(Retry-After)", 504: "not translated within the timeout", 500: "the engine failed on a batch (logged)"}
    return {str(code): _json(_ERROR, reasons[code]) for code in codes}


def openapi_document(model_names):
    """The OpenAPI description of a server serving `model_names`.

    Example:

    >>> sorted(openapi_document(["es-en"])["paths"])[:3]
    ['/healthz', '/metrics', '/openapi.json']
    """
    translate_body = {"type": "object", "required": ["text"], "additionalProperties": False,
                      "properties": {name: {**schema, "description": TRANSLATE_FIELDS[name]}
                                     for name, schema in _FIELD_SCHEMAS.items()}}
    translate_body["properties"]["model"]["enum"] = list(model_names)
    predict_body = {"type": "object", "properties": {
        "signature_name": {"type": "string", "enum": ["serving_default"]},
        "instances": {"type": "array", "items": {"oneOf": [
            {"type": "string"}, {"type": "object", "properties": {"b64": {"type": "string"}}},
            {"type": "object", "properties": {"texts": {"type": "string"}}}]}},
        "inputs": {"oneOf": [{"type": "array", "items": {"type": "string"}},
                             {"type": "object", "properties": {"texts": {"type": "array",
                                                                         "items": {"type": "string"}}}}]},
    }}
    name_parameter = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string",
                                                                                 "enum": list(model_names)}}]
    text = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "keras-transformer serve", "version": "1",
                 "description": "Translations of the models `keras-transformer serve` was started with; "
                                "concurrent requests are decoded together (docs/serving.md)."},
        "paths": {
            "/v1/translate": {"post": {
                "summary": "Translate sentences: translate --format jsonl's objects, one a sentence, in order",
                "requestBody": {"required": True, "content": {"application/json": {"schema": translate_body}}},
                "responses": {"200": _json({"type": "object", "properties": {
                    "model": {"type": "string"},
                    "translations": {"type": "array", "items": {"oneOf": [_TRANSLATION, _REFUSED]}}}}),
                    **_errors(400, 401, 413, 500, 503, 504)}}},
            "/v1/models/{name}:predict": {"post": {
                "summary": "TensorFlow Serving's REST predict: the exported SavedModel's signature, texts -> "
                           "translations (the default beam)",
                "parameters": name_parameter,
                "requestBody": {"required": True, "content": {"application/json": {"schema": predict_body}}},
                "responses": {"200": _json({"type": "object", "properties": {
                    "predictions": {"type": "array", "items": {"type": "string"}},
                    "outputs": {"type": "array", "items": {"type": "string"}}}}),
                    **_errors(400, 401, 413, 500, 503, 504)}}},
            "/v1/models": {"get": {"summary": "The models served, their engine and beam widths",
                                   "responses": {"200": _json({"type": "object"}), **_errors(401)}}},
            "/v1/models/{name}": {"get": {"summary": "TensorFlow Serving's model status",
                                          "parameters": name_parameter,
                                          "responses": {"200": _json({"type": "object"}), **_errors(400, 401)}}},
            "/healthz": {"get": {"summary": "Alive (no token needed)",
                                 "responses": {"200": _json({"type": "object"})}}},
            "/readyz": {"get": {"summary": "Models loaded and compiled, not shutting down (no token needed)",
                                "responses": {"200": _json({"type": "object"}), **_errors(503)}}},
            "/metrics": {"get": {"summary": "Prometheus text format: requests, sentences, batch sizes, queue "
                                            "depth, latency", "responses": {"200": text, **_errors(401)}}},
            "/openapi.json": {"get": {"summary": "This description", "responses": {"200": _json({"type": "object"}),
                                                                                  **_errors(401)}}},
        },
    }
