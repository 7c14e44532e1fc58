"""Every distribution by its W&B name (`KINDS["q_uniform"]` is `QUniform`)."""

from __future__ import annotations

from sweeplab.space.continuous import (
    Beta,
    InvLogUniform,
    InvLogUniformValues,
    LogNormal,
    LogUniform,
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

KINDS: dict[str, type[Distribution]] = {
    cls.kind: cls
    for cls in (
        Constant, Categorical, CategoricalWithProbabilities, IntUniform, Uniform, QUniform,
        LogUniform, LogUniformValues, QLogUniform, QLogUniformValues, InvLogUniform,
        InvLogUniformValues, Normal, QNormal, LogNormal, QLogNormal, Beta, QBeta,
    )
}
