"""The paper's Figures 1 and 2: two processes, each summing its own two threads locally, meet
in a server-side sum over one element.

This script starts `paths serve` as a separate process, then plays both client processes with
two PastSets of its own (each with a local reduce-sum of two threads and a remote stage), runs
GSum on them in C threads, prints one client's tree with its counters (one round trip per global
sum), and stops the server. Every total is checked.
"""

import subprocess
import sys
import threading

import paths
from paths import build_path, make_path, stage

server = subprocess.Popen([sys.executable, "-m", "paths", "serve", "--bind", "tcp://127.0.0.1:*"],
                          stdout=subprocess.PIPE, text=True)
try:
    endpoint = server.stdout.readline().split()[1]  # "READY tcp://127.0.0.1:PORT"
    print(f"server at {endpoint}")
    path = make_path(stage("reduce-sum", num_threads=2),      # this process's two threads
                     stage("remote", host=endpoint),            # ... then to the server (direct TCP)
                     stage("reduce-sum", num_threads=2),        # the two processes' partial sums
                     stage("core", name="FIGURE1", format="q"))
    processes = [[build_path(path, pastset=ps) for _ in range(2)] for ps in (paths.PastSet(), paths.PastSet())]

    results = {}

    def run(index: int) -> None:
        results[index] = paths.bench.gsum(processes[index], 1000, contributors=4)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(f"1000 global sums of 4 threads in 2 processes, every total checked: median "
          f"{results[0].median_us:.1f} us per sum.\nOne client's tree (the remote stage's requests: "
          f"one BUILD, then one round trip per global sum):")
    paths.show(processes[0][0], counters=True)
    del processes, results
finally:
    server.terminate()
    server.wait()
