"""The prefix cache's index: which token blocks have their KV in which page of the block pool.

  index = PrefixIndex(block_size=16, max_blocks=4096)
  pages = index.lookup(tokens)           # pool pages of the longest cached run of full blocks
  new = index.insert(tokens, pinned)     # [(block number, page)] to write, LRU leaves evicted
  index.clear()                          # the weights changed: every entry is stale

A block is block_size consecutive token positions starting at a multiple of block_size. Its
KV depends on every token up to its end, so an entry is keyed by (the entry of the previous
block, this block's token ids): a tree of blocks, one path per cached sequence, where shared
prefixes share their entries. Keys hold the token ids themselves (no hashing), so a hit is
exact. Only full blocks are cached; a sequence's partial last block is recomputed.

Eviction: when no page is free, the least recently used leaf (an entry no other entry
extends) not in `pinned` gives up its page. Evicting leaves only keeps every cached entry's
ancestors cached, so lookups never find a hole. The page count starts at min_blocks and
doubles, up to max_blocks, instead of evicting when that leaf has served a hit since it was
cached (the cache is earning its memory) or no leaf can be evicted; a workload whose prompts
share nothing keeps the first pool. The engine grows the device pool to match (pool_blocks).

Host-side and single-threaded: the engine thread owns it.
"""
import collections
import dataclasses


@dataclasses.dataclass
class _Entry:
  page: int
  parent: int  # entry id of the previous block; -1 for a sequence's first block
  tokens: tuple
  children: int = 0
  hits: int = 0  # times a later sequence found it cached


class PrefixIndex:
  """Block-granular index of cached prefixes with LRU eviction of leaves.

  Args:
    block_size: tokens per block (positive int).
    max_blocks: most pages (the memory budget divided by one block's KV bytes).
    min_blocks: pages of the first pool; doubled when full, up to max_blocks.
  """

  def __init__(self, block_size, max_blocks, min_blocks=64):
    if not isinstance(block_size, int) or block_size < 1:
      raise ValueError(f"block_size={block_size!r} must be a positive int.")
    if not isinstance(max_blocks, int) or max_blocks < 1:
      raise ValueError(f"max_blocks={max_blocks!r} must be a positive int: raise the prefix "
                       "cache's memory budget to hold at least one block.")
    self.block_size = block_size
    self.max_blocks = max_blocks
    self.pool_blocks = min(max_blocks, max(1, min_blocks))
    self._free = list(range(self.pool_blocks - 1, -1, -1))
    self._entries = {}  # entry id -> _Entry
    self._by_key = {}  # (parent id, tokens) -> entry id
    self._recency = collections.OrderedDict()  # entry id -> None, least recent first
    self._next_id = 0
    self.evictions = 0

  def __len__(self):
    return len(self._entries)

  def clear(self):
    self._entries.clear()
    self._by_key.clear()
    self._recency.clear()
    self._free = list(range(self.pool_blocks - 1, -1, -1))

  def _chain(self, tokens):
    """Entry ids of the longest run of cached full blocks at the start of tokens."""
    chain, parent = [], -1
    size = self.block_size
    for start in range(0, len(tokens) - size + 1, size):
      entry_id = self._by_key.get((parent, tuple(tokens[start:start + size])))
      if entry_id is None:
        break
      chain.append(entry_id)
      parent = entry_id
    return chain

  def _touch(self, chain):
    for entry_id in chain:
      self._recency.move_to_end(entry_id)
      self._entries[entry_id].hits += 1

  def lookup(self, tokens):
    """Pool pages of the longest cached run of full blocks at the start of tokens (in order);
    marks them most recently used."""
    chain = self._chain(tokens)
    self._touch(chain)
    return [self._entries[entry_id].page for entry_id in chain]

  def grow(self, blocks):
    """Raises the page count to blocks (at most max_blocks; never lowers it)."""
    grown = min(self.max_blocks, blocks)
    if grown > self.pool_blocks:
      self._free = list(range(grown - 1, self.pool_blocks - 1, -1)) + self._free
      self.pool_blocks = grown

  def _page(self, pinned):
    """A free page, growing the pool or evicting the LRU unpinned leaf (module docstring);
    None if none can be had."""
    if not self._free:
      victim = next((entry_id for entry_id in self._recency
                     if self._entries[entry_id].children == 0 and
                     self._entries[entry_id].page not in pinned), None)
      if self.pool_blocks < self.max_blocks and (
          victim is None or self._entries[victim].hits):
        self.grow(2 * self.pool_blocks)
      elif victim is not None:
        page = self._entries[victim].page
        self._remove(victim)
        self.evictions += 1
        return page
    return self._free.pop() if self._free else None

  def _remove(self, entry_id):
    entry = self._entries.pop(entry_id)
    del self._by_key[(entry.parent, entry.tokens)]
    del self._recency[entry_id]
    if entry.parent >= 0:
      self._entries[entry.parent].children -= 1

  def insert(self, tokens, pinned):
    """Adds the full blocks of tokens that are not cached yet.

    Args:
      tokens: the sequence whose KV the caller holds for every position of every full block.
      pinned: a set of pages that must not be evicted (the pages of blocks being written in
        the same device call, and of the chain inserted to); this call adds its pages to it.
    Returns:
      [(block number, page)] for the new blocks, in order: the caller writes block b's KV
      (positions b * block_size ...) to that page. Fewer than asked when every page is pinned.
    """
    chain = self._chain(tokens)
    self._touch(chain)
    pinned.update(self._entries[entry_id].page for entry_id in chain)
    parent = chain[-1] if chain else -1
    size = self.block_size
    written = []
    for block in range(len(chain), len(tokens) // size):
      page = self._page(pinned)
      if page is None:
        break
      key = (parent, tuple(tokens[block * size:(block + 1) * size]))
      entry_id = self._next_id
      self._next_id += 1
      self._entries[entry_id] = _Entry(page, parent, key[1])
      self._by_key[key] = entry_id
      self._recency[entry_id] = None
      if parent >= 0:
        self._entries[parent].children += 1
      pinned.add(page)
      written.append((block, page))
      parent = entry_id
    return written
