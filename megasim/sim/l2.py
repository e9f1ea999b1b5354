"""The L2 cache model: regions with equal parts, resident or not, replaced least-recently-used.

The TaskGraph names what each task touches as (region, parts range(lo, hi, step), bytes). The cache keeps, per
region, a bitmask of resident parts and orders regions by last use. A read of parts [lo, hi) hits
for the fraction of those parts already resident and misses for the rest, which it then makes
resident; a write makes its parts resident and always costs DRAM bytes (the L2 is write-back, and
everything written is eventually written back). When resident bytes exceed the capacity, whole
regions are evicted, least recently used first (never the region just accessed).

This is an approximation of a sectored, set-associative cache with an undocumented replacement
policy: it captures capacity and reuse distance (what the megakernel paper's reuse types a, b, c
depend on), not conflicts or partition effects.
"""

from __future__ import annotations

from collections import OrderedDict


class L2Cache:
    def __init__(self, capacity_bytes: float, region_parts: list[int], region_part_bytes: list[float]) -> None:
        self.capacity = float(capacity_bytes)
        self.part_bytes = region_part_bytes
        self.mask = [0] * len(region_parts)
        self.count = [0] * len(region_parts)
        self.used = 0.0
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.evicted_bytes = 0.0
        self._masks: dict[tuple[int, int, int], tuple[int, int]] = {}   # part sets repeat across groups

    def parts(self, lo: int, hi: int, step: int = 1) -> tuple[int, int]:
        """The bitmask of parts range(lo, hi, step) and how many they are (one object per distinct range:
        the engine resolves each access's once, before the run)."""
        key = (lo, hi, step)
        cached = self._masks.get(key)
        if cached is None:
            if step == 1:
                count = hi - lo
                want = ((1 << count) - 1) << lo
            else:  # every step-th bit: sum of 2**(i*step) for i < count
                count = (hi - lo + step - 1) // step
                want = (((1 << (step * count)) - 1) // ((1 << step) - 1)) << lo
            cached = self._masks[key] = (want, count)
        return cached

    def access(self, region: int, lo: int, hi: int, nbytes: float, write: bool, step: int = 1) -> float:
        """Apply one access to parts range(lo, hi, step); return the bytes it moves to or from DRAM."""
        return self.access_parts(region, *self.parts(lo, hi, step), nbytes, write)

    def access_parts(self, region: int, want: int, count: int, nbytes: float, write: bool) -> float:
        """``access`` with the parts given as ``parts`` gives them (mask, count)."""
        cur = self.mask[region]
        new = want & ~cur
        if new:
            n_new = new.bit_count()
            self.mask[region] = cur | want
            self.count[region] += n_new
            self.used += n_new * self.part_bytes[region]
            miss = nbytes if write else nbytes * n_new / count
        else:
            miss = nbytes if write else 0.0
        lru = self.lru
        if region in lru:
            lru.move_to_end(region)
        else:
            lru[region] = None
        if self.used > self.capacity:
            self._evict(region)
        return miss

    def _evict(self, keep: int) -> None:
        lru = self.lru
        while self.used > self.capacity and len(lru) > 1:
            victim = next(iter(lru))
            if victim == keep:
                lru.move_to_end(victim)
                continue
            del lru[victim]
            freed = self.count[victim] * self.part_bytes[victim]
            self.used -= freed
            self.evicted_bytes += freed
            self.mask[victim] = 0
            self.count[victim] = 0

    def resident_bytes(self) -> float:
        return self.used
