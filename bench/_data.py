"""Generated benchmark inputs (deterministic: the same bytes for the same arguments)."""

from __future__ import annotations

import random

import numpy as np

KEYWORD = "qzx"  # planted in ~1 % of lines, for grep


def zipf_text(path: str, size_mb: float, exponent: float = 1.1, vocab: int = 50_000) -> None:
    """Lines of 5-15 Zipf-distributed words of realistic lengths; ~1 % hold KEYWORD."""
    rng = np.random.default_rng(7)
    ranks = np.arange(1, vocab + 1)
    p = ranks**-exponent
    p /= p.sum()
    lens = np.clip((np.log2(ranks) * 0.6 + 2 + rng.integers(0, 3, vocab)).astype(int), 1, 14)
    letters = np.frombuffer(b"abcdefghijklmnoprstuvwy", dtype=np.uint8)
    words = np.array([bytes(letters[rng.integers(0, len(letters), n)]) for n in lens], dtype=object)
    target = int(size_mb * 1e6)
    written = 0
    with open(path, "wb") as f:
        while written < target:
            n = rng.integers(5, 16, 20_000)
            w = words[rng.choice(vocab, int(n.sum()), p=p)]
            bounds = np.concatenate(([0], np.cumsum(n)))
            lines = [b" ".join(w[bounds[i] : bounds[i + 1]]) for i in range(len(n))]
            for i in np.flatnonzero(rng.random(len(lines)) < 0.01):
                lines[i] += b" " + KEYWORD.encode()
            chunk = b"\n".join(lines) + b"\n"
            f.write(chunk)
            written += len(chunk)


def page_views(path: str, users_path: str, size_mb: float) -> None:
    """PigMix-like page_views (user, action, timespent, query, ip, revenue) and a small
    power_users table (a tenth of the users)."""
    rng = random.Random(11)
    n_users = 20_000
    users = [f"user{u:06d}" for u in range(n_users)]
    with open(users_path, "w") as f:
        for u in users[::10]:
            f.write(f"{u}\t{rng.choice(['gold', 'silver', 'bronze'])}\t{rng.randrange(18, 90)}\n")
    target = int(size_mb * 1e6)
    queries = [f"q{rng.randrange(10**6)}" for _ in range(5000)]
    with open(path, "w") as f:
        written = 0
        block = []
        while written < target:
            u = users[min(int(rng.paretovariate(1.2)) * 7 % n_users, n_users - 1)]
            line = (
                f"{u}\t{rng.randrange(1, 5)}\t{rng.randrange(1, 3600)}\t{rng.choice(queries)}\t"
                f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}\t"
                f"{rng.randrange(0, 10000) / 100}\n"
            )
            block.append(line)
            written += len(line)
            if len(block) >= 50_000:
                f.write("".join(block))
                block = []
        f.write("".join(block))


def zipf_lines(
    path: str, size_mb: float, vocab: int = 8000, words: int = 10, exponent: float = 1.1
) -> None:
    """Lines of exactly `words` Zipf-distributed words from a `vocab`-word vocabulary
    (vectorized: ~1 s per 100 MB)."""
    rng = np.random.default_rng(13)
    ranks = np.arange(1, vocab + 1)
    cdf = np.cumsum(ranks**-exponent)
    cdf /= cdf[-1]
    lens = np.clip((np.log2(ranks) * 0.6 + 2 + rng.integers(0, 3, vocab)).astype(int), 1, 14)
    letters = np.frombuffer(b"abcdefghijklmnoprstuvwy", dtype=np.uint8)
    vocab_words = [bytes(letters[rng.integers(0, len(letters), n)]) for n in lens]
    # The word followed by its separator: a space, or a newline after the last of a line.
    table = np.array([w + b" " for w in vocab_words] + [w + b"\n" for w in vocab_words], object)
    target = int(size_mb * 1e6)
    written = 0
    with open(path, "wb") as f:
        while written < target:
            n_lines = 50_000
            idx = np.searchsorted(cdf, rng.random(n_lines * words))
            idx[words - 1 :: words] += vocab
            chunk = b"".join(table[idx].tolist())
            f.write(chunk)
            written += len(chunk)
