"""Shape buckets of the generation engine, and the grid of programs warm-up compiles.

Slot batches come in batch_sizes (default powers of two from min_slots), cache lengths in
cache_lengths (default 32, 48, 64, 96, 128, ...: each step at most 1.5x), prefill batches in
powers of four (at most the slot batch), inserts padded to the slot batch, block saves in
powers of 16. Every device program's shapes follow from a (slot batch, cache length) cell of
that grid, so the grid is the whole set of programs an engine can run (warm_plan). A coarser
grid (geometric_buckets: whale_jax.serve uses ratio 8) compiles fewer programs for more
padding. Plain Python: nothing here touches jax.
"""
import bisect
import dataclasses

MIN_LENGTH_BUCKET = 32


def length_bucket(length):
  """Smallest of 32, 48, 64, 96, 128, ... (powers of two and 1.5x them) >= length."""
  size = MIN_LENGTH_BUCKET
  while size < length:
    size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
  return size


def length_buckets(up_to):
  """The length buckets 32, 48, 64, ... up to the first >= up_to."""
  buckets = [MIN_LENGTH_BUCKET]
  while buckets[-1] < up_to:
    buckets.append(length_bucket(buckets[-1] + 1))
  return buckets


def geometric_buckets(smallest, largest, ratio, multiple=1):
  """smallest, smallest * ratio, smallest * ratio**2, ... while below largest, then largest
  rounded up to a multiple of `multiple`: about log_ratio(largest / smallest) + 1 buckets,
  each at most ratio times the one before (geometric_buckets(1, 64, 4) = [1, 4, 16, 64])."""
  if not (isinstance(ratio, int) and ratio >= 2 and isinstance(smallest, int) and
          smallest >= 1 and isinstance(largest, int) and largest >= 1):
    raise ValueError(f"geometric_buckets({smallest!r}, {largest!r}, ratio={ratio!r}): sizes "
                     "must be ints >= 1 and ratio an int >= 2.")
  top = -(-largest // multiple) * multiple
  buckets = []
  size = smallest
  while size < top:
    buckets.append(size)
    size *= ratio
  return buckets + [top]


def bucket_for(buckets, size):
  """The smallest of the ascending buckets >= size."""
  index = bisect.bisect_left(buckets, size)
  if index == len(buckets):
    raise ValueError(f"{size} exceeds the largest bucket, {buckets[-1]}, of {list(buckets)}.")
  return buckets[index]


def power_of_two_bucket(count, minimum=1):
  """Smallest power of two >= count and >= minimum (a power of two)."""
  return max(minimum, 1 << max(0, int(count) - 1).bit_length())


def save_bucket(count):
  """Blocks per copy from decode slots into the pool: the smallest power of 16 >= count, at
  least 16 (copies are small; few shapes matter more)."""
  size = 16
  while size < count:
    size *= 16
  return size


def power_of_four_bucket(count, minimum=1):
  """Smallest power of four >= count, times minimum (a power of two); for prefill and insert
  batches, whose sizes vary with arrivals, so that they compile for few shapes."""
  size = minimum
  while size < count:
    size *= 4
  return size


def slot_bounds(min_slots, max_slots, batch_shards):
  """(min_slots, max_slots) as an engine uses them: min_slots rounded up to a power of two and
  to at least the batch shards, max_slots (at least min_slots) to a multiple of them."""
  low = power_of_two_bucket(max(min_slots, batch_shards))
  return low, -(-max(max_slots, low) // batch_shards) * batch_shards


@dataclasses.dataclass(frozen=True)
class Grid:
  """An engine's shape buckets: slot batch sizes x cache lengths, and the prefill rows.

  Build it with Grid.build (defaults and validation); min_prefill_rows is the smallest
  prefill batch (the mesh's batch shards, as a power of two).
  """
  batch_sizes: tuple
  cache_lengths: tuple
  min_prefill_rows: int = 1

  @classmethod
  def build(cls, batch_sizes, cache_lengths, min_slots, max_slots, max_cache_length,
            batch_shards=1, block_size=16):
    """The grid (the defaults where batch_sizes or cache_lengths is None), validated against
    the slot bounds (slot_bounds' rounded values), the mesh's batch shards and the prefix
    cache's block size."""
    if batch_sizes is None:
      batch_sizes, size = [], min_slots
      while size < max_slots:
        batch_sizes.append(size)
        size *= 2
      batch_sizes.append(max_slots)
    if cache_lengths is None:
      cache_lengths = length_buckets(max_cache_length)
    for name, values in (("batch_sizes", batch_sizes), ("cache_lengths", cache_lengths)):
      values = list(values)
      if not values or not all(isinstance(v, int) and v >= 1 for v in values) or (
          values != sorted(set(values))):
        raise ValueError(f"{name}={values!r} must be a non-empty ascending list of distinct "
                         "positive ints.")
    batch_sizes, cache_lengths = tuple(batch_sizes), tuple(cache_lengths)
    if batch_sizes[0] < min_slots or batch_sizes[-1] != max_slots or any(
        size % batch_shards for size in batch_sizes):
      raise ValueError(
          f"batch_sizes={list(batch_sizes)} must run from min_slots={min_slots} (or more) "
          f"to exactly max_slots={max_slots}, in multiples of the mesh's {batch_shards} "
          "batch shard(s); e.g. geometric_buckets(min_slots, max_slots, 4).")
    if cache_lengths[-1] < max_cache_length or any(
        length % block_size for length in cache_lengths):
      raise ValueError(
          f"cache_lengths={list(cache_lengths)} must reach max_cache_length="
          f"{max_cache_length} and be multiples of prefix_block_size={block_size}; e.g. "
          f"geometric_buckets(32, {max_cache_length}, 4, multiple={block_size}).")
    return cls(batch_sizes, cache_lengths, power_of_two_bucket(batch_shards))

  def prefill_rows(self, count, batch_size):
    """Rows of a prefill of count prompts: a power of four, at most the slot batch."""
    return min(power_of_four_bucket(count, self.min_prefill_rows),
               max(batch_size, self.min_prefill_rows))

  def relayout_path(self, start, target):
    """The (batch, cache length) shapes from start to target, one bucket per step (batch
    first, then cache length), so that only neighbouring cells are ever relaid."""
    batches, lengths = self.batch_sizes, self.cache_lengths
    path, (batch_size, cache_length) = [], start
    while batch_size != target[0]:
      index = batches.index(batch_size)
      batch_size = batches[index + 1 if target[0] > batch_size else index - 1]
      path.append((batch_size, cache_length))
    while cache_length != target[1]:
      index = lengths.index(cache_length)
      cache_length = lengths[index + 1 if target[1] > cache_length else index - 1]
      path.append((batch_size, cache_length))
    return path

  def warm_cells(self, max_slots, max_cache_length, batch_sizes=None, max_length=None,
                 min_length=None):
    """The cells warm-up compiles: (sizes, lengths), the slot batches and cache lengths within
    bounds (each rounded up to a bucket; defaults: the whole grid up to max_cache_length)."""
    sizes = (list(self.batch_sizes) if batch_sizes is None else
             sorted({bucket_for(self.batch_sizes, min(b, max_slots)) for b in batch_sizes}))
    top = bucket_for(self.cache_lengths, min(max_length or max_cache_length, max_cache_length))
    bottom = bucket_for(self.cache_lengths, min(min_length or 1, top))
    return sizes, [x for x in self.cache_lengths if bottom <= x <= top]

  def neighbours(self, batch_size, cache_length, sizes, lengths):
    """The cells one bucket up from (batch_size, cache_length) within sizes x lengths: the
    relayouts relayout_path can ask for there (each to it and back)."""
    index = self.batch_sizes.index(batch_size)
    cells = [(x, cache_length) for x in self.batch_sizes[index + 1:index + 2] if x in sizes]
    index = self.cache_lengths.index(cache_length)
    cells += [(batch_size, x) for x in self.cache_lengths[index + 1:index + 2] if x in lengths]
    return cells
