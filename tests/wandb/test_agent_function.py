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


def test_a_script_that_starts_its_sweep_at_import_is_refused_in_the_worker_that_imports_it(
        tmp_path, monkeypatch) -> None:
    # W&B's `wandb.agent(sweep_id, train, count=5)` at a script's top level, turned into
    # `sweeplab.sweep(config, fn=train)`: each worker importing the script for `train` started a sweep of its
    # own (sweeps within sweeps in the user's store, trials failing with unrelated errors)
    import pytest

    from sweeplab.backends.targets import load_target
    from sweeplab.errors import UserError

    script = tmp_path / "tune.py"
    script.write_text("import sweeplab\n\ndef train(config):\n    return {'loss': config['lr']}\n\n"
                      "sweeplab.sweep({'method': 'grid', 'parameters': {'lr': {'values': [0.1]}}}, fn=train)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPLAB_STORE", raising=False)
    with pytest.raises(UserError, match=r'tune\.py starts a sweep .*if __name__ == "__main__"'):
        load_target(f"{script}:train")
    assert not (tmp_path / ".sweeplab").exists()
