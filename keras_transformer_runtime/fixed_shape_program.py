"""A decoding program fixed to one batch shape, so that later processes lower it without refining its shapes.

The program `translation_program` writes takes any batch size and source
length (symbolic shapes). Each process that lowers it for a batch shape
has JAX refine those shapes through the whole module before XLA sees it:
for a one-sentence `translate` of a model of opus-mt-es-en's shape, more
than the rest of the lowering. The first process to meet a shape refines
it once (`fixed_shape_program`) and writes the result beside the symbolic
program (`FixedShapePrograms`); later ones lower that instead, and reach
XLA's cached code sooner (benchmarks/findings/decoding.md, "Fixed-shape
programs and mapped weights").

Exporting `jax.jit(program.call)` at fixed shapes is not enough: a module
that calls one with symbolic shapes stays marked as needing the
refinement (`Exported.uses_global_constants`), and is refined again in
every process. So the refinement is done here, with JAX's internal
functions (`jax_internals.fixed_shape_module`); under a JAX without them
`fixed_shape_program` raises `jax_internals.FastPathFallback` and the
symbolic program serves, as before.
"""

import dataclasses

from keras_transformer_runtime.jax_internals import fixed_shape_module

_SUFFIX = ".jaxexport"


def fixed_shape_file(program_name, shape):
    """The file name of `program_name`'s program fixed to the batch shape `shape` (rows, source width).

    Example:

    >>> fixed_shape_file("kept-beam4-alpha0.6-norepeat3-new127.jaxexport", (1, 32))
    'kept-beam4-alpha0.6-norepeat3-new127-shape1x32.jaxexport'
    """
    stem = program_name[: -len(_SUFFIX)] if program_name.endswith(_SUFFIX) else program_name
    rows, width = (int(size) for size in shape)
    return f"{stem}-shape{rows}x{width}{_SUFFIX}"


def _is_fixed(aval):
    return all(isinstance(size, int) for size in aval.shape)


def fixed_shape_program(program, shape):
    """`program` with its source fixed to `shape` and every shape inside refined.

    The result computes what `program` computes for sources of that shape
    (the same module, its shapes resolved as XLA would have them), and its
    lowering skips JAX's shape refinement.

    Args:
        program: a `jax.export.Exported` whose one symbolic input is the
            source tokens `(batch, length)` (`translation_program`).
        shape: `(rows, width)`, the batch shape.

    Returns:
        A `jax.export.Exported` of fixed shapes.

    Raises:
        ValueError: `program` has no symbolic input, or more than one.
        FastPathFallback: the JAX running cannot refine it (`jax_internals.fixed_shape_module`).

    Example:

    >>> import jax, numpy as np
    >>> from jax import export
    >>> add = export.export(jax.jit(lambda x: x + 1))(jax.ShapeDtypeStruct(export.symbolic_shape("b, n"), np.int32))
    >>> fixed = fixed_shape_program(add, (2, 3))
    >>> [a.shape for a in fixed.in_avals], fixed.uses_global_constants
    ([(2, 3)], False)
    """
    import jax
    from jax import export

    symbolic = [i for i, aval in enumerate(program.in_avals) if not _is_fixed(aval)]
    if len(symbolic) != 1:
        raise ValueError(f"A decoding program has one input of symbolic shape, the source; this one has "
                         f"{len(symbolic)}.")
    avals = [jax.ShapeDtypeStruct(tuple(shape) if i == symbolic[0] else aval.shape, aval.dtype)
             for i, aval in enumerate(program.in_avals)]
    args, kwargs = jax.tree_util.tree_unflatten(program.in_tree, avals)
    calling = export.export(jax.jit(program.call), platforms=program.platforms,
                            disabled_checks=program.disabled_safety_checks)(*args, **kwargs)
    return dataclasses.replace(calling, mlir_module_serialized=fixed_shape_module(calling), uses_global_constants=False)


class FixedShapePrograms:
    """The fixed-shape programs of one symbolic program in a cache entry: read if written, else made and written.

    Args:
        cache: the `ProgramCache`.
        program_path: the symbolic program's file in its entry.
        program: that program (`jax.export.Exported`).

    Example:

    >>> import pathlib
    >>> programs = FixedShapePrograms(None, pathlib.Path("entry/kept-beam4-alpha0.6-norepeat3-new127.jaxexport"), None)
    >>> programs.path((8, 64)).name
    'kept-beam4-alpha0.6-norepeat3-new127-shape8x64.jaxexport'
    >>> programs.program_for((8, 64))  # doctest: +SKIP
    """

    def __init__(self, cache, program_path, program):
        self.cache = cache
        self.program_path = program_path
        self.program = program

    def path(self, shape):
        """Where the program of `shape` is kept."""
        return self.program_path.with_name(fixed_shape_file(self.program_path.name, shape))

    def program_for(self, shape):
        """The program fixed to `shape`: from its file, else made and written there.

        A damaged file is made again. A cache that cannot be written still
        gives the program made.

        Raises:
            FastPathFallback: no file, and this JAX cannot make it (`fixed_shape_program`).
        """
        from jax import export

        path = self.path(shape)
        try:
            fixed = export.deserialize(bytearray(path.read_bytes()))
        except Exception:  # a damaged file: its reader raises what it meets (struct.error, AttributeError, ...)
            fixed = None
        if fixed is not None and all(_is_fixed(aval) for aval in fixed.in_avals):
            self.cache.touch(path)
            return fixed
        fixed = fixed_shape_program(self.program, shape)
        try:
            self.cache.write(path, bytes(fixed.serialize()))
        except OSError:
            pass
        return fixed
