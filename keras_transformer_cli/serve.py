"""`keras-transformer serve`: the flags, and the engines that load a run for the server.

The server itself is `keras_transformer_runtime.serving`. On the compiled
engine the serving process never imports Keras: a program missing from
the cache is written by a child `keras-transformer translate`, which
compiles it with Keras on JAX and exits.
"""

import os
import subprocess
import sys

from keras_transformer_cli.search_flags import search_flag_arguments

SERVE_DESCRIPTION = """\
Serves translations over HTTP (docs/serving.md): POST /v1/translate takes
{"model": NAME, "text": [...], "beam": 4, "n_best": 1, "max_new_tokens": N,
"alignments": false}
and answers with translate --format jsonl's objects; POST
/v1/models/NAME:predict answers TensorFlow Serving's REST shape. The
sentences of concurrent requests are decoded together. GET /healthz,
/readyz, /metrics (Prometheus) and /openapi.json. SIGTERM stops taking
requests, answers those taken and exits 0.
"""
# A child `translate` writing a program: Keras' import and the export take about a minute at worst.
WRITE_TIMEOUT_SECONDS = 900


def add_arguments(parser, positive_int, batch_size, engine_help, beam_width, no_repeat_ngram):
    """The flags of `serve`; the type functions, help and defaults it shares with `translate` come from the CLI."""
    parser.add_argument("--model", action="append", required=True, metavar="[NAME=]FOLDER",
                        help="a run folder to serve, named by its last part or NAME; repeat for several")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on; any but loopback needs --token-file or --no-auth")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free one, logged)")
    parser.add_argument("--beam", type=positive_int, nargs="+", metavar="N",
                        help="the beam widths requests may ask for, the default first (each one decoding "
                             f"program, compiled at start; default: each run's own: {beam_width} for a run trained "
                             "here, generation_config.json's num_beams for one imported from Hugging Face)")
    parser.add_argument("--no-repeat-ngram", type=int,
                        help="never repeat an n-gram of this many tokens; 0 turns it off (default: each run's own: "
                             f"{no_repeat_ngram} for a run trained here, generation_config.json's for an imported one)")
    parser.add_argument("--batch-size", type=batch_size, default="auto",
                        help="rows the decoding program runs at once (auto: 8 on a CPU, 64 on a GPU)")
    parser.add_argument("--max-batch-sentences", type=positive_int, default=64,
                        help="the most sentences of concurrent requests gathered into one batch (1: no batching "
                             "across requests)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0,
                        help="how long an idle decoder waits for more requests to join the first")
    parser.add_argument("--max-queue-sentences", type=positive_int, default=2048,
                        help="the most sentences waiting; beyond, requests get 503 with Retry-After")
    parser.add_argument("--max-texts", type=positive_int, default=256, help="the most sentences in one request (413)")
    parser.add_argument("--max-body-bytes", type=positive_int, default=1 << 20, help="the largest request body (413)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a request may wait for its translations (then 504)")
    parser.add_argument("--token-file", help="a file whose first line is the bearer token every request (but "
                                             "/healthz and /readyz) must carry")
    parser.add_argument("--no-auth", action="store_true",
                        help="listen beyond loopback without a token (behind your own gateway)")
    parser.add_argument("--engine", choices=("auto", "compiled", "keras"), default="auto", help=engine_help)


def serve(args, out):
    """`serve`: checks the flags and the run folders, then serves until SIGTERM; returns the exit status."""
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.serving.app import ServerLimits
    from keras_transformer_runtime.serving.app import create_app
    from keras_transformer_runtime.serving.server import check_listening_address
    from keras_transformer_runtime.serving.server import read_token
    from keras_transformer_runtime.serving.server import run_server

    def log(line):
        print(f"keras-transformer: {line}", file=sys.stderr, flush=True)

    token = read_token(args.token_file) if args.token_file else None
    check_listening_address(args.host, token, args.no_auth)
    if args.max_texts > args.max_queue_sentences:
        raise UserInputError(f"--max-texts {args.max_texts} is more than --max-queue-sentences "
                             f"{args.max_queue_sentences}: such a request could never be queued.")
    if args.timeout <= 0 or args.batch_wait_ms < 0 or not 0 <= args.port <= 65535:
        raise UserInputError(f"--timeout must be > 0 (got {args.timeout:g}), --batch-wait-ms >= 0 (got "
                             f"{args.batch_wait_ms:g}) and --port from 0 to 65535 (got {args.port}).")
    models = _served_models(args, log)
    limits = ServerLimits(max_body_bytes=args.max_body_bytes, max_texts=args.max_texts,
                          max_batch_sentences=args.max_batch_sentences, batch_wait_seconds=args.batch_wait_ms / 1000,
                          max_queue_sentences=args.max_queue_sentences, timeout_seconds=args.timeout)
    app = create_app(models, limits, token, log)
    return run_server(app, args.host, args.port, log)


