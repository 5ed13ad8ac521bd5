"""The compiled engine's fast paths that rest on JAX beyond its public API, each saying whether it engaged.

Three speed-ups of `compiled_translator` depend on JAX's internals or on
behaviour JAX does not document. Each is reached only through this module;
each either engages or raises `FastPathFallback`, whose message is the one
line `translate --verbose` prints before the public path serves instead
(the translations stay the same, only slower). tests/test_jax_internals.py
checks on the pinned JAX that each engages, so an upgrade that loses one
fails a test instead of going unnoticed.

- **The fixed-shape program** (`fixed_shape_module`): a program of symbolic
  shapes is refined once to a batch shape with
  `jax._src.interpreters.mlir.refine_polymorphic_shapes` (and
  `make_ir_context`) and serialized with
  `jax._src.export._export._module_to_bytecode`, so that later processes
  lower it without JAX's shape refinement (`fixed_shape_program`).
- **The backend check skipped** (`backend_check_skipped`): before lowering
  an exported program for a CPU, `jax._src.export._export._ensure_backends_initialized`
  sets up JAX's LAPACK kernels, which imports `scipy.linalg`. A program
  that calls none of them (the names in
  `jax._src.lib.lapack._lapack.registrations()`) is lowered with that
  function replaced by one that does nothing for the threads that asked.
  The replacement is process-wide, so it is installed under one lock while
  any thread compiles and the original put back when the last one leaves.
- **The weights uncopied** (`weights_uncopied`): XLA's CPU client uses a
  NumPy array at a 64-byte-aligned address, such as a view of the mapped
  weights file (`weights_file`), without copying it. No private name is
  involved, only undocumented behaviour, checked through each array's
  buffer address (`jax.Array.unsafe_buffer_pointer`).
"""

import contextlib
import threading

FIXED_SHAPE_PROGRAM = "fixed-shape program"
BACKEND_CHECK_SKIPPED = "backend check skipped"
WEIGHTS_UNCOPIED = "weights uncopied"

_replacement_lock = threading.Lock()
# The process-wide replacement: how many compiles are inside it, and the function it stands in for.
_replacement = {"users": 0, "original": None}
_skipping = threading.local()


class FastPathFallback(Exception):
    """A fast path of this module did not engage on the JAX running: its name and why.

    `str(error)` is the line `translate --verbose` prints.

    Args:
        fast_path: one of `FIXED_SHAPE_PROGRAM`, `BACKEND_CHECK_SKIPPED`, `WEIGHTS_UNCOPIED`.
        reason: str, what was missing or went wrong.

    Example:

    >>> print(FastPathFallback(FIXED_SHAPE_PROGRAM, "ImportError: no module jax._src.export"))
    fast path fell back: fixed-shape program (ImportError: no module jax._src.export); JAX's public path serves
    """

    def __init__(self, fast_path, reason):
        super().__init__(f"fast path fell back: {fast_path} ({reason}); JAX's public path serves")
        self.fast_path = fast_path
        self.reason = reason


def _because(error):
    return f"{type(error).__name__}: {error}"


def fixed_shape_module(calling):
    """The serialized module of `calling` with every symbolic shape inside refined to the fixed ones it is called at.

    Args:
        calling: a `jax.export.Exported` of fixed input shapes whose module
            calls a program of symbolic shapes (`fixed_shape_program`).

    Returns:
        bytes, the refined module's bytecode (`Exported.mlir_module_serialized`).

    Raises:
        FastPathFallback: this JAX lacks the internal functions, or they failed.

    Example:

    >>> import jax, numpy as np
    >>> from jax import export
    >>> add = export.export(jax.jit(lambda x: x + 1))(jax.ShapeDtypeStruct(export.symbolic_shape("b"), np.int32))
    >>> calling = export.export(jax.jit(add.call))(jax.ShapeDtypeStruct((2,), np.int32))
    >>> isinstance(fixed_shape_module(calling), bytes)
    True
    """
    try:
        from jax._src.export import _export
        from jax._src.interpreters import mlir

        refine, to_bytecode, make_context = (mlir.refine_polymorphic_shapes, _export._module_to_bytecode,
                                             mlir.make_ir_context)
    except (ImportError, AttributeError) as error:
        raise FastPathFallback(FIXED_SHAPE_PROGRAM, _because(error)) from error
    try:
        with make_context():
            return bytes(to_bytecode(refine(mlir.ir.Module.parse(calling.mlir_module()))))
    except Exception as error:  # an internal function whose signature or behaviour changed
        raise FastPathFallback(FIXED_SHAPE_PROGRAM, _because(error)) from error


