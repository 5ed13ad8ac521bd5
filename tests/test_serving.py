"""`keras-transformer serve` in process: the batcher, the request checks, the routes, the limits.

A stub engine behind the real text front end (`TextTranslator`) stands in
for the model (it answers each sentence reversed), so these run in the
contributor's loop in seconds; tests/test_serve_command.py starts real
servers on a trained run.
"""

import asyncio
import concurrent.futures
import json
import threading
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from keras_transformer_cli import main  # noqa: E402
from keras_transformer_runtime.hypotheses import NBest  # noqa: E402
from keras_transformer_runtime.serving.app import OPEN_PATHS  # noqa: E402
from keras_transformer_runtime.serving.app import ServerLimits  # noqa: E402
from keras_transformer_runtime.serving.app import create_app  # noqa: E402
from keras_transformer_runtime.serving.batcher import QueueFull  # noqa: E402
from keras_transformer_runtime.serving.batcher import RequestBatcher  # noqa: E402
from keras_transformer_runtime.serving.openapi import openapi_document  # noqa: E402
from keras_transformer_runtime.serving.request_bodies import RequestError  # noqa: E402
from keras_transformer_runtime.serving.request_bodies import parse_predict  # noqa: E402
from keras_transformer_runtime.serving.request_bodies import parse_translate  # noqa: E402
from keras_transformer_runtime.serving.served_model import ServedModel  # noqa: E402
from keras_transformer_runtime.special_tokens import END_ID  # noqa: E402
from keras_transformer_runtime.special_tokens import PAD_ID  # noqa: E402
from keras_transformer_runtime.special_tokens import UNK_ID  # noqa: E402
from keras_transformer_runtime.text_translator import TextTranslator  # noqa: E402

pytestmark = pytest.mark.backend_independent


_FIRST_PIECE = ord(" ") - 4  # " " is piece 4, after the special tokens


class _Characters:
    """A tokenizer of one piece a printable ASCII character; any other character is unknown (`UNK_ID`)."""

    def tokenize(self, texts):
        return [[ord(c) - _FIRST_PIECE if " " <= c <= "~" else UNK_ID for c in text] for text in texts]

    def id_to_token(self, token):
        return {END_ID: "</s>", UNK_ID: "<unk>"}.get(token) or chr(token + _FIRST_PIECE)

    def detokenize(self, rows):
        return ["".join("?" if token == UNK_ID else chr(token + _FIRST_PIECE) for token in row) for row in rows]


class _Reverser(TextTranslator):
    """The real text front end on `_Characters`: each sentence reversed, hypothesis k with k '!' more."""

    max_length, batch_size, bucketed, beam_width = 16, 8, False, 2

    def __init__(self, delay=0.0):
        self.delay = delay
        self.tokenizer = _Characters()

    def n_best(self, texts, n, **options):
        time.sleep(self.delay)
        return super().n_best(texts, n, **options)

    def decoder_layer_count(self):
        return 1

    def _decode_n_best(self, source, n, cross_attention=False):
        rows, width = source.shape
        tokens = np.zeros((rows, n, width + n), "int32")
        for row, ids in enumerate(source):
            reversed_ids = [int(token) for token in ids[::-1] if token != PAD_ID]
            for k in range(n):
                hypothesis = reversed_ids + [ord("!") - _FIRST_PIECE] * k + [END_ID]
                tokens[row, k, : len(hypothesis)] = hypothesis
        scores = np.tile(-1.0 - np.arange(n), (rows, 1))
        attention = np.full((rows, n, 1, width + n, width), 1 / width) if cross_attention else None
        return NBest(tokens, scores, scores + 0.5, np.zeros(tokens.shape), attention)


def _served(translator, beams=(2, 1), name="es-en"):
    return ServedModel(name, "unused", list(beams), lambda folder, setting, first: translator, engine="stub")


def _client(models, **limits):
    app = create_app(models, ServerLimits(**limits), log=lambda line: None)
    return TestClient(app, raise_server_exceptions=False)


def _wait_ready(client):
    deadline = time.monotonic() + 10
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.01)