def _served_models(args, log):
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.serving.served_model import ServedModel
    from keras_transformer_runtime.serving.served_model import model_name

    from keras_transformer_cli.search_flags import search_arguments
    from keras_transformer_runtime.search_defaults import resolve_search

    load, engine = _compiled_loader(args) if args.engine == "compiled" else _keras_loader(args)
    models = {}
    for argument in args.model:
        name, folder = model_name(argument)
        if not name or name in models:
            raise UserInputError(f"--model {argument!r}: {'an empty name' if not name else f'a second {name!r}'}; "
                                 "name each model with NAME=FOLDER.")
        _check_run_folder(folder)
        # Each run its own defaults (an imported one: generate()'s), the flags over them; each limit checked.
        searches = {}
        for limit in args.max_new_tokens or [None]:
            search = resolve_search(folder, **search_arguments(args, beam=args.beam[0] if args.beam else None,
                                                               max_new_tokens=limit))
            if search.decoding.max_new_tokens in searches:
                raise UserInputError(f"--max-new-tokens {limit}: given twice.")
            searches[search.decoding.max_new_tokens] = search
        search = next(iter(searches.values()))
        beams = args.beam or [search.decoding.beam_width]
        models[name] = ServedModel(name, folder, beams, _with_searches(load, searches), engine, limits=list(searches))
        limits = f", max new tokens {' and '.join(map(str, searches))}" if len(searches) > 1 else ""
        log(f"serving {name!r} ({folder}) on the {engine}, beam {' and '.join(map(str, beams))}{limits}; "
            f"{search.describe()}")
    return models


def _with_searches(load, searches):
    """The `load_translator` of a `ServedModel`: `load` with the search of the setting's length limit."""
    return lambda run_directory, setting, weights_of: load(run_directory, setting, weights_of,
                                                           searches[setting.max_new_tokens])


def _decoding_settings(search, setting, args, **changes):
    """The `DecodingSettings` of a served setting: the run's search, the setting's beam width, the server's cap."""
    return search.decoding.replace(beam_width=setting.beam, max_output_ratio=args.max_output_ratio, **changes)


def _check_run_folder(folder):
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.run_files import MODEL_FILE
    from keras_transformer_runtime.run_tokenizer import vocabulary_files

    for name in (MODEL_FILE, *vocabulary_files(folder)):
        if not os.path.isfile(os.path.join(folder, name)):
            raise UserInputError(f"--model {folder!r} holds no {name}: pass the --output folder of a finished "
                                 "`keras-transformer train` or `import`.")


def _compiled_loader(args):
    """`(load_translator, engine words)` for the compiled engine: programs from the cache, JAX alone."""
    from keras_transformer_cli.startup import quiet_native_logging
    from keras_transformer_runtime.compiled_translator import engine_description
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache

    cache = ProgramCache()
    with quiet_native_logging(args.verbose):  # JAX's start on a machine without CUDA logs "failed call to cuInit"
        engine = engine_description()

    def load(run_directory, setting, weights_of, search):
        settings = _decoding_settings(search, setting, args, n_best=setting.beam, cross_attention=setting.alignments)
        return load_compiled_translator(run_directory, cache, settings, batch_size=args.batch_size,
                                        write=write_program_in_a_child, weights_of=weights_of)

    return load, f"compiled engine ({engine})"


def write_program_in_a_child(run_directory, entry, cache, settings=None, quantize=None, **options):
    """Writes a missing program with a child `translate` (Keras on JAX), so this process never imports Keras.

    The `write` of `load_compiled_translator`, for a process that serves
    (or measures) without Keras, or whose Keras runs another backend. Every
    option of `settings` (a `DecodingSettings`; `options` replace its
    fields) is passed as a flag, so the child writes the program of this
    setting whatever the run's defaults.

    Example:

    >>> write_program_in_a_child("runs/es-en", entry, cache, DecodingSettings(beam_width=1))  # doctest: +SKIP
    """
    from keras_transformer_runtime.decoding_settings import DecodingSettings
    from keras_transformer_runtime.errors import UserInputError

    settings = (settings or DecodingSettings()).replace(**options)
    print(f"keras-transformer: compiling the decoding program of {settings.beam_search} beam {settings.beam_width}"
          f"{' with alignments' if settings.cross_attention else ''} into the cache (once per model and setting)",
          file=sys.stderr, flush=True)
    scored = ["--n-best", str(settings.n_best), "--format", "jsonl"] if settings.n_best else []
    command = [sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(run_directory),
               "--engine", "compiled", *search_flag_arguments(settings), *scored,
               *(["--alignments"] if settings.cross_attention else []), *(["--quantize", quantize] if quantize else []),
               ""]
    # The child finds the same cache: ProgramCache() reads the same environment.
    result = subprocess.run(command, capture_output=True, text=True, timeout=WRITE_TIMEOUT_SECONDS)
    if result.returncode != 0:
        raise UserInputError(f"writing the decoding program failed: {result.stderr.strip().splitlines()[-1:]}")


def _keras_loader(args):
    """`(load_translator, engine words)` for the Keras model: one `Translator` a beam width, both alignments."""
    import keras

    from keras_transformer.translation.translator import Translator

    loaded = {}

    def load(run_directory, setting, weights_of, search):
        key = (run_directory, setting.beam, setting.max_new_tokens)
        if key not in loaded:
            settings = _decoding_settings(search, setting, args)
            loaded[key] = Translator.from_directory(run_directory, batch_size=args.batch_size,
                                                    **settings.translator_arguments())
        return loaded[key]

    return load, f"Keras model ({keras.backend.backend()})"

