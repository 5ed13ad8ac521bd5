"""The HTTP application (Starlette, ASGI): routes, limits, errors, authentication, metrics.

`create_app` wires the served models to one `RequestBatcher` each and one
decoding thread for all of them, and answers:

- `POST /v1/translate`: this server's API (`request_bodies.TRANSLATE_FIELDS`),
  answered with `translate --format jsonl`'s objects;
- `POST /v1/models/NAME:predict`: TensorFlow Serving's REST API;
- `GET /v1/models`, `GET /v1/models/NAME`: what is served (the second in
  TensorFlow Serving's model status shape);
- `GET /healthz` (alive), `GET /readyz` (models loaded and compiled, not
  draining), `GET /metrics` (Prometheus), `GET /openapi.json`.

Every error is `{"error": "one line"}` with a 4xx or 5xx status: 400 for a
request that is wrong, 401 without the token, 413 over the limits, 503
while loading, draining or when the queue is full (with `Retry-After`),
504 when a request waits longer than its timeout, 500 only when the
engine itself fails on a batch (the traceback goes to the log).
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hmac
import sys
import threading
import time
import traceback

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.routing import Route

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.serving.batcher import QueueFull
from keras_transformer_runtime.serving.batcher import RequestBatcher
from keras_transformer_runtime.serving.metrics import ServerMetrics
from keras_transformer_runtime.serving.openapi import openapi_document
from keras_transformer_runtime.serving.request_bodies import RequestError
from keras_transformer_runtime.serving.request_bodies import language_checked
from keras_transformer_runtime.serving.request_bodies import refused_request
from keras_transformer_runtime.serving.request_bodies import parse_predict
from keras_transformer_runtime.serving.request_bodies import parse_translate
from keras_transformer_runtime.serving.served_model import AUTO_SOURCE
from keras_transformer_runtime.serving.served_model import Setting

# Paths a supervisor probes without a token: they tell nothing about the models.
OPEN_PATHS = ("/healthz", "/readyz")


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """How much the server takes and how long it waits (the `serve` flags of the same names).

    Args:
        max_body_bytes: the largest request body (more: 413).
        max_texts: the most sentences in one request (more: 413).
        max_batch_sentences: the most sentences of several requests decoded together.
        batch_wait_seconds: how long an idle decoder waits for other requests to join the first.
        max_queue_sentences: the most sentences waiting (more: 503 with `Retry-After`).
        timeout_seconds: how long a request may wait for its translations (more: 504).
    """

    max_body_bytes: int = 1 << 20
    max_texts: int = 256
    max_batch_sentences: int = 64
    batch_wait_seconds: float = 0.005
    max_queue_sentences: int = 2048
    timeout_seconds: float = 30.0


class ServerState:
    """What the routes share: the models, their batchers, readiness, counts, the token and the metrics."""

    def __init__(self, models, limits, token, log):
        self.models = models
        self.limits = limits
        self.token = token
        self.log = log
        self.metrics = ServerMetrics()
        self.batchers = {}
        self.ready = False
        self.draining = False
        self.load_error = None
        self.accepted = 0  # translation requests taken into the queue
        self.answered = 0  # ... that got their translations
        self.timed_out = 0  # ... that got a 504 instead
        self.failed = 0  # ... whose batch the engine failed (500, logged)
        # Called with the exception if loading a model fails (`run_server` stops: it would never be ready).
        self.on_load_failure = None


def create_app(models, limits=ServerLimits(), token=None, log=None):
    """The ASGI application serving `models`.

    Args:
        models: dict of name -> `ServedModel` (not loaded yet: the
            application loads them in a thread when it starts, and says
            it is ready once they are compiled).
        limits: `ServerLimits`.
        token: None, or the bearer token every request but `OPEN_PATHS` must carry.
        log: callable taking one line; None writes to stderr.

    Returns:
        A `starlette.applications.Starlette`; `app.state.server` is its `ServerState`.
    """
    log = log or (lambda line: print(f"keras-transformer: {line}", file=sys.stderr, flush=True))
    state = ServerState(models, limits, token, log)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decode")
        tasks = []
        for name, model in models.items():
            def on_batch(sentences, seconds, name=name):
                state.metrics.batch_sentences.labels(model=name).observe(sentences)
                state.metrics.batch_seconds.labels(model=name).observe(seconds)

            batcher = state.batchers[name] = RequestBatcher(
                model.translate, executor, limits.max_batch_sentences, limits.batch_wait_seconds,
                limits.max_queue_sentences, on_batch)
            state.metrics.queue_depth.labels(model=name).set_function(lambda batcher=batcher: batcher.queued_items)
            tasks.append(asyncio.create_task(batcher.run()))
        loader = threading.Thread(target=_load_models, args=(state,), name="load", daemon=True)
        loader.start()
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            executor.shutdown(wait=True, cancel_futures=True)

    app = Starlette(routes=_routes(state), lifespan=lifespan, exception_handlers={HTTPException: _http_error})
    app.state.server = state
    return _Authenticated(app, token) if token else app


def _load_models(state):
    started = time.monotonic()
    try:
        for name, model in state.models.items():
            model.load(state.log)
            state.batchers[name].rows_multiple = model.batch_rows
    except Exception as error:  # noqa: BLE001 (reported, then the server stops)
        state.load_error = error
        state.log(f"error: loading the models failed: {type(error).__name__}: {error}")
        if state.on_load_failure is not None:
            state.on_load_failure(error)
        return
    state.ready = True
    state.metrics.ready.set(1)
    state.log(f"ready: {', '.join(state.models)} loaded and compiled in {time.monotonic() - started:.1f} s")


def _routes(state):
    async def translate(request):
        return await _translate(request, state)

    async def predict(request):
        return await _predict(request, state, request.path_params["name"])

    async def models(request):
        return JSONResponse({"models": [_description(model) for model in state.models.values()]})

    async def model_status(request):
        model = _known_model(state, request.path_params["name"], "model_status")
        if isinstance(model, Response):
            return model
        status = "AVAILABLE" if state.ready else "LOADING"
        return JSONResponse({"model_version_status": [
            {"version": "1", "state": status, "status": {"error_code": "OK", "error_message": ""}}]})

    async def healthz(request):
        return JSONResponse({"status": "alive"})

    async def readyz(request):
        if state.ready and not state.draining:
            return JSONResponse({"status": "ready", "models": list(state.models)})
        reason = "draining" if state.draining else "failed to load" if state.load_error else "loading"
        return _error(503, f"not ready: {reason}", retry_after=5)

    async def metrics(request):
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    async def openapi(request):
        return JSONResponse(openapi_document(list(state.models)))

    return [
        Route("/v1/translate", translate, methods=["POST"]),
        Route("/v1/models/{name}:predict", predict, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{name}", model_status, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]


def _description(model):
    return {"name": model.name, "engine": model.engine, "beams": list(model.beams), "default_beam": model.default_beam,
            "max_new_tokens": list(model.limits)}


async def _translate(request, state):
    started = time.monotonic()
    model = "-"
    try:
        parsed = parse_translate(await _body(request, state.limits.max_body_bytes), state.models,
                                 state.limits.max_texts)
        model = parsed.model
        setting = Setting(parsed.beam, parsed.alignments, parsed.languages, parsed.max_new_tokens,
                          parsed.split_sentences)
        refused = dict(parsed.refused)
        sources = [None] * len(parsed.texts)
        if parsed.languages[:1] == (AUTO_SOURCE,):
            sources, detected_refusals = await _detected_sources(state.models[model], parsed.texts)
            refused.update(detected_refusals)
        if parsed.format == "html":
            pages = await _translated_pages(state, parsed.model, setting, parsed.texts, refused)
        else:
            results = await _translated_by_source(state, parsed.model, setting, parsed.texts, sources, refused)
    except RequestError as error:
        return _counted(state, "translate", model, _error(error.status, str(error), _retry_after(error)))
    answers = []
    for i, (text, text_warnings) in enumerate(zip(parsed.texts, parsed.text_warnings)):
        if i in refused:  # a text the model cannot take: its own error beside the others' translations
            answers.append({"source": text, "error": refused[i]})
            continue
        if parsed.format == "html":
            answers.append({"source": text, "hypotheses": [pages[i]], "format": "html"})
            continue
        result = results[i]
        translation = dataclasses.replace(result, hypotheses=result.hypotheses[: parsed.n_best],
                                          warnings=text_warnings + result.warnings)
        answers.append(translation.to_json(parsed.token_scores, parsed.attention_weights))
        if sources[i] is not None:
            answers[-1]["source_language"] = sources[i]
    state.metrics.latency.labels(model=model).observe(time.monotonic() - started)
    return _counted(state, "translate", model, JSONResponse({"model": model, "translations": answers}))


async def _detected_sources(model, texts):
    """Each text's detected source language and the refused texts' reasons, off the event loop."""
    try:
        return await asyncio.to_thread(model.source_languages, texts)
    except UserInputError as error:  # the detector is not installed
        raise RequestError(400, str(error).replace("--source-language auto", "'source_language': 'auto'"))


async def _translated_by_source(state, name, setting, texts, sources, refused):
    """`{index: Translation}` of each text not refused: one batch a source language (the request's own, or each
    detected one, `setting.languages` then carrying it)."""
    groups = {}
    for i, source in enumerate(sources):
        if i not in refused:
            groups.setdefault(source, []).append(i)
    settings = {source: setting if source is None else dataclasses.replace(setting, languages=(source,
                                                                                              setting.languages[1]))
                for source in groups}
    translated = await asyncio.gather(*(_translations(state, name, settings[source], [texts[i] for i in group])
                                        for source, group in groups.items()))
    return {i: result for group, results in zip(groups.values(), translated) for i, result in zip(group, results)}


async def _translated_pages(state, name, setting, texts, refused):
    """`{index: hypothesis}` of each HTML page not refused (`documents.html_text`: its passages translated
    together with their alignments, the markup put back); a page lxml cannot read is added to `refused`."""
    from keras_transformer_runtime.documents.html_text import HtmlError
    from keras_transformer_runtime.documents.html_text import html_passages
    from keras_transformer_runtime.documents.html_text import translate_html

    passages = {}
    for i, text in enumerate(texts):
        try:
            if i not in refused:
                passages[i] = html_passages(text)
        except HtmlError as error:
            refused[i] = str(error)
    given = [passage for page in passages.values() for passage in page]
    translated = iter(await _translations(state, name, dataclasses.replace(setting, alignments=True), given)
                      if given else ())
    pages = {}
    for i, page in passages.items():
        hypotheses = [next(translated).hypotheses[0] for _ in page]
        answers = iter((hypothesis.text, hypothesis.alignment) for hypothesis in hypotheses)
        html = "".join(piece for piece, _ in translate_html(texts[i], lambda chunk: [next(answers) for _ in chunk]))
        scores = [hypothesis.score for hypothesis in hypotheses]
        pages[i] = {"text": html, "score": float(sum(scores)),
                    "normalized_score": float(sum(h.normalized_score for h in hypotheses) / max(len(page), 1))}
    return pages


async def _predict(request, state, name):
    model = _known_model(state, name, "predict")
    if isinstance(model, Response):
        return model
    started = time.monotonic()
    try:
        texts, _, columnar = parse_predict(await _body(request, state.limits.max_body_bytes), state.limits.max_texts)
        if model.translates_between_languages:
            raise RequestError(400, f"{name!r} is an NLLB-200 model: POST /v1/translate with 'source_language' and "
                                    "'target_language'")
        texts, refused = language_checked(texts, model)
        if refused:
            raise refused_request(texts, refused)
        setting = Setting(model.default_beam, max_new_tokens=model.limits[0])  # the defaults: the first served
        results = await _translations(state, name, setting, texts)
    except RequestError as error:
        return _counted(state, "predict", name, _error(error.status, str(error), _retry_after(error)))
    translations = [result.text for result in results]
    state.metrics.latency.labels(model=name).observe(time.monotonic() - started)
    return _counted(state, "predict", name,
                    JSONResponse({"outputs": translations} if columnar else {"predictions": translations}))


def _known_model(state, name, endpoint):
    if name in state.models:
        return state.models[name]
    return _counted(state, endpoint, "-", _error(400, f"unknown model {name!r:.80}: this server serves "
                                                      f"{', '.join(sorted(state.models))}"))


async def _translations(state, name, setting, texts):
    """The `Translation` of each text, from the model's batcher; a `RequestError` when it cannot be had."""
    if state.draining:
        raise RequestError(503, "the server is shutting down")
    if not state.ready:
        raise RequestError(503, "the models are still loading" if state.load_error is None
                           else "the models failed to load")
    state.accepted += 1
    try:
        results = await asyncio.wait_for(state.batchers[name].submit(setting, texts), state.limits.timeout_seconds)
    except QueueFull as error:
        state.accepted -= 1
        raise RequestError(503, f"too busy: {error}")
    except asyncio.TimeoutError:
        state.timed_out += 1
        raise RequestError(504, f"not translated within {state.limits.timeout_seconds:g} s (serve --timeout)")
    except Exception as error:  # a bug or the engine's failure: logged whole, answered in one line
        state.failed += 1
        state.log("error: a batch failed:\n" + "".join(traceback.format_exception(error)).rstrip())
        raise RequestError(500, f"the engine failed on this batch: {type(error).__name__}: {str(error)[:200]}"
                                .replace("\n", " "))
    state.answered += 1
    state.metrics.sentences.labels(model=name).inc(len(texts))
    return results


async def _body(request, limit):
    """The request's body, read up to `limit` bytes (more: a 413, whatever Content-Length said)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body is {int(declared)} bytes; the most is {limit} (serve --max-body-bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body is over {limit} bytes (serve --max-body-bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def _retry_after(error):
    return 1 if error.status == 503 else None


def _error(status, message, retry_after=None):
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _counted(state, endpoint, model, response):
    state.metrics.requests.labels(endpoint=endpoint, model=model, code=str(response.status_code)).inc()
    return response


async def _http_error(request, error):
    """Starlette's own errors (404, 405) as `{"error": ...}` too."""
    message = {404: f"no such path: {request.method} {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(error.status_code, error.detail)
    return JSONResponse({"error": message}, status_code=error.status_code, headers=error.headers)


class _Authenticated:
    """ASGI middleware: every HTTP request but `OPEN_PATHS` must carry `Authorization: Bearer TOKEN`."""

    def __init__(self, app, token):
        self.app = app
        self.state = app.state
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):  # constant time: no guessing by timing
                response = JSONResponse({"error": "a bearer token is required (Authorization: Bearer TOKEN)"},
                                        status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
