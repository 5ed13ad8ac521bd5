"""`keras-transformer serve` as an application meets it: a real server process on a free loopback port.

Each server runs the compiled engine on the trained fixture run and is
talked to with a real HTTP client (httpx); every process is bounded by a
timeout and killed when a test ends, however it ends. Marked `end_to_end`
(CI runs them) and `backend_independent` (the compiled engine is JAX's
whatever KERAS_BACKEND says).
"""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
pytest.importorskip("jax")
from keras_transformer_runtime.serving.server_process import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.end_to_end, pytest.mark.backend_independent]

START_TIMEOUT = 300  # the first server writes its programs (a child translate each) and compiles them
REQUEST_TIMEOUT = 60
SENTENCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra.", "Y fue la tarde.",
             "Y vio Dios que era bueno.", "", "Hola."]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One program cache for the module's servers and CLI calls: the first server writes the programs."""
    return tmp_path_factory.mktemp("serve-cache")


def _environment(cache):
    return {**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(cache)}


# `keras-transformer` that says at exit whether it imported Keras (the compiled engine serves without it).
_SAYS_WHETHER_KERAS_WAS_IMPORTED = (
    "import sys\nfrom keras_transformer_cli import main\ncode = main(sys.argv[1:])\n"
    "print('keras-transformer: keras imported:', 'keras' in sys.modules, file=sys.stderr)\nsys.exit(code)\n")


def _serving(trained_run, cache, *flags):
    """`serve --port 0` on the trained run, ready inside a `with` (a `ServerProcess`); always stopped and reaped."""
    return ServerProcess(["--model", f"es-en={trained_run}", *flags], env=_environment(cache),
                         program=[sys.executable, "-c", _SAYS_WHETHER_KERAS_WAS_IMPORTED],
                         start_timeout=START_TIMEOUT, stop_timeout=REQUEST_TIMEOUT)


def _cli_jsonl(trained_run, cache, texts, *flags):
    result = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(trained_run),
                             "--format", "jsonl", *flags, *texts], capture_output=True, text=True,
                            timeout=START_TIMEOUT, env=_environment(cache))
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def server(trained_run, cache):
    with _serving(trained_run, cache, "--beam", "4", "1") as running:
        yield running


def test_the_server_says_what_it_serves_and_where(server):
    log = server.log()
    assert "'es-en'" in log and "compiled engine (jax" in log and "beam 4 and 1" in log
    assert server.url.startswith("http://127.0.0.1:")


def test_answers_equal_the_command_lines(server, trained_run, cache):
    texts = SENTENCES[:4]
    answer = httpx.post(f"{server.url}/v1/translate", json={"text": texts, "n_best": 2, "token_scores": True},
                        timeout=REQUEST_TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.json()["translations"] == _cli_jsonl(trained_run, cache, texts, "--n-best", "2", "--token-scores")
    greedy = httpx.post(f"{server.url}/v1/translate", json={"text": texts, "beam": 1, "alignments": True},
                        timeout=REQUEST_TIMEOUT)
    assert greedy.json()["translations"] == _cli_jsonl(trained_run, cache, texts, "--beam", "1", "--alignments")
    predict = httpx.post(f"{server.url}/v1/models/es-en:predict", json={"instances": texts}, timeout=REQUEST_TIMEOUT)
    assert predict.json()["predictions"] == [translation["hypotheses"][0]["text"]
                                             for translation in answer.json()["translations"]]


def test_concurrent_callers_get_only_their_own_answers_in_their_own_order(server):
    alone = {text: httpx.post(f"{server.url}/v1/translate", json={"text": text}, timeout=REQUEST_TIMEOUT).json()
             ["translations"][0]["hypotheses"][0]["text"] for text in SENTENCES}
    requests = [[SENTENCES[(i + k) % len(SENTENCES)] for k in range(i % 4 + 1)] for i in range(24)]

    def ask(texts):
        with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
            return client.post(f"{server.url}/v1/translate", json={"text": texts})

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(ask, requests))
    for texts, answer in zip(requests, answers):
        assert answer.status_code == 200, answer.text
        translations = answer.json()["translations"]
        assert [t["source"] for t in translations] == texts
        assert [t["hypotheses"][0]["text"] for t in translations] == [alone[text] for text in texts]
    metrics = httpx.get(f"{server.url}/metrics").text
    batches = float(re.search(r'keras_transformer_batch_sentences_count\{model="es-en"\} (\S+)', metrics).group(1))
    requests_served = float(re.search(r'keras_transformer_requests_total\{code="200",endpoint="translate",'
                                      r'model="es-en"\} (\S+)', metrics).group(1))
    assert batches < requests_served  # some requests shared a batch


