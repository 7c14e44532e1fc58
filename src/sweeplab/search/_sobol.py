"""A scrambled Sobol sequence in plain Python: point k of a design, for the GP's startup trials.

The GP's first trials are points of a scrambled Sobol sequence (search/optuna.py, `_StartupDesign`). Drawing
them with torch's or SciPy's engine meant importing torch (1.1 s of CPU here) or scipy.stats (0.7 s) in the
driver before a `bayes` sweep's first trial; this module needs neither, so those trials start at once and the
model's imports happen in the background (search/deferred.py).

The sequence is Sobol's with Joe and Kuo's direction numbers (search/_sobol_directions.py, up to MAX_DIM
dimensions), in Gray-code order as SciPy's and torch's engines give it; `scramble` applies a random linear
matrix scramble and a digital shift (Matoušek 1998; what both engines do), drawn from the seed. That keeps
what the design is for: the first 2^m points put exactly one point in each 2^-m of every axis.
"""

from __future__ import annotations

import random

from sweeplab.search._sobol_directions import DIRECTIONS

__all__ = ["BITS", "MAX_DIM", "Sobol"]

BITS = 30                        # points are multiples of 2^-BITS; the sequence has 2^BITS of them
MAX_DIM = len(DIRECTIONS) + 1    # dimensions with direction numbers


def _directions(d: int) -> list[int]:
    """Dimension d's BITS direction numbers, as BITS-bit integers (bit BITS-1-j is 2^-(j+1))."""
    if d == 0:
        m = [1] * BITS
    else:
        poly, init = DIRECTIONS[d - 1]
        s = poly.bit_length() - 1
        m = list(init)
        for j in range(s, BITS):   # Bratley and Fox's recurrence over the polynomial's coefficients
            new = m[j - s] ^ (m[j - s] << s)
            for k in range(1, s):
                if (poly >> (s - k)) & 1:
                    new ^= m[j - k] << k
            m.append(new)
    return [m[j] << (BITS - 1 - j) for j in range(BITS)]


def _scrambled(v: list[int], rng: random.Random) -> tuple[list[int], int]:
    """`v` through a random lower-triangular binary matrix with a unit diagonal (each output digit depends on
    the input digits of the same or higher significance: the net property is kept), and a random shift."""
    rows = []
    for i in range(BITS):   # row i: output digit i (from the most significant); its own digit and those above
        above = rng.getrandbits(i) if i else 0
        rows.append((above << (BITS - i)) | (1 << (BITS - 1 - i)))
    out = []
    for x in v:
        y = 0
        for i, row in enumerate(rows):
            y |= (bin(row & x).count("1") & 1) << (BITS - 1 - i)
        out.append(y)
    return out, rng.getrandbits(BITS)


class Sobol:
    """Points of a `dim`-dimensional Sobol sequence in [0, 1), scrambled from `seed` unless `scramble` is False."""

    def __init__(self, dim: int, seed: int = 0, *, scramble: bool = True) -> None:
        if not 0 <= dim <= MAX_DIM:
            raise ValueError(f"a Sobol design has at most {MAX_DIM} dimensions; got {dim}")
        rng = random.Random(f"sweeplab-sobol:{seed}")
        self._v: list[list[int]] = []
        self._shift: list[int] = []
        for d in range(dim):
            v, shift = _scrambled(_directions(d), rng) if scramble else (_directions(d), 0)
            self._v.append(v)
            self._shift.append(shift)

    def point(self, k: int) -> list[float]:
        """Point k (0-based) of the sequence."""
        if not 0 <= k < 1 << BITS:
            raise ValueError(f"a Sobol sequence has 2^{BITS} points; asked for point {k}")
        gray = k ^ (k >> 1)
        out = []
        for v, shift in zip(self._v, self._shift, strict=True):
            x, g, j = shift, gray, 0
            while g:
                if g & 1:
                    x ^= v[j]
                g >>= 1
                j += 1
            out.append(x / (1 << BITS))
        return out
