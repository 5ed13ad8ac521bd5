"""The error the package raises for input it cannot use.

The command line prints it as one line and exits with status 2; anything
else is a bug and keeps its traceback.
"""


class UserInputError(ValueError):
    """A problem with the user's input (flags, files, a run folder), not a bug.

    Its message is one line that says what is wrong and what to do. A
    `ValueError`, so the Python API's callers can catch it as one.

    Example:

    >>> str(UserInputError("--corpus 'x.tsv' does not exist."))
    "--corpus 'x.tsv' does not exist."
    """
