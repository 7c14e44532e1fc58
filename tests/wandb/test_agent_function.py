"""How a W&B sweep's function is called: as W&B's agent calls it, `function()` with no arguments
(wandb/agents/pyagent.py: `self._function()`), whatever defaults its parameters have.

W&B's sweeps notebook (and many public ones written from it) define `def train(config=None):` and do
`with wandb.init(config=config): config = wandb.config`; sweeplab used to pass its own config object as
`config`, which wandb.init refuses ("config must be a dict or have a __dict__ attribute")."""

from __future__ import annotations

import types

from sweeplab.backends.targets import call_trial

wandb = types.ModuleType("wandb")   # what the program imported; the call convention only looks at the name


def _program(source: str) -> types.FunctionType:
    namespace: dict = {"wandb": wandb}
    exec(source, namespace)
    return namespace["train"]


def test_a_wandb_function_with_a_config_default_is_called_as_wandbs_agent_calls_it() -> None:
    train = _program("def train(config=None):\n    return ('called with', config)\n")
    assert call_trial(train, {"lr": 0.1}, run=None) == ("called with", None)


def test_a_wandb_function_with_only_defaulted_parameters_gets_none_of_them() -> None:
    train = _program("def train(config=None, epochs=3):\n    return config, epochs\n")
    assert call_trial(train, {"lr": 0.1}, run=None) == (None, 3)


def test_sweeplabs_own_config_functions_still_get_the_config() -> None:
    train = _program("def train(config):\n    return config\n")
    assert call_trial(train, {"lr": 0.1}, run=None) == {"lr": 0.1}   # a required parameter: sweeplab's style
    plain = {"__builtins__": __builtins__}   # a module without wandb: a default does not make it W&B's
    exec("def train(config=None):\n    return config\n", plain)
    assert call_trial(plain["train"], {"lr": 0.1}, run=None) == {"lr": 0.1}
