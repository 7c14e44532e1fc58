"""The search space: the W&B sweep `parameters` grammar as typed, frozen distributions.

`parse_parameters` turns the `parameters` block of a sweep spec into a `SearchSpace` of flat, dotted
parameter names (`optimizer.lr`), inferring distributions the way W&B does:

    value                     -> constant
    values                    -> categorical
    values + probabilities    -> categorical_w_probabilities
    min/max, both int         -> int_uniform
    min/max, otherwise        -> uniform
    mu/sigma                  -> normal          (W&B asks for `distribution`; we infer it)
    a/b                       -> beta            (idem)

Every distribution maps the unit interval onto its values (`from_unit`, an inverse CDF), which is how
random sampling, Sobol points and Optuna fall-backs share one code path. Values are plain Python types.
`log_uniform`, `q_log_uniform` and `inv_log_uniform` take natural-log exponents as min/max (as W&B does);
their `_values` twins take the values themselves.

The package, one concern a module: `values` (plain values, quantising), `discrete` and `continuous` (the
distributions), `kinds` (each by its W&B name), `searchspace` (`SearchSpace`: sampling, grid enumeration,
unit encoding, conditions; `unflatten`), `parse` (`parse_parameters`, incl. the conditional `when` and
`condition` keys).
"""

from __future__ import annotations

from sweeplab.space.continuous import (
    Beta,
    InvLogUniform,
    InvLogUniformValues,
    LogNormal,
    LogUniform,
    LogUniformBase,
    LogUniformValues,
    Normal,
    QBeta,
    QLogNormal,
    QLogUniform,
    QLogUniformValues,
    QNormal,
    QUniform,
    Uniform,
)
from sweeplab.space.discrete import Categorical, CategoricalWithProbabilities, Constant, Distribution, IntUniform
from sweeplab.space.kinds import KINDS
from sweeplab.space.parse import parse_parameters
from sweeplab.space.searchspace import Condition, SearchSpace, unflatten
from sweeplab.space.values import quantize

__all__ = [
    "KINDS",
    "Beta",
    "Categorical",
    "CategoricalWithProbabilities",
    "Condition",
    "Constant",
    "Distribution",
    "IntUniform",
    "InvLogUniform",
    "InvLogUniformValues",
    "LogNormal",
    "LogUniform",
    "LogUniformBase",
    "LogUniformValues",
    "Normal",
    "QBeta",
    "QLogNormal",
    "QLogUniform",
    "QLogUniformValues",
    "QNormal",
    "QUniform",
    "SearchSpace",
    "Uniform",
    "parse_parameters",
    "quantize",
    "unflatten",
]
