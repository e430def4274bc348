"""Exact kNN over a Dask cluster: reference shards on the workers, one associative merge.

``shard`` mode: every worker searches its row shard of the references (on its
GPU when it has one, else its CPU) for all queries and returns its local top k
under (distance, **global** index), global index = the shard's first row + the
local row. Lists are merged by (key, global index), an associative and
commutative rule, so any number of workers, chunking or completion order gives
exactly the single-process answer. The key is the pair's float64 exact score
for the metrics the engine orders in float64 (so pairs whose float32 distances
tie are ordered as one process orders them), the reported score otherwise.

``replicate`` mode: every worker gets all references and a block of queries
(a plain single-process search per block); ``auto`` replicates references up to
``REPLICATE_MAX_BYTES`` and shards larger ones. Only host arrays travel
between workers (Dask cannot move CUDA tensors between processes).

Results travel small and early: indices as int32 while the reference count is
below ``INT32_WIRE_LIMIT`` (widened to int64 where they are assembled), the
float64 merge keys stay on the workers (only the merges between workers move
them), and the client fills its output from each query block (replicate) or
query batch (shard) as it completes, so the transfers overlap the searches
still running. With a dask array as the queries (an all-kNN's: the
references) the results stay on the workers, as dask arrays chunked as it.

Radius queries (:func:`radius_neighbors`) take the same layouts: each shard
(or query block) lists every reference within the radius by the float64 exact
distance that one process uses (:mod:`gpumine.neighbors._radius`), with global
indices; the client concatenates the lists and orders each row by (distance,
index), so the answer is one process's whatever the sharding.
"""

from __future__ import annotations

import numpy as np

__all__ = ["kneighbors", "radius_neighbors", "NearestNeighbors", "REPLICATE_MAX_BYTES"]

REPLICATE_MAX_BYTES = 1 << 30
QUERY_BATCH_BYTES = 1 << 28
# bytes of float64 neighbour rows a shard forms its merge keys from at a time
KEY_BLOCK_BYTES = 1 << 28
# neighbour indices travel between processes as int32 when every global row fits (fewer references
# than this), and are widened to int64 (what one process returns) where they arrive
INT32_WIRE_LIMIT = 1 << 31
# replicate mode: query blocks per worker (so that the results of finished blocks travel to the client
# while the worker searches its next one) and the fewest rows a block is cut to for that
REPLICATE_BLOCKS_PER_WORKER = 4
REPLICATE_MIN_BLOCK_ROWS = 1 << 15
_FLOAT64_ORDER = ("euclidean", "sqeuclidean", "manhattan", "chebyshev", "minkowski")


def _client(client):
    if client is not None:
        return client
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        raise ValueError("no Dask client: start one (distributed.Client() or dask_cuda.LocalCUDACluster) or pass "
                         "client=") from None


