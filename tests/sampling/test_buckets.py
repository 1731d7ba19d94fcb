"""Shape buckets: geometric grids, bucket lookup, and the grid's relayout path and warm cells."""
import pytest

from whale_jax.sampling import buckets


def test_geometric_buckets_and_bucket_for():
  assert buckets.geometric_buckets(1, 64, 4) == [1, 4, 16, 64]
  assert buckets.geometric_buckets(1, 48, 4) == [1, 4, 16, 48]
  assert buckets.geometric_buckets(32, 1000, 8, multiple=16) == [32, 256, 1008]
  assert buckets.geometric_buckets(32, 20, 2, multiple=16) == [32]
  assert [buckets.bucket_for([1, 8, 64], n) for n in (0, 1, 2, 8, 9, 64)] == [
      1, 1, 8, 8, 64, 64]
  with pytest.raises(ValueError, match="exceeds the largest bucket"):
    buckets.bucket_for([1, 8, 64], 65)
  with pytest.raises(ValueError, match="ratio"):
    buckets.geometric_buckets(1, 64, 1)


def test_grid_defaults_relayout_path_and_warm_cells():
  grid = buckets.Grid.build(None, None, min_slots=1, max_slots=8, max_cache_length=100,
                            batch_shards=1, block_size=16)
  assert grid.batch_sizes == (1, 2, 4, 8) and grid.cache_lengths == (32, 48, 64, 96, 128)
  assert grid.relayout_path((1, 32), (4, 64)) == [(2, 32), (4, 32), (4, 48), (4, 64)]
  assert grid.relayout_path((8, 64), (2, 32)) == [(4, 64), (2, 64), (2, 48), (2, 32)]
  assert grid.warm_cells(8, 100, batch_sizes=[3], max_length=50, min_length=40) == (
      [4], [48, 64])
  assert grid.neighbours(4, 48, [4, 8], [48, 64]) == [(8, 48), (4, 64)]
  assert [grid.prefill_rows(n, 8) for n in (1, 2, 5, 17)] == [1, 4, 8, 8]
  assert buckets.slot_bounds(3, 10, 4) == (4, 12)


def test_grid_refuses_buckets_that_miss_the_bounds():
  with pytest.raises(ValueError, match="to exactly max_slots=8"):
    buckets.Grid.build((1, 4), None, 1, 8, 100)
  with pytest.raises(ValueError, match="multiples of prefix_block_size=16"):
    buckets.Grid.build(None, (40, 128), 1, 8, 100)
