"""`python -m keras_transformer_cli`: the same as the `keras-transformer` command."""

import sys

from keras_transformer_cli.console import console_main

sys.exit(console_main())