def _run_batcher(decode, submissions, **options):
    """Submits each `(setting, items)` of `submissions` at once; returns what each caller got."""
    async def go():
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            batcher = RequestBatcher(decode, executor, **options)
            loop = asyncio.create_task(batcher.run())
            results = await asyncio.gather(*(batcher.submit(setting, items) for setting, items in submissions),
                                           return_exceptions=True)
            loop.cancel()
            return results, batcher

    return asyncio.run(go())


def test_concurrent_callers_are_decoded_together_and_each_gets_its_own_results_in_order():
    batches = []

    def decode(setting, items):
        batches.append(list(items))
        return [f"{item}/{setting}" for item in items]

    submissions = [("b4", [f"r{r}s{s}" for s in range(r % 3 + 1)]) for r in range(10)]
    results, batcher = _run_batcher(decode, submissions, max_batch_items=64, max_wait_seconds=0.05)
    assert results == [[f"{item}/b4" for item in items] for _, items in submissions]
    assert len(batches) == 1 and len(batches[0]) == sum(len(items) for _, items in submissions)
    assert batcher.queued_items == 0


def test_a_batch_takes_at_most_max_batch_items_and_never_mixes_settings():
    batches = []

    def decode(setting, items):
        batches.append((setting, list(items)))
        return list(items)

    submissions = [("beam4" if r % 2 else "beam1", [r, r]) for r in range(8)]
    results, _ = _run_batcher(decode, submissions, max_batch_items=4, max_wait_seconds=0.05)
    assert results == [items for _, items in submissions]
    assert all(len(items) <= 4 for _, items in batches)
    assert all(all(item % 2 == (setting == "beam4") for item in items) for setting, items in batches)


def test_a_full_queue_refuses_at_once_and_what_was_queued_is_still_answered():
    results, _ = _run_batcher(lambda setting, items: list(items), [("s", [1, 2]), ("s", [3]), ("s", [4, 5])],
                              max_queue_items=3, max_wait_seconds=0.05)
    assert results[0] == [1, 2] and results[1] == [3]
    assert isinstance(results[2], QueueFull)


def test_a_caller_that_gives_up_leaves_the_queue_and_its_sentences_are_never_decoded():
    decoded = []

    def decode(setting, items):
        decoded.extend(items)
        time.sleep(0.2)
        return list(items)

    async def go():
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            batcher = RequestBatcher(decode, executor, max_batch_items=1, max_wait_seconds=0)
            loop = asyncio.create_task(batcher.run())
            first = asyncio.create_task(batcher.submit("s", ["first"]))
            await asyncio.sleep(0.05)  # "first" is being decoded
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(batcher.submit("s", ["given up"]), 0.05)
            assert batcher.queued_items == 0
            assert await first == ["first"]
            assert await batcher.submit("s", ["after"]) == ["after"]
            loop.cancel()

    asyncio.run(go())
    assert decoded == ["first", "after"]


def test_an_error_in_a_batch_reaches_its_callers_and_the_batcher_goes_on():
    def decode(setting, items):
        if "bad" in items:
            raise RuntimeError("engine failed")
        return list(items)

    results, _ = _run_batcher(decode, [("s", ["bad"]), ("t", ["good"])], max_wait_seconds=0)
    assert isinstance(results[0], RuntimeError) and results[1] == ["good"]


def test_the_server_answers_translate_jsonl_fields_cut_to_n_best_with_each_sentences_warnings():
    with _client({"es-en": _served(_Reverser())}) as client:
        _wait_ready(client)
        texts = ["hola amigo", "", "uno dos tres cuatro cinco seis siete"]
        response = client.post("/v1/translate", json={"text": texts, "n_best": 2, "token_scores": True})
        assert response.status_code == 200, response.text
        answer = response.json()
        whole = client.post("/v1/translate", json={"text": texts[2], "sentence_splitting": False}).json()
    assert answer["model"] == "es-en"
    first, blank, long = answer["translations"]
    assert [h["text"] for h in first["hypotheses"]] == ["ogima aloh", "ogima aloh!"]
    assert first["source"] == "hola amigo" and "warnings" not in first
    assert set(first["hypotheses"][0]) == {"text", "score", "normalized_score", "tokens", "token_scores"}
    assert [h["text"] for h in blank["hypotheses"]] == [""] and "warnings" not in blank
    assert long["warnings"] == ["1 sentence longer than the model takes was cut at clause boundaries and "
                                "translated in pieces"]
    assert whole["translations"][0]["warnings"] == ["longer than max_length=16 tokens (36); truncated"]


