"""`python -m keras_transformer_cli`: the same as the `keras-transformer` command."""

import sys

from keras_transformer_cli import main

sys.exit(main())