def backend_check_skipped(program):
    """A context manager inside which JAX lowers `program` without first setting up its LAPACK kernels.

    The set-up is skipped only for a program for a CPU alone that calls
    none of JAX's LAPACK kernels, and only in the thread that entered;
    another thread lowering meanwhile gets it as usual. Entering gives True
    when the set-up is skipped, False when `program` needs it (another
    platform, or a LAPACK call).

    Args:
        program: a `jax.export.Exported`.

    Returns:
        The context manager.

    Raises:
        FastPathFallback: this JAX lacks the internals the skip needs.

    Example:

    >>> import jax, numpy as np
    >>> from jax import export
    >>> program = export.export(jax.jit(lambda a: a @ a))(jax.ShapeDtypeStruct((2, 2), np.float32))
    >>> with backend_check_skipped(program) as skipped:
    ...     _ = jax.jit(program.call).lower(np.eye(2, dtype=np.float32))
    >>> skipped
    True
    """
    if tuple(program.platforms) != ("cpu",):
        return contextlib.nullcontext(False)
    try:
        from jax._src.export import _export
        from jax._src.lib import lapack

        kernels = [name.encode() for name in lapack._lapack.registrations()]
        _export._ensure_backends_initialized  # noqa: B018 (the function the skip replaces)
    except (ImportError, AttributeError) as error:
        raise FastPathFallback(BACKEND_CHECK_SKIPPED, _because(error)) from error
    if not kernels:
        raise FastPathFallback(BACKEND_CHECK_SKIPPED, "JAX lists no LAPACK kernels to look for in the program")
    module = bytes(program.mlir_module_serialized)
    if any(kernel in module for kernel in kernels):
        return contextlib.nullcontext(False)
    return _skipped_in_this_thread(_export)


def _skip_for_threads_that_asked(platforms):
    if getattr(_skipping, "depth", 0):
        return None
    return _replacement["original"](platforms)


@contextlib.contextmanager
def _skipped_in_this_thread(export_module):
    with _replacement_lock:
        if _replacement["users"] == 0:
            _replacement["original"] = export_module._ensure_backends_initialized
            export_module._ensure_backends_initialized = _skip_for_threads_that_asked
        _replacement["users"] += 1
    _skipping.depth = getattr(_skipping, "depth", 0) + 1
    try:
        yield True
    finally:
        _skipping.depth -= 1
        with _replacement_lock:
            _replacement["users"] -= 1
            if _replacement["users"] == 0:
                export_module._ensure_backends_initialized = _replacement["original"]


def weights_uncopied(host_weights, device_weights):
    """Whether JAX uses the NumPy arrays among `host_weights` in place: `device_weights` lie at their addresses.

    Args:
        host_weights: the arrays given to `jax.device_put`.
        device_weights: what it returned, in the same order.

    Returns:
        True when every NumPy array is used in place; False when there is
        nothing to check (a GPU or TPU, where the weights are copied to the
        device, or no NumPy array among them).

    Raises:
        FastPathFallback: on a CPU, some NumPy arrays were copied.

    Example:

    >>> import jax, numpy as np
    >>> memory = np.zeros(256, np.uint8)
    >>> start = -memory.ctypes.data % 64
    >>> host = [memory[start: start + 64].view(np.float32), memory[start + 4: start + 68].view(np.float32)]
    >>> try:
    ...     weights_uncopied(host, jax.device_put(host))
    ... except FastPathFallback as error:
    ...     print(error.reason)
    1 of 2 weight arrays copied; 1 of them off the 64-byte alignment XLA's CPU client uses in place
    """
    import jax
    import numpy as np

    if jax.default_backend() != "cpu":
        return False
    pairs = [(host, device) for host, device in zip(host_weights, device_weights) if isinstance(host, np.ndarray)]
    copied = [host for host, device in pairs if host.size and device.unsafe_buffer_pointer() != host.ctypes.data]
    if copied:
        unaligned = sum(host.ctypes.data % 64 != 0 for host in copied)
        raise FastPathFallback(WEIGHTS_UNCOPIED, f"{len(copied)} of {len(pairs)} weight arrays copied; {unaligned} of "
                               f"them off the 64-byte alignment XLA's CPU client uses in place")
    return bool(pairs)
