"""Producer/consumer over one PastSet element: the first thing to run.

Two producer threads move jobs into an element bounded by delta (flow control); two consumers
take them with next-observes, so every job is taken exactly once. Then the whole history is
read back by index.
"""

import threading

import paths

JOBS_PER_PRODUCER = 10_000

ps = paths.PastSet()
jobs = ps.enter("jobs", "qd")
jobs.delta(64)  # a producer blocks when 64 jobs are waiting

taken = [[] for _ in range(2)]


def produce(producer: int) -> None:
    for i in range(JOBS_PER_PRODUCER):
        jobs.move((producer * JOBS_PER_PRODUCER + i, i * 0.5))


def consume(consumer: int) -> None:
    while True:
        job_id, _ = jobs.observe(timeout=10)
        if job_id < 0:
            return
        taken[consumer].append(job_id)


threads = [threading.Thread(target=produce, args=(p,)) for p in range(2)]
threads += [threading.Thread(target=consume, args=(c,)) for c in range(2)]
for t in threads:
    t.start()
for t in threads[:2]:
    t.join()
for _ in range(2):
    jobs.move((-1, 0.0))  # one stop marker per consumer
for t in threads[2:]:
    t.join()

all_taken = sorted(taken[0] + taken[1])
assert all_taken == list(range(2 * JOBS_PER_PRODUCER)), "a job was lost or taken twice"
print(f"{len(all_taken)} jobs taken exactly once "
      f"(consumer 0: {len(taken[0])}, consumer 1: {len(taken[1])})")
print(f"history: first={jobs.first()} last={jobs.last()}, tuple 0 = {jobs.observe(0)}")
print(f"stats: {jobs.stats()}")
