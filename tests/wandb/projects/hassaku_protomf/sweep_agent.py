# Shaped like karapostK/hassaku, sweep_agent.py and train/trainer.py (`Trainer.fit`): the run's config read back
# with `wandb.config.items()` (W&B's own `_` keys left out), run.sweep_id / run.project / run.entity / run.tags,
# `wandb.config.update(conf)` with the sweep's values and new keys, a nested parameter read as a dict, metric
# names with `@` (ndcg@10), a `max_optimizing_metric` logged with every row, a yaml file saved to a model path.
# (The real program then asks the W&B API for the sweep's top runs, which needs the network: left out.)
import os

import wandb
import yaml


def train_val_agent():
    run = wandb.init(job_type='train/val')
    sweep_id = run.sweep_id
    conf = {k: v for k, v in wandb.config.items() if k[0] != '_'}
    assert isinstance(conf['running_settings'], dict) and conf['running_settings']['batch_verbose'] is True
    conf['sweep_id'] = sweep_id
    conf['optimizing_metric'] = 'ndcg@10'
    conf['model_path'] = os.path.join('saved_models', f"{conf['alg']}-{conf['dataset']}", run.id)
    os.makedirs(conf['model_path'], exist_ok=True)
    run.tags += (conf['alg'], conf['dataset'])
    wandb.config.update(conf)
    print(f"Sweep ID is {sweep_id}; project {run.project}, entity {run.entity}")

    lr, dim = conf['lr'], conf['embedding_dim']
    best_value = None
    for epoch in range(-1, conf['n_epochs']):
        value = min(1.0, dim / 256 * (epoch + 2) * lr * 100)
        metrics_values = {'ndcg@10': value, 'hit_ratio@10': value / 2}
        if best_value is None or value > best_value:
            best_value = value
        metrics_values['max_optimizing_metric'] = best_value
        if epoch >= 0:
            metrics_values['epoch_train_loss'] = 1 - value
        wandb.log(metrics_values)
    with open(os.path.join(conf['model_path'], 'conf.yml'), 'w') as out:
        yaml.dump(conf, out)
    wandb.finish()


train_val_agent()
