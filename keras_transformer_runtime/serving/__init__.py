"""Serving translations over HTTP: `keras-transformer serve` (docs/serving.md).

Keras-free, beside the runtime it serves: a Starlette application
(`app.create_app`) run by uvicorn (`server.run_server`), one
`batcher.RequestBatcher` a model gathering the sentences of concurrent
requests into batches, the `served_model.ServedModel`s (a run's decoding
programs, one a beam width, with and without alignments), the request
checks (`request_bodies`), Prometheus metrics and the OpenAPI description;
and `server_process.ServerProcess`, a `serve` process on a free loopback
port for tests and benchmarks.
"""
