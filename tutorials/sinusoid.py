"""What does the sinusoidal encoding look like? Four views, each measured.

1. The heatmap of P[pos, i] (section 3.5 of the paper, interleaved sin/cos).
2. "Clock hands": each (sin, cos) pair is a point on the unit circle that
   turns at its own speed; fast hands for low i, slow ones for high i.
3. Similarity by distance: P[p] . P[p + k] depends on k only (not on p) and
   falls off with |k|.
4. Shifting by k is linear: one matrix M_k maps P[p] to P[p + k] for every
   p; it is block-diagonal with 2x2 rotations. Fitted by least squares here,
   with its residual and its distance from the closed-form rotations.

    python tutorials/sinusoid.py [--quick]     # seconds either way
"""

import os

import numpy as np

import common
from keras_transformer.layers.sinusoidal_encoding import sinusoidal_encoding


def encoding(length, depth):
    return np.asarray(sinusoidal_encoding(length, depth), dtype="float64")


def similarity_by_distance(table, distances, starts):
    rows = []
    for k in distances:
        dots = [table[p] @ table[p + k] for p in starts]
        rows.append({"distance k": k, "mean P[p].P[p+k]": float(np.mean(dots)),
                     "spread over p (max-min)": float(np.ptp(dots))})
    return rows


def rotation(depth, k):
    """The closed-form M_k: P[p + k] = P[p] @ M_k, 2x2 rotation blocks."""
    m = np.zeros((depth, depth))
    for i in range(depth // 2):
        angle = k / 10000 ** (2 * i / depth)
        c, s = np.cos(angle), np.sin(angle)
        # [sin(a + b), cos(a + b)] = [sin a, cos a] @ [[cos b, -sin b], [sin b, cos b]]
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return m


def shift_maps(table, shifts, fit_positions):
    rows = []
    depth = table.shape[1]
    for k in shifts:
        source, target = table[:fit_positions], table[k : fit_positions + k]
        fitted, *_ = np.linalg.lstsq(source, target, rcond=None)
        held_out = table[fit_positions : len(table) - k]
        exact = rotation(depth, k)
        rows.append({
            "shift k": k,
            "fit residual (max abs)": float(np.abs(source @ fitted - target).max()),
            "held-out positions error": float(np.abs(held_out @ exact - table[fit_positions + k:]).max()),
            "closed-form residual (max abs)": float(np.abs(source @ exact - target).max()),
        })
    return rows


def plot(table, folder, depth):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    image = axes[0].imshow(table.T, aspect="auto", cmap="RdBu", origin="lower")
    axes[0].set_xlabel("position")
    axes[0].set_ylabel("feature i (even: sin, odd: cos)")
    axes[0].set_title("P[pos, i]")
    figure.colorbar(image, ax=axes[0])
    theta = np.linspace(0, 2 * np.pi, 200)
    pairs = [i for i in (0, 4, 12, 24) if 2 * i + 1 < depth]
    for ring, (i, color) in enumerate(zip(pairs, ("C0", "C1", "C2", "C3"))):
        # Each pair drawn on its own ring (radius is for readability only:
        # every pair lies on the unit circle).
        radius = 1.0 - 0.22 * ring
        axes[1].plot(radius * np.cos(theta), radius * np.sin(theta), color="0.85", lw=0.8)
        sin, cos = table[:16, 2 * i], table[:16, 2 * i + 1]
        axes[1].plot(radius * cos, radius * sin, "o", color=color, ms=3, label=f"pair {i}: positions 0..15")
        for p in range(4):
            axes[1].plot([0, radius * cos[p]], [0, radius * sin[p]], color=color, alpha=1 - 0.2 * p)
    axes[1].set_aspect("equal")
    axes[1].set_title("clock hands: (cos, sin) of a pair per position;\nhands drawn for positions 0..3")
    axes[1].legend(fontsize=7, loc="lower left")
    reach = min(64, len(table) // 2 - 1)
    distances = np.arange(-reach, reach + 1)
    center = len(table) // 2
    axes[2].plot(distances, [table[center] @ table[center + k] for k in distances])
    axes[2].set_xlabel("distance k")
    axes[2].set_ylabel(f"P[{center}] . P[{center} + k]")
    axes[2].set_title(f"similarity by distance (d_model {depth})")
    figure.tight_layout()
    figure.savefig(os.path.join(folder, "sinusoid.png"), dpi=120)
    plt.close(figure)


def main(argv=None):
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    folder = common.output_folder(args, "sinusoid")
    clock = common.Clock()
    depth, length = (32, 128) if args.smoke else (128, 512)
    table = encoding(length, depth)
    plot(table, folder, depth)
    starts = range(0, length // 2, 7)
    similarity = similarity_by_distance(table, [0, 1, 2, 4, 8, 16, 32, 64], starts)
    shifts = shift_maps(table, [1, 5, 25, 100] if not args.smoke else [1, 5], fit_positions=length // 2)
    norms = np.linalg.norm(table, axis=1)
    common.report(folder, "What does the sinusoidal encoding look like?", [
        ("Norms", f"every position vector has norm {norms.min():.6f} .. {norms.max():.6f} "
                  f"(sqrt(d_model / 2) = {np.sqrt(depth / 2):.6f}), d_model {depth}, {length} positions"),
        (f"Similarity by distance (over {len(starts)} starting positions p)", common.table(
            similarity, ["distance k", "mean P[p].P[p+k]", "spread over p (max-min)"])),
        (f"Shifting by k is one linear map (least squares on the first {length // 2} positions)",
         common.table(shifts, ["shift k", "fit residual (max abs)", "closed-form residual (max abs)",
                               "held-out positions error"])),
        ("Run", f"{clock}; plot: sinusoid.png"),
    ])


if __name__ == "__main__":
    main()
