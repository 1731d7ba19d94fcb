"""The tiniest experiment configs: a random 2-layer model, a few instances, a few rollouts."""
from configs import whale as whale_configs


def tiny_config(recipe="whale"):
  config = whale_configs.get_config("smoke")
  config.recipe = recipe
  config.domain.split_sizes = {"weight": 8, "harness": 2, "validation": 2, "test": 2}
  config.sampling = dict(max_tokens=12, temperature=1.0, top_k=20)
  config.training.update(samples_per_step=8,
                         sampler=dict(max_slots=8, steps_per_call=12, max_cache_length=2048),
                         row_length=2048)
  config.loop.update(prompt_batch=2, num_samples=2, search_iterations=2,
                     candidates_per_iteration=1, eval_num_samples=1)
  config.whale.update(weight_epochs=0.5, total_weight_epochs=1.0)
  config.vace = dict(num_cycles=2, block_steps=1)
  config.baseline = dict(total_weight_epochs=0.5, search_iterations=2)
  return config
