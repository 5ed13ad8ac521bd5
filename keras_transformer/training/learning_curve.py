"""The run folder's learning curve: loss and dev BLEU against steps, as a PNG.

Drawn from `log.csv` after every virtual epoch (`LearningCurve`), so the
picture is current even if the run is killed. Needs matplotlib; without it
the run says so once and goes on.
"""

import csv
import os

import keras

from keras_transformer.training import run_folder


def read_log(path):
    """The rows of a Keras `CSVLogger` file as dicts of floats (missing or "NA" values left out).

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "log.csv")
    >>> _ = open(path, "w").write("epoch,loss,dev_bleu\\n0,5.0,NA\\n1,4.0,12.5\\n")
    >>> read_log(path)
    [{'epoch': 0.0, 'loss': 5.0}, {'epoch': 1.0, 'loss': 4.0, 'dev_bleu': 12.5}]
    """
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            values = {}
            for key, value in row.items():
                try:
                    values[key] = float(value)
                except (TypeError, ValueError):
                    pass
            rows.append(values)
    return rows


def plot_learning_curve(log_path, png_path, steps_per_epoch):
    """Draws train and dev loss, and dev BLEU when logged, against optimizer steps.

    Args:
        log_path: the run's `log.csv`.
        png_path: where the PNG goes.
        steps_per_epoch: int, steps of one virtual epoch (a row of the log).

    Returns:
        `png_path`, or None when matplotlib does not import here.

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> log = os.path.join(folder, "log.csv")
    >>> _ = open(log, "w").write("epoch,loss,val_loss,dev_bleu\\n0,5,4.5,3\\n1,4,3.9,9\\n")
    >>> path = plot_learning_curve(log, os.path.join(folder, "curve.png"), 100)
    >>> path is None or os.path.getsize(path) > 0
    True
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = read_log(log_path)
    steps = [(row["epoch"] + 1) * steps_per_epoch for row in rows]
    with_bleu = [(step, row["dev_bleu"]) for step, row in zip(steps, rows) if "dev_bleu" in row]
    figure, axes = plt.subplots(1, 2 if with_bleu else 1, figsize=(10 if with_bleu else 5, 3.6), squeeze=False)
    loss_axes = axes[0][0]
    for key, label in (("loss", "train loss (dropout on)"), ("val_loss", "dev loss")):
        points = [(step, row[key]) for step, row in zip(steps, rows) if key in row]
        if points:
            loss_axes.plot(*zip(*points), marker="o", label=label)
    loss_axes.set_xlabel("step")
    loss_axes.set_ylabel("label-smoothed cross-entropy")
    loss_axes.legend()
    loss_axes.grid(alpha=0.3)
    if with_bleu:
        bleu_axes = axes[0][1]
        bleu_axes.plot(*zip(*with_bleu), marker="o", color="tab:green")
        best_step, best = max(with_bleu, key=lambda point: point[1])
        bleu_axes.annotate(f"best {best:.1f}", (best_step, best), textcoords="offset points", xytext=(0, -14),
                           ha="center")
        bleu_axes.set_xlabel("step")
        bleu_axes.set_ylabel("dev BLEU (greedy)")
        bleu_axes.grid(alpha=0.3)
    figure.tight_layout()
    temporary = png_path + ".tmp.png"
    figure.savefig(temporary, dpi=100)
    plt.close(figure)
    os.replace(temporary, png_path)
    return png_path


class LearningCurve(keras.callbacks.Callback):
    """Redraws `learning_curve.png` from `log.csv` after each virtual epoch.

    Place it after the `CSVLogger` that writes the log.

    Args:
        output: the run folder.
        steps_per_epoch: int.
        log: callable for a one-line message (said once if matplotlib is missing).

    Example:

    >>> LearningCurve("/tmp/run", steps_per_epoch=100).png_path
    '/tmp/run/learning_curve.png'
    """

    def __init__(self, output, steps_per_epoch, log=print):
        super().__init__()
        self.log_path = os.path.join(output, run_folder.LOG_FILE)
        self.png_path = os.path.join(output, run_folder.LEARNING_CURVE_FILE)
        self.steps_per_epoch = steps_per_epoch
        self.log = log
        self._said = False

    def on_epoch_end(self, epoch, logs=None):
        if plot_learning_curve(self.log_path, self.png_path, self.steps_per_epoch) is None and not self._said:
            self.log("learning_curve.png needs matplotlib, which does not import here (pip install matplotlib)")
            self._said = True
