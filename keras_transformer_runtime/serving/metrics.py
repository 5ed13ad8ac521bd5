"""The server's Prometheus metrics (`GET /metrics`, the Prometheus text format, by `prometheus_client`).

Each server has its own registry, so two servers in one process (tests)
never share counts.
"""

import prometheus_client

# Seconds: from a lone short sentence on a CPU (a small fraction of a second) to a queued, long batch (seconds).
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServerMetrics:
    """Counters, gauges and histograms of one server.

    Example:

    >>> metrics = ServerMetrics()
    >>> metrics.requests.labels(endpoint="translate", model="es-en", code="200").inc()
    >>> b'keras_transformer_requests_total{code="200",endpoint="translate",model="es-en"} 1.0' in metrics.render()
    True
    """

    def __init__(self):
        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            "keras_transformer_requests", "HTTP requests answered, by endpoint, model and status code",
            ("endpoint", "model", "code"), registry=self.registry)
        self.sentences = prometheus_client.Counter(
            "keras_transformer_sentences", "Sentences translated", ("model",), registry=self.registry)
        self.latency = prometheus_client.Histogram(
            "keras_transformer_request_seconds", "Seconds from a translation request's body read to its answer",
            ("model",), buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_sentences = prometheus_client.Histogram(
            "keras_transformer_batch_sentences", "Sentences decoded together in one batch (of several requests)",
            ("model",), buckets=BATCH_BUCKETS, registry=self.registry)
        self.batch_seconds = prometheus_client.Histogram(
            "keras_transformer_batch_seconds", "Seconds a batch took to decode", ("model",),
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue_depth = prometheus_client.Gauge(
            "keras_transformer_queue_sentences", "Sentences waiting for a batch", ("model",), registry=self.registry)
        self.ready = prometheus_client.Gauge(
            "keras_transformer_ready", "1 once every model is loaded and compiled", registry=self.registry)

    def render(self):
        """The metrics in the Prometheus text format (bytes)."""
        return prometheus_client.generate_latest(self.registry)

    content_type = prometheus_client.CONTENT_TYPE_LATEST