def test_a_paragraph_is_answered_as_one_translation_of_its_sentences_with_their_segments():
    with _client({"es-en": _served(_Reverser())}) as client:
        _wait_ready(client)
        paragraph = "Hola amigo.  Adios.\nSi."
        answer = client.post("/v1/translate", json={"text": [paragraph, "uno"]}).json()["translations"]
        whole = client.post("/v1/translate", json={"text": paragraph, "sentence_splitting": False}).json()
        refused = client.post("/v1/translate", json={"text": paragraph, "sentence_splitting": "no"})
    best = answer[0]["hypotheses"][0]
    assert answer[0]["source"] == paragraph and best["text"] == ".ogima aloH  .soidA\n.iS"
    assert [paragraph[a:b] for a, b in (segment["source"] for segment in best["segments"])] == [
        "Hola amigo.", "Adios.", "Si."]
    assert [best["text"][a:b] for a, b in (segment["target"] for segment in best["segments"])] == [
        ".ogima aloH", ".soidA", ".iS"]
    assert answer[1]["hypotheses"][0]["text"] == "onu" and "segments" not in answer[1]["hypotheses"][0]
    assert whole["translations"][0]["hypotheses"][0]["text"] == paragraph[:16][::-1]  # whole, cut to its positions
    assert refused.status_code == 400 and "true or false" in refused.json()["error"]


def test_tensorflow_serving_clients_get_the_best_translation_in_rows_or_columns():
    with _client({"es-en": _served(_Reverser())}) as client:
        _wait_ready(client)
        rows = client.post("/v1/models/es-en:predict", json={"instances": ["abc", {"b64": "eHl6"}]})
        columns = client.post("/v1/models/es-en:predict", json={"inputs": {"texts": ["abc"]}})
        status = client.get("/v1/models/es-en")
    assert rows.json() == {"predictions": ["cba", "zyx"]}
    assert columns.json() == {"outputs": ["cba"]}
    assert status.json()["model_version_status"][0]["state"] == "AVAILABLE"


@pytest.mark.parametrize("body, status, words", [
    (b'{"text": ["a"], "beam": 3}', 400, "not served"),
    (b'{"text": ["a"], "n_best": 5}', 400, "n_best"),
    (b'{"text": ["a"], "model": "../../etc/passwd"}', 400, "unknown model"),
    (b'{"text": ["a"], "beams": 2}', 400, "unknown field 'beams'"),
    (b'{"text": ["a"], "alignments": "yes"}', 400, "true or false"),
    (b'{"text": [1]}', 400, "must be a string"),
    (b'\xff\xfe{}', 400, "not UTF-8"),
    (b'[1, 2]', 400, "JSON object"),
    (b'{"text": ' + b'[' * 1500 + b']' * 1500 + b'}', 400, "nested too deep"),
    (json.dumps({"text": ["a"] * 9}).encode(), 413, "--max-texts"),
    (json.dumps({"text": "a" * 5000}).encode(), 413, "--max-body-bytes"),
])
def test_bad_requests_get_a_4xx_with_a_one_line_reason_and_the_server_stays_up(body, status, words):
    with _client({"es-en": _served(_Reverser())}, max_texts=8, max_body_bytes=4096) as client:
        _wait_ready(client)
        response = client.post("/v1/translate", content=body)
        assert response.status_code == status
        error = response.json()["error"]
        assert words in error and "\n" not in error
        assert client.post("/v1/translate", json={"text": "ok"}).status_code == 200


