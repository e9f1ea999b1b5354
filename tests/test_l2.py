"""The L2 model on its own: part bitmasks (contiguous and strided), hits, misses, LRU eviction."""

from megasim.sim.l2 import L2Cache


def test_contiguous_and_strided_parts():
    l2 = L2Cache(capacity_bytes=1e9, region_parts=[12], region_part_bytes=[10.0])
    # A strided write of parts 1, 4, 7, 10 makes exactly those resident.
    assert l2.access(0, 1, 12, 40.0, True, step=3) == 40.0        # writes always cost DRAM bytes
    assert l2.mask[0] == (1 << 1) | (1 << 4) | (1 << 7) | (1 << 10)
    assert l2.used == 40.0
    # Reading parts 0..5 (6 parts, 2 resident) misses 4/6 of its bytes.
    assert l2.access(0, 0, 6, 60.0, False) == 40.0
    # Now 0..5, 7, 10 are resident: the strided read 1, 4, 7, 10 hits entirely.
    assert l2.access(0, 1, 12, 40.0, False, step=3) == 0.0
    # Parts 2, 5, 8, 11: 8 and 11 are new.
    assert l2.access(0, 2, 12, 40.0, False, step=3) == 20.0
    assert l2.used == 10 * 10.0


def test_lru_eviction_never_evicts_the_region_being_accessed():
    l2 = L2Cache(capacity_bytes=100.0, region_parts=[4, 4, 8], region_part_bytes=[10.0, 10.0, 10.0])
    l2.access(0, 0, 4, 40.0, False)
    l2.access(1, 0, 4, 40.0, False)
    l2.access(0, 0, 1, 10.0, False)          # region 0 becomes most recently used
    l2.access(2, 0, 4, 40.0, False)          # 120 bytes > 100: evict region 1 (least recent)
    assert l2.mask[1] == 0 and l2.mask[0] != 0 and l2.used == 80.0
    assert l2.access(1, 0, 4, 40.0, False) == 40.0   # region 1 misses again
