"""The paper's Figure 6: a hierarchical global sum, four groups of four threads.

Each thread's path goes through its group's reduce-sum (fan-in 4, kept apart by id=), then the
root reduce-sum (fan-in 4), then the element. The sixteen paths merge into one tree, which is
printed; then GSum runs on it in C threads and the latency is reported.
"""

import paths
from paths import build_path, make_path, stage

GROUPS, PER_GROUP = 4, 4


def group_path(group: int):
    return make_path(
        stage("reduce-sum", num_threads=PER_GROUP, id=f"group{group}"),
        stage("reduce-sum", num_threads=GROUPS),
        stage("core", name="GSUM", format="q"),
    )


handles = [build_path(group_path(g), label=f"thread {g * PER_GROUP + t}")
           for g in range(GROUPS) for t in range(PER_GROUP)]
paths.show(handles[0])

result = paths.bench.gsum(handles, 1000)
print(f"\nGSum over {len(handles)} threads, 1000 rounds: every total checked, "
      f"median {result.median_us:.1f} us per global sum")
