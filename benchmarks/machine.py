"""The machine and the process `benchmarks.run` measures on: what the device is, its threads, its memory.

`describe_device` names the backend, the GPU (or the CPU, `cpu_name`) and its
bf16 peak FLOP/s; `limit_threads` sizes the CPU thread pools of TensorFlow,
torch and XLA; `hide_gpus_from_tensorflow` keeps TensorFlow (there only to
feed `tf.data`) off the GPU of a JAX or torch run; `PeakMemory` measures the
peak memory growth of a block, the GPU allocator's or, on a CPU, the
process's resident set size sampled every 5 ms. `benchmarks.profile_step`
uses them too.
"""

import os
import sys
import threading

import keras

from keras_transformer.training import model_flops as flops
from keras_transformer.machine import describe_cpu


def cpu_name():
    """The CPU as timings name it (`keras_transformer.machine.describe_cpu`), e.g. `"AMD EPYC, 2 cores, AVX-512"`."""
    return describe_cpu()


def describe_device():
    """The device the backend computes on, with its bf16 peak where known.

    Returns:
        dict: `backend`, `backend_version`, `accelerator` (GPU name or
        None), `name`, `peak_flops` (FLOP/s or None).
    """
    accelerator = flops.accelerator_name()
    backend = keras.backend.backend()
    return dict(
        backend=backend,
        backend_version=getattr(sys.modules.get(backend), "__version__", None),
        accelerator=accelerator,
        name=accelerator or cpu_name(),
        peak_flops=flops.peak_flops(accelerator) if accelerator else None,
    )


def limit_threads(threads):
    """Restricts TensorFlow, torch and XLA (JAX, TensorFlow's jit) to `threads` CPU threads.

    Call before the first computation: the thread pools are sized when
    they start.

    Args:
        threads: int >= 1.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (
        f"{flags} --xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
        f"intra_op_parallelism_threads={threads}"
    ).strip()
    try:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except (ImportError, RuntimeError):
        pass
    if keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # already started
            pass


def hide_gpus_from_tensorflow():
    """Makes TensorFlow see no GPU (nothing happens without TensorFlow, or once it has started).

    tf.data feeds the JAX and torch models too; left alone, TensorFlow
    would reserve most of the GPU's memory the first time it runs an op.
    """
    try:
        import tensorflow as tf

        tf.config.set_visible_devices([], "GPU")
    except (ImportError, RuntimeError):
        pass


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the high-water mark, which never goes down
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Peak memory growth of a `with` block: the GPU allocator's, or sampled RSS on a CPU.

    The growth is the peak during the block minus what was in use when it
    began, so models built earlier and still alive are not counted.

    Args:
        on_accelerator: bool, measure GPU memory through the backend.

    Attributes:
        peak_bytes: int after the block (None if the backend cannot say).
        method: str, how it was measured.

    Example:

    >>> import numpy as np
    >>> with PeakMemory(on_accelerator=False) as memory:
    ...     block = np.ones(10_000_000)
    >>> memory.peak_bytes > 0
    True
    """

    def __init__(self, on_accelerator):
        self.on_accelerator = on_accelerator
        self.peak_bytes = None
        self.method = None

    def __enter__(self):
        backend = keras.backend.backend()
        if self.on_accelerator:
            if backend == "torch":
                import torch

                self._baseline = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                self.method = "GPU: torch.cuda.max_memory_allocated growth"
            elif backend == "tensorflow":
                import tensorflow as tf

                self._baseline = tf.config.experimental.get_memory_info("GPU:0")["current"]
                tf.config.experimental.reset_memory_stats("GPU:0")
                self.method = "GPU: tf.config.experimental.get_memory_info peak growth"
            else:
                import jax

                self._baseline = (jax.local_devices()[0].memory_stats() or {}).get("bytes_in_use", 0)
                self.method = ("GPU: JAX peak_bytes_in_use growth (JAX cannot reset its peak: "
                               "a phase below an earlier peak reads too high)")
            return self
        self.method = "CPU: resident set size growth, sampled every 5 ms (process-wide)"
        self._baseline = self._peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.005):
            self._peak = max(self._peak, _rss_bytes())

    def __exit__(self, *exc):
        backend = keras.backend.backend()
        if not self.on_accelerator:
            self._stop.set()
            self._thread.join()
            peak = max(self._peak, _rss_bytes())
        elif backend == "torch":
            import torch

            peak = torch.cuda.max_memory_allocated()
        elif backend == "tensorflow":
            import tensorflow as tf

            peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
        else:
            import jax

            peak = (jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
        self.peak_bytes = None if peak is None else int(peak - self._baseline)
        return False
