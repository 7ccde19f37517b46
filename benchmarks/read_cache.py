"""Acquire hooks that put a read cache in front of every element a benchmark's kernel reads by
index (benchmarks.aggregation names them in its maps and runs): the path is the default one,
with a `cache` stage first. Sums (the barrier's) keep their path.

    per_row      cache(prefetch="none"): a miss reads its one tuple (one request per row)
    prefetching  cache(prefetch="window"): the first miss reads the rest of the element in one
                 request, up to CAPACITY tuples (Aurora's bulk-loaded read cache)
"""

from __future__ import annotations

import paths
from paths import make_path, stage

CAPACITY = 1024  # tuples each cache holds: a benchmark's elements have at most this many rows


def _cached(request: paths.AcquireRequest, **params) -> paths.PathSpec:
    if request.sum:
        return request.default()
    return make_path(stage("cache", capacity=CAPACITY, **params), request.default())


@paths.acquire_hook
def per_row(request: paths.AcquireRequest) -> paths.PathSpec:
    return _cached(request, prefetch="none")


@paths.acquire_hook
def prefetching(request: paths.AcquireRequest) -> paths.PathSpec:
    return _cached(request, prefetch="window", window=CAPACITY)