def test_each_lone_surrogate_is_replaced_by_one_replacement_character_and_warned_about_not_a_500():
    with _client({"es-en": _served(_Reverser())}) as client:
        _wait_ready(client)
        response = client.post("/v1/translate", content=b'{"text": ["a\\ud800b", "a\\udfff\\ud800b"]}')
    assert response.status_code == 200
    one, two = response.json()["translations"]
    assert one["source"] == "a\ufffdb" and two["source"] == "a\ufffd\ufffdb"
    assert one["warnings"] == two["warnings"] == ["held lone surrogates (\\ud800-\\udfff escapes); replaced by U+FFFD"]


def test_each_sentences_warnings_come_in_its_answer_and_none_through_pythons_warnings():
    texts = ["我爱你中国", "hola", "\ud800" + "x" * 20]
    with _client({"es-en": _served(_Reverser())}) as client:
        _wait_ready(client)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            response = client.post("/v1/translate", content=json.dumps({"text": texts}).encode())
            predicted = client.post("/v1/models/es-en:predict", content=json.dumps({"instances": texts}).encode())
    assert response.status_code == predicted.status_code == 200, response.text
    unknown, plain, surrogate_and_long = response.json()["translations"]
    assert unknown["warnings"] == ["5 of 5 characters are unknown to the vocabulary, so the translation is a guess"]
    assert "warnings" not in plain
    assert surrogate_and_long["warnings"] == ["held lone surrogates (\\ud800-\\udfff escapes); replaced by U+FFFD",
                                              "1 sentence longer than the model takes was cut at clause boundaries "
                                              "and translated in pieces"]
    assert predicted.json()["predictions"][1] == "aloh"
    assert not [warning for warning in caught if issubclass(warning.category, UserWarning)], caught


def test_a_request_over_its_timeout_gets_504_and_a_full_queue_503_with_retry_after():
    slow = _Reverser(delay=0.5)
    with _client({"es-en": _served(slow)}, timeout_seconds=0.1, max_queue_sentences=1, max_texts=1,
                 batch_wait_seconds=0) as client:
        _wait_ready(client)
        assert client.post("/v1/translate", json={"text": "uno"}).status_code == 504
        statuses = []
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for response in pool.map(lambda i: client.post("/v1/translate", json={"text": f"s{i}"}), range(4)):
                statuses.append(response.status_code)
                if response.status_code == 503:
                    assert response.headers["retry-after"] == "1"
        assert 503 in statuses
        metrics = client.get("/metrics").text
    assert 'code="504"' in metrics and 'code="503"' in metrics


def test_requests_wait_for_the_models_with_503_until_ready():
    gate = threading.Event()

    def load(folder, setting, first):
        gate.wait(10)
        return _Reverser()

    with _client({"es-en": ServedModel("es-en", "unused", [1], load, engine="stub")}) as client:
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200
        early = client.post("/v1/translate", json={"text": "hola"})
        gate.set()
        _wait_ready(client)
        assert client.post("/v1/translate", json={"text": "hola"}).status_code == 200
    assert early.status_code == 503 and "loading" in early.json()["error"]


def test_with_a_token_every_path_but_the_probes_needs_it():
    app = create_app({"es-en": _served(_Reverser())}, token="s3cret", log=lambda line: None)
    with TestClient(app) as client:
        _wait_ready(client)
        assert client.post("/v1/translate", json={"text": "a"}).status_code == 401
        wrong = client.post("/v1/translate", json={"text": "a"}, headers={"Authorization": "Bearer s3cre"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        right = client.post("/v1/translate", json={"text": "a"}, headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert client.get("/metrics").status_code == 401
        assert all(client.get(path).status_code == 200 for path in OPEN_PATHS)


def test_several_models_are_chosen_by_name_only():
    models = {"a": _served(_Reverser(), name="a"), "b": _served(_Reverser(), name="b", beams=(1,))}
    with _client(models) as client:
        _wait_ready(client)
        assert client.post("/v1/translate", json={"text": "x"}).status_code == 400  # which one?
        assert client.post("/v1/translate", json={"model": "b", "text": "xy"}).json()["translations"][0][
            "hypotheses"][0]["text"] == "yx"
        assert [m["name"] for m in client.get("/v1/models").json()["models"]] == ["a", "b"]


def test_the_openapi_description_covers_every_route_and_field():
    app = create_app({"es-en": _served(_Reverser())}, log=lambda line: None)
    routes = {route.path for route in app.routes}
    document = openapi_document(["es-en"])
    assert set(document["paths"]) == routes
    translate = document["paths"]["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(translate["properties"]) == {"model", "text", "beam", "n_best", "max_new_tokens", "alignments",
                                            "attention_weights", "token_scores", "target_language", "source_language",
                                            "sentence_splitting", "format"}


def _json_values():
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=False),
                        st.text(max_size=30))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.sampled_from(
                                                             ["text", "model", "beam", "n_best", "max_new_tokens",
                                                              "alignments", "token_scores", "instances", "inputs",
                                                              "b64", "texts", "x"]), inner, max_size=4)), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=200), _json_values().map(lambda value: json.dumps(value).encode())))