def _row_blocks(X, n_blocks: int):
    """``[(first_row, block)]``: a dask array's row chunks (as delayed blocks), or NumPy row blocks."""
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask comes with distributed
        da = None
    if da is not None and isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got {X.ndim}-D")
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})  # a row shard holds whole rows
        starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(np.int64)
        return [(int(s), block) for s, block in zip(starts, X.to_delayed().ravel())], X.shape[0]
    X = np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {X.shape}")
    bounds = np.linspace(0, X.shape[0], max(1, min(n_blocks, X.shape[0])) + 1).astype(np.int64)
    return [(int(a), X[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a], X.shape[0]


def _as_numpy(X, client=None):
    """``X`` as a NumPy array on the client (a dask array computed on ``client``, else on the default scheduler)."""
    import dask.array as da

    if isinstance(X, da.Array):
        # on the given client: a persisted array's blocks live on its cluster, not on the default scheduler
        return X.compute() if client is None else client.compute(X).result()
    return np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X)


def _search_shard(shard, queries, k: int, first_row: int, exclude_self: bool, metric: str, p, device, working_memory,
                  query_offset: int = 0, backend=None, precision: str = "exact", index_dtype=np.int64):
    """A shard's top k of every query: (keys, global indices, reported distances), padded with (inf, -1, inf).

    ``query_offset``: the global row of ``queries[0]`` (an all-kNN's query batch); ``index_dtype``: of the
    global indices (int32 on the wire when they fit, see :func:`_wire_index_dtype`).
    """
    import torch

    from gpumine.utils._validation import check_array
    from gpumine.config import resolve_device
    from gpumine.core.distance import get_metric
    from gpumine.neighbors import kneighbors

    shard = np.asarray(shard)
    n_rows, n_query = shard.shape[0], queries.shape[0]
    width = min(k + 1 if exclude_self else k, n_rows)
    dist, index = kneighbors(shard, queries, width, metric=metric, p=p, device=device, working_memory=working_memory,
                             backend=backend, precision=precision)
    dist, index = np.asarray(dist), np.asarray(index)
    keep = np.ones(index.shape, dtype=bool)
    if exclude_self:  # query i is global row query_offset + i
        keep = _keep_others(index, np.arange(n_query)[:, None] + query_offset - first_row, width == k + 1)
    metric_obj = get_metric(metric, p)
    if metric_obj.name in _FLOAT64_ORDER:
        # the pair's float64 exact score: the order one process gives such searches; formed on
        # the worker's device (per pair, so the same values anywhere) in blocks of queries
        on = resolve_device(device)
        R = check_array(shard, name="X_ref").to(on)
        Q = check_array(queries, name="X_query")
        found = torch.from_numpy(index)
        keys = np.empty(index.shape, dtype=np.float64)
        rows = max(1, KEY_BLOCK_BYTES // max(1, 8 * width * shard.shape[1]))
        for q0 in range(0, n_query, rows):
            block = found[q0 : q0 + rows].to(on)
            neighbours = R.index_select(0, block.reshape(-1)).view(*block.shape, -1).to(torch.float64)
            keys[q0 : q0 + rows] = metric_obj.exact_scores(Q[q0 : q0 + rows].to(on, torch.float64), neighbours).cpu().numpy()
    else:
        keys = -dist.astype(np.float64) if metric_obj.name == "inner_product" else dist.astype(np.float64)
    out = min(k, width)
    order = np.argsort(~keep, axis=1, kind="stable")[:, :out]  # kept entries first, in their order
    kept = np.take_along_axis(keep, order, 1)
    keys = np.where(kept, np.take_along_axis(keys, order, 1), np.inf)
    index = np.where(kept, np.take_along_axis(index, order, 1) + first_row, -1)
    dist = np.where(kept, np.take_along_axis(dist, order, 1), np.inf).astype(dist.dtype)
    return keys, index.astype(index_dtype), dist


def _merge_order(keys: np.ndarray, index: np.ndarray, k: int, device) -> np.ndarray:
    """``np.lexsort((index, keys), axis=1)[:, :k]`` by two stable sorts on ``device``."""
    import torch

    keys_t, index_t = torch.from_numpy(keys).to(device), torch.from_numpy(index).to(device)
    by_index = torch.argsort(index_t, dim=1, stable=True)
    by_key = torch.argsort(keys_t.gather(1, by_index), dim=1, stable=True)
    return by_index.gather(1, by_key)[:, :k].cpu().numpy()


def _keep_others(index: np.ndarray, own: np.ndarray, searched_extra: bool) -> np.ndarray:
    """Mask of listed neighbours other than each row's own point (``own``: its local row); where it is not
    listed and one extra neighbour was searched, the last one goes instead."""
    is_own = index == own
    keep = ~is_own
    if searched_extra:
        keep[~is_own.any(1), -1] = False
    return keep


def _merge(a, b, k: int):
    """The best ``k`` of two lists of the same rows by (key, global index): associative and commutative.

    Sorted on the worker's GPU when it has one (two stable sorts: by index, then by key; the
    same order as NumPy's lexsort, which took seconds for millions of rows on one core).
    """
    import torch

    keys = np.concatenate([a[0], b[0]], 1)
    index = np.concatenate([a[1], b[1]], 1)
    dist = np.concatenate([a[2], b[2]], 1)
    if torch.cuda.is_available() and keys.size:
        order = _merge_order(keys, index, k, torch.device("cuda"))
    else:
        order = np.lexsort((index, keys), axis=1)[:, :k]
    return (np.take_along_axis(keys, order, 1), np.take_along_axis(index, order, 1), np.take_along_axis(dist, order, 1))


def _computed(client, block):
    """A future of a dask block under a key of its own (a block's content key, released by an earlier call
    just as a new call asks for it again, was lost to that call's tasks)."""
    from dask import delayed

    return client.compute(delayed(np.asarray, pure=False)(block))


def tree_reduce(client, parts: list, combine, *args):
    """``combine`` applied pairwise over the futures ``parts`` in a tree on the cluster; the result (None if none).

    ``combine(a, b, *args)`` must be associative. Every future stays referenced until the end: an
    input released while a dependent waits for it can be lost to the dependent.
    """
    final, held = _tree_reduce_future(client, parts, combine, *args)
    result = final.result() if final is not None else None
    del held
    return result


def _tree_reduce_future(client, parts: list, combine, *args):
    """``(future of the reduction or None, every future of the tree)``: :func:`tree_reduce` without waiting;
    the caller holds the list until it has what it needs from the reduction."""
    held = list(parts)
    while len(parts) > 1:
        paired = [client.submit(combine, parts[i], parts[i + 1], *args, pure=False) for i in range(0, len(parts) - 1, 2)]
        held.extend(paired)
        parts = paired + ([parts[-1]] if len(parts) % 2 else [])
    return (parts[0] if parts else None), held


def _wire_index_dtype(n_ref: int):
    """The dtype global indices travel in between processes: int32 while every row fits, else int64."""
    return np.int32 if n_ref < INT32_WIRE_LIMIT else np.int64


def _strip_keys(merged, index_dtype):
    """A shard-mode reduction's (distances, indices) without its float64 keys, indices in ``index_dtype``."""
    return merged[2], merged[1].astype(index_dtype, copy=False)


def _rows_of(which: int, parts: list, slices: list):
    """One output chunk on a worker: the rows ``slices[i]`` of array ``which`` (0: distances, 1: indices,
    widened to int64, one process's dtype) of each ``(distances, indices)`` block of ``parts``, stacked."""
    out = np.concatenate([part[which][sl] for part, sl in zip(parts, slices)])
    return out.astype(np.int64, copy=False) if which == 1 else out


def _dtype_of(array):
    return array.dtype


def _search_block(ref, queries, k, exclude_from, metric, p, device, working_memory, backend=None, precision="exact",
                  index_dtype=np.int64):
    """Replicate mode: all references, a block of queries (``exclude_from``: the block's first row in an all-kNN).

    ``queries``: the block, or ``(first, stop)``: the rows ``ref[first:stop]`` (an all-kNN's block, which
    then travels with the references only). Indices come back in ``index_dtype``. On a GPU the
    references are searched from the worker's device copy (:func:`_device_copy`), and an all-kNN
    block's results stay there until they are cut to k and narrowed to ``index_dtype``.
    """
    import torch

    from gpumine.neighbors import kneighbors

    ref = _device_copy(ref, device)
    if isinstance(queries, tuple):
        queries = ref[queries[0] : queries[1]]
    common = dict(metric=metric, p=p, device=device, working_memory=working_memory, backend=backend, precision=precision)
    if exclude_from is None:
        dist, index = kneighbors(ref, queries, k, **common)
        return _host(dist), _host(index, index_dtype)
    # an all-kNN block: the whole search once per block would redo every block; search k + 1 and drop each row itself
    dist, index = kneighbors(ref, queries, min(k + 1, ref.shape[0]), **common)
    rows = torch.arange(queries.shape[0], device=index.device) if torch.is_tensor(index) else np.arange(queries.shape[0])
    keep = _keep_others(index, rows[:, None] + exclude_from, True)
    n = len(keep)
    return _host(dist[keep].reshape(n, -1)[:, :k]), _host(index[keep].reshape(n, -1)[:, :k], index_dtype)


def _host(values, dtype=None) -> np.ndarray:
    """A result as a NumPy array (from a tensor on any device), cast to ``dtype`` where given (on the
    tensor's device, so fewer bytes cross to the host)."""
    import torch

    if torch.is_tensor(values):
        if dtype is not None:
            values = values.to(torch.int32 if np.dtype(dtype) == np.int32 else torch.int64)
        return values.cpu().numpy()
    values = np.asarray(values)
    return values if dtype is None else values.astype(dtype, copy=False)


# a worker's device copies of the host arrays its tasks search again and again (replicate mode's
# references: one task per query block), keyed by the array and dropped when the array is
_DEVICE_COPIES: dict = {}


def _device_copy(array, device):
    """``array`` validated and copied to ``device`` once while it lives, when that is a GPU; else ``array``.

    Each search from a host array pays its copy, validation and summary passes
    (a tenth of a 500,000-query block's search over 4M x 8 references); a task
    reusing the copy of the references its worker holds pays them once.
    """
    import weakref

    from gpumine.config import resolve_device
    from gpumine.utils._validation import check_array

    dev = resolve_device(device)
    if dev.type != "cuda" or not isinstance(array, np.ndarray):
        return array
    key = (id(array), str(dev))
    held = _DEVICE_COPIES.get(key)
    if held is not None and held[0]() is array:
        return held[1]
    tensor = check_array(array, name="X_ref").to(dev)
    _DEVICE_COPIES[key] = (weakref.ref(array), tensor)
    weakref.finalize(array, _DEVICE_COPIES.pop, key, None)
    return tensor


def kneighbors(X_ref, X_query=None, k: int = 5, *, metric: str = "euclidean", p=None, mode: str = "auto", client=None,
               device="auto", working_memory=None, return_distance: bool = True, batch_rows: int | None = None,
               backend=None, precision: str = "exact"):
    """Exact k nearest neighbours on a Dask cluster: the same answer as :func:`gpumine.neighbors.kneighbors`.

    Parameters
    ----------
    X_ref : dask.array (chunked by rows), NumPy array or pandas DataFrame
        The references; a dask array's row chunks are the shards.
    X_query : same kinds, optional
        The queries (``None``: the references themselves, each point excluded
        from its own list). Shard mode broadcasts them to every worker (per
        batch); replicate mode sends each block of them to one worker (an
        all-kNN's blocks are rows of the references the workers hold).
    k, metric, p, device, working_memory, backend, precision
        As :func:`gpumine.neighbors.kneighbors`; ``device`` is resolved on each
        worker ("auto": its GPU when it has one). ``backend`` and ``precision``
        change the speed only, never the answer.
    mode : {"auto", "shard", "replicate"}
        See the module docstring.
    client : distributed.Client, optional
        Default: the current client.
    batch_rows : int, optional
        Shard mode: queries broadcast per batch of this many rows (default:
        batches of about ``QUERY_BATCH_BYTES``), so a worker holds two batches of
        queries and their (batch x k) lists at a time whatever the query count
        (the next batch is searched while the previous one's results travel).

    Returns
    -------
    distances, indices : NumPy arrays (n_queries, k), or dask arrays when the queries were one
        Indices are global rows of ``X_ref`` (int64, as one process returns
        them). Dask arrays are chunked as the queries and their chunks stay on
        the workers (nothing is gathered through the client): compute them
        while the cluster runs, with the default client or ``client.compute``.
    """
    like = X_ref if X_query is None else X_query
    client, n_query, waves = _kneighbors_waves(X_ref, X_query, k, metric=metric, p=p, mode=mode, client=client,
                                               device=device, working_memory=working_memory, batch_rows=batch_rows,
                                               backend=backend, precision=precision)
    if _is_dask_array(like) and n_query:
        return _dask_outputs(client, waves, like.chunks[0], k, return_distance)
    dist, index = _gather_into(client, waves, n_query, k)
    return _outputs(dist, index, like, return_distance)


def _is_dask_array(X) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask comes with distributed
        return False
    return isinstance(X, da.Array)


def _kneighbors_arrays(X_ref, X_query, k, *, metric, p, mode, client, device, working_memory, batch_rows, backend,
                       precision):
    """:func:`kneighbors`'s search: (distances, indices) as NumPy arrays whatever the inputs' kinds."""
    client, n_query, waves = _kneighbors_waves(X_ref, X_query, k, metric=metric, p=p, mode=mode, client=client,
                                               device=device, working_memory=working_memory, batch_rows=batch_rows,
                                               backend=backend, precision=precision)
    return _gather_into(client, waves, n_query, k)


def _kneighbors_waves(X_ref, X_query, k, *, metric, p, mode, client, device, working_memory, batch_rows, backend,
                      precision):
    """The arguments checked, then ``(client, n_queries, waves)``.

    ``waves`` submits the search one round of tasks at a time as it is iterated (replicate mode: one
    round of query blocks; shard mode: one per query batch) and yields ``(blocks, held)`` per round:
    ``blocks`` the ``(first_row, stop_row, future)`` of its (distances, indices in the wire dtype)
    in query order, ``held`` the futures to keep until they are collected.
    """
    if mode not in ("auto", "shard", "replicate"):
        raise ValueError(f"mode must be 'auto', 'shard' or 'replicate'; got {mode!r}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer; got {k!r}")
    client = _client(client)
    n_workers = max(1, len(client.scheduler_info()["workers"]))
    exclude_self = X_query is None
    queries = _as_numpy(X_ref if exclude_self else X_query, client)
    blocks, n_ref = _row_blocks(X_ref, n_workers)
    limit = n_ref - (1 if exclude_self else 0)
    if k > limit:
        raise ValueError(f"k={k} exceeds the {limit} reference rows available"
                         f"{' (each query is excluded from its own neighbours)' if exclude_self else ''}")
    ref_bytes = int(np.prod(queries.shape[1:], dtype=np.int64)) * n_ref * queries.itemsize
    if mode == "auto":
        mode = "replicate" if ref_bytes <= REPLICATE_MAX_BYTES else "shard"
    common = dict(metric=metric, p=p, device=device, working_memory=working_memory, backend=backend,
                  precision=precision, index_dtype=_wire_index_dtype(n_ref))
    if mode == "replicate":
        ref = queries if exclude_self else _as_numpy(X_ref, client)
        return client, queries.shape[0], _replicate_waves(client, ref, queries, k, exclude_self, n_workers, common)
    if batch_rows is None:
        batch_rows = max(1, QUERY_BATCH_BYTES // max(1, queries.itemsize * queries.shape[1]))
    elif isinstance(batch_rows, bool) or not isinstance(batch_rows, (int, np.integer)) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a positive integer or None; got {batch_rows!r}")
    return client, queries.shape[0], _shard_waves(client, blocks, queries, k, exclude_self, int(batch_rows), common)


def _replicate_spans(n_query: int, n_workers: int) -> list:
    """Replicate mode's query blocks ``[(first, stop)]``: one per worker, up to ``REPLICATE_BLOCKS_PER_WORKER``
    per worker when every block keeps ``REPLICATE_MIN_BLOCK_ROWS`` rows (the overlap of transfers and searches
    is worth a task's overhead then)."""
    per_worker = min(REPLICATE_BLOCKS_PER_WORKER, max(1, n_query // max(1, n_workers * REPLICATE_MIN_BLOCK_ROWS)))
    bounds = np.linspace(0, n_query, n_workers * max(1, per_worker) + 1).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _replicate_waves(client, ref, queries, k, exclude_self, n_workers, common):
    """Replicate mode: the references broadcast once, the query blocks searched wherever a worker is free."""
    ref_future = client.scatter(ref, broadcast=True, hash=False)
    spans = _replicate_spans(queries.shape[0], n_workers)
    if exclude_self:  # an all-kNN's queries are the references the workers hold: a block travels as its bounds
        parts = spans
    else:  # each block to one worker (round robin), its search placed with it
        parts = client.scatter([queries[a:b] for a, b in spans], hash=False) if spans else []
    futures = [client.submit(_search_block, ref_future, part, k, a if exclude_self else None, pure=False, **common)
               for (a, _), part in zip(spans, parts)]
    yield [(a, b, f) for (a, b), f in zip(spans, futures)], [ref_future] + ([] if exclude_self else list(parts))


def _shard_waves(client, blocks, queries, k, exclude_self, batch_rows, common):
    """Shard mode: every shard searches each query batch, the lists merged in a tree on the workers, their keys
    dropped there; a batch is submitted when the previous one's results are asked for."""
    # a dask array's blocks are computed where the scheduler puts them, NumPy blocks scattered; once for all batches
    shards = [(first_row, client.scatter(block, hash=False) if isinstance(block, np.ndarray)
               else _computed(client, block)) for first_row, block in blocks]
    wire = common["index_dtype"]
    n_query = queries.shape[0]
    for q0 in range(0, n_query, batch_rows):
        batch = client.scatter(queries[q0 : q0 + batch_rows], broadcast=True, hash=False)
        parts = [client.submit(_search_shard, shard, batch, k, first_row, exclude_self, pure=False,
                               query_offset=q0, **common) for first_row, shard in shards]
        merged, held = _tree_reduce_future(client, parts, _merge, k)
        final = client.submit(_strip_keys, merged, wire, pure=False)
        yield [(q0, min(q0 + batch_rows, n_query), final)], held + [batch] + [shard for _, shard in shards]
        del batch, parts, merged, held, final


def _collected(waves, collect):
    """``collect(blocks)`` on each round of ``waves``, the next round submitted before (its tasks run while
    the previous round's results travel); every round's futures held until it is collected."""
    pending = None
    for wave in waves:
        if pending is not None:
            collect(pending[0])
        pending = wave
    if pending is not None:
        collect(pending[0])
    del pending


def _gather_into(client, waves, n_query: int, k: int):
    """(distances, int64 indices) on the client, each block copied into place as soon as it arrives."""
    from distributed import as_completed

    out = {}

    def collect(blocks):
        where = {f.key: (a, b) for a, b, f in blocks}
        # on the client's loop: it need not be the default client
        for future, (dist, index) in as_completed([f for _, _, f in blocks], loop=client.loop, with_results=True):
            a, b = where[future.key]
            if not out:
                out["dist"] = np.empty((n_query, dist.shape[1]), dist.dtype)
                out["index"] = np.empty((n_query, index.shape[1]), np.int64)
            out["dist"][a:b] = dist
            out["index"][a:b] = index  # widened from the wire dtype

    _collected(waves, collect)
    if not out:
        return np.zeros((0, k)), np.zeros((0, k), np.int64)
    return out["dist"], out["index"]


def _dask_outputs(client, waves, row_chunks, k: int, return_distance: bool):
    """Dask arrays chunked as ``row_chunks`` whose chunks are assembled on the workers (nothing through the
    client): every round's results computed, then one task per output chunk and array."""
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph
    from distributed import as_completed

    done = []

    def wait(futures):  # distributed.wait needs the default client; this one need not be
        for _ in as_completed(futures, loop=client.loop):
            pass

    def collect(blocks):
        wait([f for _, _, f in blocks])
        done.extend(blocks)

    _collected(waves, collect)
    for _, _, f in done:
        if f.status == "error":
            f.result()  # raises the task's error
    starts = np.concatenate([[0], np.cumsum(row_chunks)]).astype(np.int64)
    outputs = []
    for which in ((0, 1) if return_distance else (1,)):
        chunks = []
        for c0, c1 in zip(starts[:-1], starts[1:]):
            over = [(f, slice(max(c0, a) - a, min(c1, b) - a)) for a, b, f in done if a < c1 and b > c0]
            if not over:  # a chunk of no rows: none of a block's
                over = [(done[0][2], slice(0, 0))]
            chunks.append((int(c1 - c0), client.submit(_rows_of, which, [f for f, _ in over], [sl for _, sl in over],
                                                       pure=False)))
        wait([f for _, f in chunks])
        for _, f in chunks:
            if f.status == "error":
                f.result()
        dtype = client.submit(_dtype_of, chunks[0][1], pure=False).result()
        # one graph of the chunks' futures, chunked exactly as the queries (empty chunks too)
        name = f"kneighbors-{'distances' if which == 0 else 'indices'}-{tokenize(*(f.key for _, f in chunks))}"
        layer = {(name, i, 0): f for i, (_, f) in enumerate(chunks)}
        outputs.append(da.Array(HighLevelGraph.from_collections(name, layer, dependencies=()), name,
                                chunks=(tuple(rows for rows, _ in chunks), (k,)), dtype=dtype))
    return tuple(outputs) if return_distance else outputs[0]


def _torch_dtype(dtype):
    """The dtype :func:`gpumine.utils._validation.check_array` computes data of NumPy dtype ``dtype`` in."""
    import torch

    return torch.float32 if np.dtype(dtype) in (np.float32, np.float16) else torch.float64


def _radius_part(ref, first_row, queries, query_offset, radius, exclude_self, metric, p, dtype, device,
                 working_memory):
    """Every reference of ``ref`` (global rows from ``first_row``) within ``radius`` of each query (global rows
    from ``query_offset`` when ``exclude_self``): ``(query rows, global indices, float64 distances)``."""
    from gpumine.utils._validation import check_array
    from gpumine.config import resolve_device, working_memory_bytes
    from gpumine.core.distance import get_metric
    from gpumine.neighbors._radius import radius_search

    dev = resolve_device(device)
    R = check_array(np.asarray(ref), name="X_ref", dtype=dtype)
    Q = check_array(queries, name="X_query", dtype=dtype, allow_empty=True)
    indptr, cols, dist = radius_search(R, Q, radius, get_metric(metric, p), exclude_self=False, device=dev,
                                       budget_bytes=working_memory_bytes(working_memory, dev))
    rows = np.repeat(np.arange(Q.shape[0], dtype=np.int64), np.diff(indptr)) + query_offset
    cols = cols + first_row
    if exclude_self:  # the query's own row (its duplicates stay), as one process's search of the references
        keep = cols != rows
        rows, cols, dist = rows[keep], cols[keep], dist[keep]
    return rows, cols, dist


def _radius_arrays(X_ref, X_query, radius, *, metric, p, mode, client, device, working_memory, batch_rows):
    """``(indptr, indices, float64 distances, output dtype)``: CSR rows of every reference within ``radius``
    of each query, ordered by (distance, index)."""
    import dask.array as da
    import torch

    from gpumine.core.distance import get_metric
    from gpumine.neighbors._radius import RADIUS_METRICS

    if mode not in ("auto", "shard", "replicate"):
        raise ValueError(f"mode must be 'auto', 'shard' or 'replicate'; got {mode!r}")
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.number)) or not float(radius) >= 0:
        raise ValueError(f"radius must be a number >= 0; got {radius!r}")
    metric_obj = get_metric(metric, p)
    if metric_obj.name not in RADIUS_METRICS:
        raise ValueError(f"radius queries support the metrics {RADIUS_METRICS}; got {metric_obj.name!r}")
    client = _client(client)
    n_workers = max(1, len(client.scheduler_info()["workers"]))
    if not isinstance(X_ref, da.Array):
        X_ref = _as_numpy(X_ref)
    if X_ref.ndim != 2:
        raise ValueError(f"X_ref must be 2-D (n_samples, n_features); got shape {X_ref.shape}")
    exclude_self = X_query is None
    queries = _as_numpy(X_ref if exclude_self else X_query, client)
    if queries.ndim != 2:
        raise ValueError(f"X_query must be 2-D (n_queries, n_features); got shape {queries.shape}")
    # one process computes both sides in float64 when either is float64 (radius_neighbors' _prepare)
    dtype = _torch_dtype(X_ref.dtype)
    if not exclude_self and _torch_dtype(queries.dtype) == torch.float64:
        dtype = torch.float64
    blocks, n_ref = _row_blocks(X_ref, n_workers)
    n_features = X_ref.shape[1]
    if not exclude_self and queries.shape[1] != n_features:
        raise ValueError(f"X_query has {queries.shape[1]} features but X_ref has {n_features}; "
                         "queries need the same columns as the reference set")
    itemsize = np.dtype(np.float32 if dtype == torch.float32 else np.float64).itemsize
    if mode == "auto":
        mode = "replicate" if n_features * n_ref * itemsize <= REPLICATE_MAX_BYTES else "shard"
    p_arg = metric_obj.p if metric_obj.name == "minkowski" else None
    common = dict(metric=metric_obj.name, p=p_arg, dtype=dtype, device=device, working_memory=working_memory)
    radius = float(radius)
    if mode == "replicate":
        ref_future = client.scatter(_as_numpy(X_ref, client), broadcast=True, hash=False)
        bounds = np.linspace(0, queries.shape[0], n_workers + 1).astype(np.int64)
        futures = [client.submit(_radius_part, ref_future, 0, queries[a:b], int(a), radius, exclude_self, pure=False,
                                 **common) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        found = client.gather(futures)
        del ref_future
    else:
        if batch_rows is None:
            batch_rows = max(1, QUERY_BATCH_BYTES // max(1, queries.itemsize * queries.shape[1]))
        elif isinstance(batch_rows, bool) or not isinstance(batch_rows, (int, np.integer)) or batch_rows < 1:
            raise ValueError(f"batch_rows must be a positive integer or None; got {batch_rows!r}")
        shards = [(first_row, client.scatter(block, hash=False) if isinstance(block, np.ndarray)
                   else _computed(client, block)) for first_row, block in blocks]
        found = []
        for q0 in range(0, queries.shape[0], batch_rows):
            batch = client.scatter(queries[q0 : q0 + batch_rows], broadcast=True, hash=False)
            found.extend(client.gather([client.submit(_radius_part, shard, first_row, batch, q0, radius, exclude_self,
                                                      pure=False, **common) for first_row, shard in shards]))
            del batch
        del shards
    n_query = queries.shape[0]
    rows = np.concatenate([f[0] for f in found] + [np.zeros(0, np.int64)])
    cols = np.concatenate([f[1] for f in found] + [np.zeros(0, np.int64)])
    dist = np.concatenate([f[2] for f in found] + [np.zeros(0)])
    order = np.lexsort((cols, dist, rows))
    rows, cols, dist = rows[order], cols[order], dist[order]
    indptr = np.zeros(n_query + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_query), out=indptr[1:])
    return indptr, cols, dist, (np.float32 if dtype == torch.float32 else np.float64)


def radius_neighbors(X_ref, X_query=None, radius: float = 1.0, *, metric: str = "euclidean", p=None,
                     mode: str = "auto", client=None, device="auto", working_memory=None, return_distance: bool = True,
                     sort_results: bool = False, batch_rows: int | None = None):
    """Every reference within ``radius`` of each query on a Dask cluster, as :func:`gpumine.neighbors.radius_neighbors`.

    Parameters
    ----------
    X_ref : dask.array (chunked by rows), NumPy array or pandas DataFrame
        The references; a dask array's row chunks are the shards.
    X_query : same kinds, optional
        The queries (``None``: the references themselves, each point excluded
        from its own list, not its duplicates). Gathered on the client and
        broadcast to the workers.
    radius : float, default 1.0
        A reference is a neighbour when its float64 exact distance is at most ``radius``.
    metric, p, device, working_memory
        As :func:`gpumine.neighbors.radius_neighbors` (``device`` resolved on each worker).
    mode, client, batch_rows
        As :func:`kneighbors`.
    return_distance : bool, default True
    sort_results : bool, default False
        Accepted for scikit-learn compatibility: rows are always ordered by (distance, index).

    Returns
    -------
    distances, indices : object arrays of length n_queries
        Row i holds query i's neighbours' distances (the data's dtype) and
        global indices, as one process and scikit-learn return them.
    """
    from gpumine.neighbors._neighbor_graphs import csr_to_lists

    indptr, indices, dist, out_dtype = _radius_arrays(X_ref, X_query, radius, metric=metric, p=p, mode=mode,
                                                      client=client, device=device, working_memory=working_memory,
                                                      batch_rows=batch_rows)
    dist_rows, index_rows = csr_to_lists(indptr, indices, dist.astype(out_dtype))
    return (dist_rows, index_rows) if return_distance else index_rows


def _outputs(dist, index, like, return_distance):
    import dask.array as da

    if isinstance(like, da.Array):
        chunks = (like.chunks[0], (index.shape[1],))
        dist, index = da.from_array(dist, chunks=chunks), da.from_array(index, chunks=chunks)
    return (dist, index) if return_distance else index


class NearestNeighbors:
    """Exact nearest neighbours on a Dask cluster, with :class:`gpumine.neighbors.NearestNeighbors`'s methods.

    ``fit(X)`` keeps ``X`` (a dask array is persisted on the workers); ``kneighbors``
    runs :func:`kneighbors` and ``radius_neighbors`` :func:`radius_neighbors`
    (``mode``, ``client`` as there), and both return what one process returns.

    Examples
    --------
    >>> import numpy as np, distributed  # doctest: +SKIP
    >>> with distributed.Client(processes=False) as client:  # doctest: +SKIP
    ...     nn = NearestNeighbors(n_neighbors=2, device="cpu").fit(np.array([[0.0], [1.0], [5.0]]))
    ...     nn.kneighbors()[1]
    array([[1, 2],
           [0, 2],
           [1, 0]])
    """

    def __init__(self, n_neighbors=5, *, radius=1.0, metric="euclidean", p=None, mode="auto", client=None,
                 device="auto", working_memory=None):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.metric = metric
        self.p = p
        self.mode = mode
        self.client = client
        self.device = device
        self.working_memory = working_memory

    def get_params(self, deep=True):
        return {name: getattr(self, name) for name in
                ("n_neighbors", "radius", "metric", "p", "mode", "client", "device", "working_memory")}

    def fit(self, X, y=None):
        """Keep the references (persisted on the cluster when a dask array)."""
        import dask.array as da

        client = _client(self.client)
        self._X = client.persist(X) if isinstance(X, da.Array) else X
        self.n_samples_fit_ = X.shape[0]
        self.n_features_in_ = X.shape[1]
        return self

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The exact k nearest training rows of each row of ``X`` (``None``: the training set, self excluded)."""
        if not hasattr(self, "_X"):
            raise ValueError("this NearestNeighbors is not fitted yet; call fit(X) first")
        return kneighbors(self._X, X, self.n_neighbors if n_neighbors is None else n_neighbors, metric=self.metric,
                          p=self.p, mode=self.mode, client=self.client, device=self.device,
                          working_memory=self.working_memory, return_distance=return_distance)

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """Every training row within ``radius`` (default: the constructor's) of each row of ``X`` (``None``: the
        training set, self excluded): object arrays of per-row distances and indices, ordered by (distance, index)."""
        if not hasattr(self, "_X"):
            raise ValueError("this NearestNeighbors is not fitted yet; call fit(X) first")
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        return radius_neighbors(self._X, X, self.radius if radius is None else radius, metric=self.metric, p=self.p,
                                mode=self.mode, client=self.client, device=self.device,
                                working_memory=self.working_memory, return_distance=return_distance)

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """Sparse (n_queries, n_samples_fit) graph of the training rows within ``radius`` (as scikit-learn)."""
        import scipy.sparse as sp

        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        if not hasattr(self, "_X"):
            raise ValueError("this NearestNeighbors is not fitted yet; call fit(X) first")
        indptr, indices, dist, _ = _radius_arrays(self._X, X, self.radius if radius is None else radius,
                                                  metric=self.metric, p=self.p, mode=self.mode, client=self.client,
                                                  device=self.device, working_memory=self.working_memory,
                                                  batch_rows=None)
        data = np.ones(len(indices)) if mode == "connectivity" else dist
        return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, self.n_samples_fit_))
