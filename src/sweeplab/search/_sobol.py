"""A scrambled Sobol sequence in plain Python: point k of a design, for the GP's startup trials.

The GP's first trials are points of a scrambled Sobol sequence (search/optuna.py, `_StartupDesign`). Drawing
them with torch's or SciPy's engine meant importing torch (1.1 s of CPU here) or scipy.stats (0.7 s) in the
driver before a `bayes` sweep's first trial; this module needs neither, so those trials start at once and the
model's imports happen in the background (search/deferred.py).

The sequence is Sobol's with Joe and Kuo's direction numbers (search/_sobol_directions.py, up to MAX_DIM
dimensions), in Gray-code order as SciPy's and torch's engines give it; `scramble` applies a random linear
matrix scramble and a digital shift (Matoušek 1998), drawn from the seed exactly as torch's `SobolEngine` draws
them, so a seed's design is the one the GP used before (and its measured search quality holds). The scramble
keeps what the design is for: the first 2^m points put exactly one point in each 2^-m of every axis.
"""

from __future__ import annotations

import random
import struct

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


def _torch_bits(seed: int, n: int) -> list[int]:
    """The first `n` values of `torch.randint(2, (n,), generator=torch.Generator().manual_seed(seed))`: bit 0
    of successive MT19937 outputs, the generator seeded as torch seeds it (init_genrand with the seed's low 32
    bits). Python's `random.Random` is the same MT19937, given that state."""
    state = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & 0xFFFFFFFF)
    rng = random.Random()
    rng.setstate((3, (*state, 624), None))
    return [rng.getrandbits(32) & 1 for _ in range(n)]


def _scrambled(v: list[list[int]], seed: int) -> tuple[list[list[int]], list[int]]:
    """The direction numbers `v` (one list per axis) through random lower-triangular binary matrices with a unit
    diagonal (each output digit depends on the input digits of the same or higher significance: the net
    property is kept), and the axes' random digital shifts: exactly torch's `SobolEngine(scramble=True,
    seed=seed)`, whose design the GP's startup used before this module (torch/quasirandom.py `_scramble` and
    `_sobol_engine_scramble_`), so the same seed gives the same points."""
    dim = len(v)
    bits = _torch_bits(seed, dim * BITS + dim * BITS * BITS)
    shifts = [sum(bits[d * BITS + j] << j for j in range(BITS)) for d in range(dim)]
    ltm = bits[dim * BITS:]
    out = []
    for d in range(dim):
        rows = []
        for p in range(BITS):   # row p of axis d's matrix: output digit p (from the most significant)
            drawn = ltm[(d * BITS + p) * BITS:(d * BITS + p + 1) * BITS]   # torch keeps its lower triangle
            rows.append(sum(1 << (BITS - 1 - k) for k in range(p) if drawn[k]) | (1 << (BITS - 1 - p)))
        scrambled = []
        for x in v[d]:
            y = 0
            for p, row in enumerate(rows):
                y |= (bin(row & x).count("1") & 1) << (BITS - 1 - p)
            scrambled.append(y)
        out.append(scrambled)
    return out, shifts


class Sobol:
    """Points of a `dim`-dimensional Sobol sequence in [0, 1), scrambled from `seed` unless `scramble` is False."""

    def __init__(self, dim: int, seed: int = 0, *, scramble: bool = True) -> None:
        if not 0 <= dim <= MAX_DIM:
            raise ValueError(f"a Sobol design has at most {MAX_DIM} dimensions; got {dim}")
        v = [_directions(d) for d in range(dim)]
        self._v, self._shift = _scrambled(v, seed) if scramble else (v, [0] * dim)

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
        if k == 0:   # torch's engine computes its first point in float32 (`_first_point`): so does this one
            out = [struct.unpack("f", struct.pack("f", x))[0] for x in out]
        return out