_BODIES = st.one_of(
    st.binary(max_size=300),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=40)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
                     st.sampled_from(["text", "model", "beam", "n_best", "alignments", "token_scores", "instances",
                                      "inputs", "b64"]), inner, max_size=4)), max_leaves=10).map(
        lambda value: json.dumps(value).encode()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_BODIES, path=st.sampled_from(["/v1/translate", "/v1/models/es-en:predict", "/v1/models/x:predict"]))
def test_random_bodies_get_an_answer_or_a_4xx_and_the_server_stays_up(body, path, server):
    answer = httpx.post(f"{server.url}{path}", content=body, timeout=REQUEST_TIMEOUT)
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, answer.text
    assert "error" in answer.json() or answer.status_code == 200
    assert server.process.poll() is None and httpx.get(f"{server.url}/healthz").status_code == 200


def test_listening_beyond_loopback_without_a_token_is_refused_before_anything_loads(trained_run, cache):
    result = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "serve", "--model", str(trained_run),
                             "--host", "0.0.0.0"], capture_output=True, text=True, timeout=REQUEST_TIMEOUT,
                            env=_environment(cache))
    assert result.returncode == 2 and "--token-file" in result.stderr and "listening" not in result.stderr


def test_a_full_queue_gives_503_with_retry_after(trained_run, cache):
    # The idle decoder waits 2 s for company, holding the first request's 2 sentences: the queue is full.
    with _serving(trained_run, cache, "--max-queue-sentences", "2", "--max-texts", "2", "--batch-wait-ms",
                  "2000") as running:
        def ask(i):
            time.sleep(0.2 * (i > 0))  # the first is queued first
            return httpx.post(f"{running.url}/v1/translate", json={"text": SENTENCES[:2]}, timeout=REQUEST_TIMEOUT)

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(ask, range(6)))
    assert answers[0].status_code == 200
    refused = [answer for answer in answers[1:] if answer.status_code == 503]
    assert refused and all(answer.headers["retry-after"] == "1" and "too busy" in answer.json()["error"]
                           for answer in refused)


def test_sigterm_under_load_answers_every_accepted_request_and_exits_0_without_keras(trained_run, cache):
    with _serving(trained_run, cache) as running:
        statuses, stop = [], threading.Event()

        def client_loop(k):
            with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
                for i in range(40):  # bounded: 40 requests a client at most
                    if stop.is_set():
                        return
                    try:
                        answer = client.post(f"{running.url}/v1/translate", json={"text": SENTENCES[(k + i) % 4]})
                    except httpx.TransportError:  # refused or closed before the server took the request
                        statuses.append("not taken")
                        continue
                    statuses.append(answer.status_code)
                    if answer.status_code == 200:
                        assert answer.json()["translations"][0]["source"] == SENTENCES[(k + i) % 4]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            clients = [pool.submit(client_loop, k) for k in range(8)]
            deadline = time.monotonic() + 60
            while statuses.count(200) < 16 and time.monotonic() < deadline:
                time.sleep(0.01)
            running.process.send_signal(signal.SIGTERM)
            code = running.process.wait(timeout=REQUEST_TIMEOUT)
            stop.set()
            for client in clients:
                client.result(timeout=REQUEST_TIMEOUT)
        stopped = re.search(r"stopped: (\d+) translation requests taken, (\d+) answered, (\d+) timed out, "
                            r"(\d+) failed", running.log())
    assert code == 0, running.log()
    assert stopped, running.log()
    assert "keras imported: False" in running.log()
    taken, answered, timed_out, failed = map(int, stopped.groups())
    assert taken == answered == statuses.count(200) and timed_out == failed == 0
    assert set(statuses) <= {200, 503, "not taken"}, statuses  # 503: "shutting down", never taken


