"""Batching across requests: the sentences of concurrent callers decoded together.

A server's requests arrive one by one, each with a few sentences; the
decoding program runs best on a batch. `RequestBatcher` keeps a bounded
queue of waiting requests and one loop that takes, whenever the decoder is
free, the oldest request and every other waiting one of the same setting,
up to a number of sentences; when the decoder is idle it first waits a few
milliseconds for company. The batch runs in a worker thread (the event
loop keeps answering), and each caller gets exactly its own results, in
its own order. A caller that gives up (its timeout) leaves the queue; a
full queue refuses at once (`QueueFull`), so load never turns into a hang.

The design is TensorFlow Serving's batching (`max_batch_size`,
`batch_timeout_micros`) and CTranslate2's `BufferedTranslationWrapper`
(flush when full or on a timeout), in Python's asyncio.
"""

import asyncio
import collections
import dataclasses
import time


class QueueFull(Exception):
    """The batcher holds as many sentences as it may: try again later (HTTP 503)."""


@dataclasses.dataclass
class _Waiting:
    setting: object
    items: list
    future: asyncio.Future
    arrived: float


class RequestBatcher:
    """Gathers the items (sentences) of concurrent requests into batches for one decoding function.

    Args:
        decode: `decode(setting, items) -> results`, one result per item in
            order; runs in `executor`, one batch at a time. Requests of
            different `setting`s (e.g. beam widths) are never mixed.
        executor: a `concurrent.futures.Executor` (one worker: batches of
            all models then take turns on the cores).
        max_batch_items: int, the most items a batch takes from several
            requests (a larger request runs alone, whole).
        max_wait_seconds: float, how long an idle decoder waits after the
            first request for others to join it (0: never).
        max_queue_items: int, the most items waiting; `submit` beyond it
            raises `QueueFull`.
        on_batch: None, or called with `(items, seconds)` after each batch
            (metrics).
        rows_multiple: int, the rows the engine decodes at once (a batch of
            fewer is padded up to them): when more are waiting, a batch takes
            a multiple of them, and the rest go first into the next batch
            instead of costing a padded run of their own.

    Example:

    >>> import asyncio, concurrent.futures
    >>> async def main():
    ...     with concurrent.futures.ThreadPoolExecutor(1) as executor:
    ...         batcher = RequestBatcher(lambda setting, items: [item * setting for item in items], executor)
    ...         loop = asyncio.create_task(batcher.run())
    ...         results = await asyncio.gather(batcher.submit(2, [1, 2]), batcher.submit(2, [3]))
    ...         loop.cancel()
    ...         return results
    >>> asyncio.run(main())
    [[2, 4], [6]]
    """

    def __init__(self, decode, executor, max_batch_items=64, max_wait_seconds=0.005, max_queue_items=1024,
                 on_batch=None, rows_multiple=1):
        if max_batch_items < 1 or max_queue_items < 1 or max_wait_seconds < 0:
            raise ValueError(f"max_batch_items and max_queue_items must be >= 1 and max_wait_seconds >= 0, got "
                             f"{max_batch_items}, {max_queue_items}, {max_wait_seconds}.")
        self._decode = decode
        self._executor = executor
        self.max_batch_items = int(max_batch_items)
        self.max_wait_seconds = float(max_wait_seconds)
        self.max_queue_items = int(max_queue_items)
        self._on_batch = on_batch
        self.rows_multiple = int(rows_multiple)
        self._waiting = collections.deque()
        self._queued_items = 0
        self._arrival = None

    @property
    def queued_items(self):
        """How many items wait for a batch (not counting the batch being decoded)."""
        return self._queued_items

    async def submit(self, setting, items):
        """The results of `items`, decoded with `setting` in a batch with other callers' items.

        Cancelling the caller (e.g. `asyncio.wait_for`'s timeout) takes its
        items out of the queue, or drops their results if they are being
        decoded.

        Raises:
            QueueFull: the queue cannot take `len(items)` more items.
            Exception: whatever `decode` raised for the batch.
        """
        items = list(items)
        if not items:
            return []
        if self._queued_items + len(items) > self.max_queue_items:
            raise QueueFull(f"{self._queued_items} sentences are waiting, the most this server queues is "
                            f"{self.max_queue_items}")
        loop = asyncio.get_running_loop()
        waiting = _Waiting(setting, items, loop.create_future(), time.monotonic())
        self._waiting.append(waiting)
        self._queued_items += len(items)
        self._wake()
        try:
            return await waiting.future
        finally:
            if not waiting.future.done():  # cancelled while queued or while decoded
                waiting.future.cancel()
            self._drop_cancelled()

    def _wake(self):
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(None)

    def _drop_cancelled(self):
        for waiting in [waiting for waiting in self._waiting if waiting.future.done()]:
            self._waiting.remove(waiting)
            self._queued_items -= len(waiting.items)

    async def _wait_for_arrival(self, timeout=None):
        """Returns when a request arrives (or after `timeout` seconds)."""
        self._arrival = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._arrival), timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self._arrival = None

    def _next_batch(self):
        """The oldest request and the others of its setting that fit in a batch, taken off the queue."""
        self._drop_cancelled()
        setting = self._waiting[0].setting
        limit = self.max_batch_items
        available = self._same_setting_items()
        if available >= self.rows_multiple > 1:
            limit = min(limit, available - available % self.rows_multiple)
        batch, size = [], 0
        for waiting in list(self._waiting):
            if waiting.setting != setting:
                continue
            if batch and size + len(waiting.items) > limit:
                break
            batch.append(waiting)
            size += len(waiting.items)
            self._waiting.remove(waiting)
            self._queued_items -= len(waiting.items)
        return batch

    def _same_setting_items(self):
        setting = self._waiting[0].setting
        return sum(len(waiting.items) for waiting in self._waiting if waiting.setting == setting)

    async def run(self):
        """The batching loop: run it as a task for as long as requests may come (cancel it to stop)."""
        loop = asyncio.get_running_loop()
        while True:
            self._drop_cancelled()
            if not self._waiting:
                await self._wait_for_arrival()
                continue
            # An idle decoder waits a moment for company; a busy one has gathered it meanwhile.
            deadline = self._waiting[0].arrived + self.max_wait_seconds
            while self._same_setting_items() < self.max_batch_items and time.monotonic() < deadline:
                await self._wait_for_arrival(deadline - time.monotonic())
                self._drop_cancelled()
                if not self._waiting:
                    break
            if not self._waiting:
                continue
            batch = self._next_batch()
            items = [item for waiting in batch for item in waiting.items]
            started = time.monotonic()
            try:
                results = await loop.run_in_executor(self._executor, self._decode, batch[0].setting, items)
                if len(results) != len(items):
                    raise RuntimeError(f"decode gave {len(results)} results for {len(items)} items")
            except Exception as error:  # the batch's callers get the error; the loop goes on
                for waiting in batch:
                    if not waiting.future.done():
                        waiting.future.set_exception(error)
                continue
            if self._on_batch is not None:
                self._on_batch(len(items), time.monotonic() - started)
            start = 0
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_result(list(results[start : start + len(waiting.items)]))
                start += len(waiting.items)
