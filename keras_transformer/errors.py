"""The error the package raises for input it cannot use: `keras_transformer_runtime.errors`, under its old name."""

from keras_transformer_runtime.errors import UserInputError  # noqa: F401