def test_a_server_that_cannot_start_is_reported_with_its_log_and_reaped(tmp_path, cache):
    server = ServerProcess(["--model", str(tmp_path / "no-run")], env=_environment(cache), start_timeout=START_TIMEOUT)
    with pytest.raises(RuntimeError, match="exited with 2 before it was ready") as raised:
        with server:
            pytest.fail("the body ran without a server")
    assert server.process.returncode == 2 and "no-run" in str(raised.value)


def test_the_server_is_stopped_and_reaped_when_the_body_raises(trained_run, cache):
    with pytest.raises(KeyError):
        with _serving(trained_run, cache) as running:
            raise KeyError("the body failed")
    assert running.process.returncode == 0, running.log()  # SIGTERM: drained, a clean exit
    assert "stopped: 0 translation requests taken" in running.log()


def test_a_token_guards_the_server_when_given(trained_run, cache, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("correct-horse\n")
    with _serving(trained_run, cache, "--token-file", str(token_file)) as running:
        anonymous = httpx.post(f"{running.url}/v1/translate", json={"text": "Hola."}, timeout=REQUEST_TIMEOUT)
        signed = httpx.post(f"{running.url}/v1/translate", json={"text": "Hola."}, timeout=REQUEST_TIMEOUT,
                            headers={"Authorization": "Bearer correct-horse"})
    assert anonymous.status_code == 401 and signed.status_code == 200


def test_the_load_benchmark_runs_in_miniature_and_reports_both_servers(trained_run, tmp_path, cache, monkeypatch):
    from benchmarks import serving_load

    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE_DIR", str(cache))
    serving_load.main(["--model", str(trained_run), "--out", str(tmp_path), "--requests", "6", "--clients", "1", "3",
                       "--seconds", "60"])
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(row["mode"].split()[0], row["clients"], row["requests"], row["failures"]) for row in results["rows"]] == [
        ("batched", 1, 6, 0), ("batched", 3, 6, 0), ("one", 1, 6, 0), ("one", 3, 6, 0)]
    assert all(same == [6, 6] for same in results["same_as_offline"].values())
    assert "| offline, evaluate's program |" in (tmp_path / "results.md").read_text()


def test_the_keras_engine_serves_the_compiled_engines_translations(server, trained_run, cache):
    texts = SENTENCES[:4]
    compiled = httpx.post(f"{server.url}/v1/translate", json={"text": texts, "n_best": 2}, timeout=REQUEST_TIMEOUT)
    with _serving(trained_run, cache, "--engine", "keras") as running:
        assert "on the Keras model (" in running.log()
        keras_engine = httpx.post(f"{running.url}/v1/translate", json={"text": texts, "n_best": 2},
                                  timeout=REQUEST_TIMEOUT)
    assert keras_engine.status_code == 200, keras_engine.text
    ours, theirs = keras_engine.json()["translations"], compiled.json()["translations"]
    assert [[h["text"] for h in t["hypotheses"]] for t in ours] == [[h["text"] for h in t["hypotheses"]] for t in theirs]
    for mine, other in zip(ours, theirs):
        for a, b in zip(mine["hypotheses"], other["hypotheses"]):
            assert abs(a["score"] - b["score"]) < 1e-3
