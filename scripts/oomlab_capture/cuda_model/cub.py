"""The temporary storage of the CUB algorithms ATen calls (CCCL 3.0, CUDA 13), as the device dispatchers size it.

at::cuda::cub's CUB_WRAPPER (ATen/cuda/cub.cuh) asks each algorithm for temp_storage_bytes with a null buffer,
then takes exactly that from the caching allocator and frees it after the launch: one block per call. The sizes
are AliasTemporaries' (cub/util_temporary_storage.cuh: each piece rounded up to 256 bytes, 255 more for the
alignment) of each dispatcher's pieces, with the tile sizes of the sm_90 tunings (cub/device/dispatch/tuning/
tuning_*.cuh; sm_90 has no reduce tuning, so DeviceReduce takes sm_60's). Checked on an H200: 46
embedding_dense_backward calls, 180 nonzero and 40 index_put calls (docs/parity.md, "Predicting without a GPU").
Another architecture tunes other tiles: its sizes here are sm_90's, a few KiB apart at most.
"""


def cdiv(a, b):
    return -(-a // b)


def a256(x):
    return cdiv(x, 256) * 256


def alias(sizes):
    """AliasTemporaries: the pieces rounded to 256 bytes, plus 255."""
    return sum(a256(s) for s in sizes) + 255


def radix_sort_pairs(n, key_size=8, bits=None, value_size=8):
    """DeviceRadixSort::SortPairs (pointers, so is_overwrite_okay false; n as int64, so 64-bit offsets), bits
    [0, bits) (the whole key when None): onesweep; the extra key and value buffers only for more than one
    pass."""
    single_tile, tile = (2304, 4608) if key_size == 8 else (4864, 6528)
    if n <= single_tile:
        return 1
    passes = cdiv(8 * key_size if bits is None else bits, 8)
    portion = ((1 << 28) - 1) // tile * tile
    portions = cdiv(n, portion)
    blocks = cdiv(min(n, portion), tile)
    extra = n if passes > 1 else 0
    return alias([portions * passes * 256 * 8, blocks * 256 * 4, extra * key_size, extra * value_size,
                  portions * passes * 4])


def tile_state(tiles, word):
    """ScanTileState's descriptors ((32 + tiles) words), wrapped by the dispatcher's own AliasTemporaries."""
    return a256(word * (32 + tiles)) + 511


def unique_by_key(n, key_size):
    return tile_state(cdiv(n, 640 * 7 if key_size == 8 else 512 * 14), 16)


def exclusive_sum(m, key_size):
    return tile_state(cdiv(m, 128 * 7 if key_size == 8 else 128 * 15), 16 if key_size == 8 else 8)


def scan_by_key(n, key_size):
    t = cdiv(n, 224 * 11 if key_size == 8 else 288 * 14)
    return a256(16 * (t + 32)) + a256(key_size * (t + 1)) + 255


def reduce_sum(n, sm_count, occupancy=8):
    """DeviceReduce::Sum into an int (nonzero's count): one tile (256 x 16) needs 1 byte; else the even-share
    grid's partials, occupancy (8 blocks per SM, measured register use) x SMs x 5 ints."""
    if n <= 256 * 16:
        return 1
    return alias([occupancy * sm_count * 5 * 4])


def select_flagged(n):
    """DeviceSelect::Flagged (counting iterator, int count): ScanTileState<int> over tiles of 384 x 11."""
    return alias([alias([(32 + cdiv(n, 384 * 11)) * 8, 0, 0]), 0, 0])
