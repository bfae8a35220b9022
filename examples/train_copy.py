"""Train myatt.MyAtt on a task whose right attention pattern is known, with no framework.

The task ("copy the row the query points at"): each step draws a fresh value matrix
V [1, slots, width] and S queries; query s is the one-hot code of a slot i_s (plus a
little noise), K is noise the model must learn to ignore, and the target output at
position s is the value row V[0, i_s].  Because V changes every step, the only way to
produce it is through the attention: the model has to learn attn_weights[s] ~ one-hot(i_s)
(the attn layer maps the query code onto its slot) and an identity-like attn_combine on
the attended values.  The heatmap of the learned attention weights, for one query per
slot, should therefore be close to the identity matrix.

    python examples/train_copy.py                  # 600 steps, prints the loss falling
    python examples/train_copy.py --plot attn.png  # the heatmap to attn.png (matplotlib)

The heatmap goes to the temporary directory by default (myatt_train_copy.png there),
never into the working directory (examples/attention.png is the README's picture).
A progress bar (tqdm, when installed) shows the loss as its postfix; it appears only
when the run lasts over a second (--steps 20000 --lr 0.003, for instance: a longer run
wants a smaller step, as 0.03 keeps the loss near 0.01). Without tqdm, a line every
100 steps shows the loss.  Gradients come from myatt.vjp (the forward once; its
pullback reuses attn_weights and applied) and the update from myatt.Adam
(torch.optim.Adam's rule on the live parameters).
"""
import argparse
import os
import tempfile

import numpy as np

import myatt

SLOTS, WIDTH, KEY, SEQ = 8, 16, 4, 32   # value rows, value width, key noise features, queries


def batch(rng, S=SEQ, slots=None):
    """Q [1, S, SLOTS], K [1, S, KEY], V [1, SLOTS, WIDTH], target [1, S, WIDTH]."""
    idx = rng.integers(0, SLOTS, size=S) if slots is None else np.asarray(slots)
    Q = np.eye(SLOTS)[idx][None] + 0.05 * rng.standard_normal((1, len(idx), SLOTS))
    K = rng.standard_normal((1, len(idx), KEY))
    V = rng.standard_normal((1, SLOTS, WIDTH))
    return Q, K, V, V[:, idx]


def train(steps=600, lr=0.03, seed=0, progress=True, log_every=100):
    """Train a fresh MyAtt; returns (model, list of per-step losses).

    progress: with tqdm, a bar whose postfix is the current loss, drawn once the run has
    lasted a second (none for a shorter run, such as the default one); without tqdm, a
    line "step N  loss L" every log_every steps and at the last.
    """
    myatt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    m = myatt.MyAtt(SLOTS, KEY, SLOTS, WIDTH, WIDTH)
    opt = myatt.Adam(m, lr=lr)
    bar = None
    if progress:
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            # The loss goes into the bar (a line written beside it, even with tqdm.write,
            # redraws a bar not yet updated at 0 %); delay: no bar that would only flash.
            bar = tqdm(total=steps, desc="train", unit="step", delay=1.0)
    losses = []
    for step in range(steps):
        Q, K, V, target = batch(rng)
        (out, _), pullback = myatt.vjp(m, Q, K, V)
        diff = out - target
        losses.append(float(np.mean(diff ** 2)))
        # d(mean squared error)/d(output); no grad_attn_weights: the loss ignores them
        grads = pullback((2.0 / diff.size) * diff)
        opt.step(grads)
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
            bar.update()
        elif progress and log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:5d}  loss {losses[-1]:.5f}")
    if bar is not None:
        bar.close()
    return m, losses


def attention_map(m, seed=1):
    """attn_weights [SLOTS, SLOTS] for one query per slot, in slot order."""
    Q, K, V, _ = batch(np.random.default_rng(seed), slots=np.arange(SLOTS))
    return m(Q, K, V)[1]


def save_heatmap(weights, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4))
    im = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
    ax.set_xlabel("value row (slot)")
    ax.set_ylabel("query (points at slot)")
    ax.set_title("learned attention weights")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=os.path.join(tempfile.gettempdir(), "myatt_train_copy.png"),
                   help="heatmap file, written when matplotlib is installed ('' for none; "
                        "default: %(default)s)")
    args = p.parse_args(argv)
    m, losses = train(args.steps, args.lr, args.seed)
    k = max(1, len(losses) // 10)
    print(f"loss: first {np.mean(losses[:k]):.4f} -> last {np.mean(losses[-k:]):.4f} "
          f"(means of {k} steps)")
    w = attention_map(m)
    print("attention on the pointed-at slot, per query:", np.round(np.diag(w), 3))
    if args.plot:
        try:
            save_heatmap(w, args.plot)
            print(f"heatmap saved to {args.plot}")
        except ImportError:
            print("matplotlib not installed: no heatmap")


if __name__ == "__main__":
    main()