def test_random_bodies_are_parsed_or_refused_with_a_4xx(body):
    models = {"es-en": _served(_Reverser())}
    for parse in (lambda: parse_translate(body, models, 8), lambda: parse_predict(body, 8)):
        try:
            parse()
        except RequestError as error:
            assert 400 <= error.status < 500 and "\n" not in str(error)


@pytest.fixture(scope="module")
def stub_server():
    with _client({"es-en": _served(_Reverser())}, max_texts=8) as client:
        _wait_ready(client)
        yield client


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=200), _json_values().map(lambda value: json.dumps(value).encode())),
       path=st.sampled_from(["/v1/translate", "/v1/models/es-en:predict"]))
def test_random_bodies_over_http_get_a_4xx_or_an_answer_never_a_500(body, path, stub_server):
    response = stub_server.post(path, content=body)
    assert response.status_code == 200 or 400 <= response.status_code < 500, response.text
    assert stub_server.get("/healthz").status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "example.org"])
def test_listening_beyond_loopback_without_a_token_is_refused_at_start(host, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--model", "runs/none", "--host", host])
    assert exit_info.value.code == 2
    assert "--token-file" in capsys.readouterr().err


def test_a_busy_batcher_takes_whole_engine_batches_and_leaves_the_rest_to_go_first_next():
    batches = []

    def decode(setting, items):
        batches.append(list(items))
        return list(items)

    results, _ = _run_batcher(decode, [("s", [i]) for i in range(11)], max_wait_seconds=0.05, rows_multiple=4)
    assert results == [[i] for i in range(11)]
    assert batches == [list(range(8)), [8, 9, 10]]


class _Failing(_Reverser):
    def n_best(self, texts, n, **options):
        if "boom" in texts:
            raise RuntimeError("engine\nfailed")
        return super().n_best(texts, n, **options)


def test_an_engine_failure_is_a_one_line_500_logged_whole_and_the_server_goes_on():
    lines = []
    app = create_app({"es-en": _served(_Failing())}, ServerLimits(batch_wait_seconds=0), log=lines.append)
    with TestClient(app, raise_server_exceptions=False) as client:
        _wait_ready(client)
        failed = client.post("/v1/translate", json={"text": "boom"})
        assert client.post("/v1/translate", json={"text": "fine"}).status_code == 200
    assert failed.status_code == 500 and failed.json()["error"] == (
        "the engine failed on this batch: RuntimeError: engine failed")
    assert any("Traceback" in line and "RuntimeError" in line for line in lines)


class _Limited(_Reverser):
    """A `_Reverser` whose hypotheses stop at `max_new_tokens` tokens, as a decoding program of that limit."""

    def __init__(self, max_new_tokens):
        super().__init__()
        self.max_new_tokens = max_new_tokens

    def _decode_n_best(self, source, n, cross_attention=False):
        best = super()._decode_n_best(source, n, cross_attention)
        tokens = best.tokens[:, :, : self.max_new_tokens]
        attention = None if best.cross_attention is None else best.cross_attention[:, :, :, : self.max_new_tokens]
        return NBest(tokens, best.scores, best.normalized_scores, best.token_scores[:, :, : self.max_new_tokens],
                     attention)


def test_a_request_chooses_one_of_the_length_limits_served_and_the_first_is_the_default():
    loaded = []

    def load(folder, setting, first):
        loaded.append(setting.max_new_tokens)
        return _Limited(setting.max_new_tokens)

    served = ServedModel("es-en", "unused", [2], load, engine="stub", limits=[6, 3])
    with _client({"es-en": served}) as client:
        _wait_ready(client)
        default = client.post("/v1/translate", json={"text": "hola amigo"})
        short = client.post("/v1/translate", json={"text": "hola amigo", "max_new_tokens": 3})
        refused = client.post("/v1/translate", json={"text": "hola amigo", "max_new_tokens": 5})
        wrong = client.post("/v1/translate", json={"text": "hola amigo", "max_new_tokens": "3"})
        predicted = client.post("/v1/models/es-en:predict", json={"instances": ["hola amigo"]})
        described = client.get("/v1/models").json()["models"][0]
    assert sorted(set(loaded)) == [3, 6]  # each limit its own program, loaded at start
    assert default.json()["translations"][0]["hypotheses"][0]["text"] == "ogima "
    assert short.json()["translations"][0]["hypotheses"][0]["text"] == "ogi"
    assert refused.status_code == 400 and "'max_new_tokens' 5 is not served" in refused.json()["error"]
    assert "6 or 3" in refused.json()["error"]
    assert wrong.status_code == 400 and "must be an integer" in wrong.json()["error"]
    assert predicted.json() == {"predictions": ["ogima "]}
    assert described["max_new_tokens"] == [6, 3]


def test_serve_loads_each_length_limit_given_and_refuses_one_the_model_cannot_take(trained_run):
    from keras_transformer.translation import Translator
    from keras_transformer_cli import build_parser
    from keras_transformer_cli.serve import _served_models
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.serving.served_model import Setting

    def served(*limits):
        args = build_parser().parse_args(["serve", "--model", f"es-en={trained_run}", "--engine", "keras",
                                          "--beam", "1", "--max-new-tokens", *map(str, limits)])
        return _served_models(args, log=lambda line: None)["es-en"]

    model = served(12, 3)
    model.load()
    sentence = ["Y dijo Dios: Sea la luz."]
    for limit in (12, 3):
        expected = Translator.from_directory(str(trained_run), beam_width=1, max_new_tokens=limit)(sentence)
        assert [t.text for t in model.translate(Setting(1, max_new_tokens=limit), sentence)] == expected
    with pytest.raises(UserInputError, match="--max-new-tokens 999"):
        served(12, 999)


def test_a_text_the_model_cannot_take_gets_its_own_error_beside_the_others_translations():
    translator = _Reverser()
    translator.tokenizer.language_codes = ("fra", "por")
    with _client({"es-romance": _served(translator, name="es-romance")}) as client:
        _wait_ready(client)
        answer = client.post("/v1/translate", json={"text": ["Hola.", ">>fra<< Si.", ">>xyz<< No."]})
        all_refused = client.post("/v1/translate", json={"text": ["Hola."]})
        predicted = client.post("/v1/models/es-romance:predict", json={"instances": [">>por<< Si.", "Hola."]})
        wrong_field = client.post("/v1/translate", json={"text": ["Hola."], "target_language": "xyz"})
    assert answer.status_code == 200, answer.text
    missing, translated, unknown = answer.json()["translations"]
    assert missing["source"] == "Hola." and "start each sentence with its code" in missing["error"]
    assert translated["hypotheses"][0]["text"] == ".iS <<arf>>"
    assert unknown["source"] == ">>xyz<< No." and "'xyz' is not one this model writes" in unknown["error"]
    assert all_refused.status_code == 200 and "error" in all_refused.json()["translations"][0]
    assert predicted.status_code == 400 and "1 of 2 texts refused: text 1 ('Hola.')" in predicted.json()["error"]
    assert wrong_field.status_code == 400 and "'xyz' is not one this model writes" in wrong_field.json()["error"]
