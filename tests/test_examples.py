"""The examples a newcomer runs first keep working: each runs to its end and says so. The
programs of several ranks run with `paths launch`, on this machine's map and an emulated map of
several nodes."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("script, says", [
    ("producer_consumer.py", "20000 jobs taken exactly once"),
    ("global_sum_tree.py", "every total checked"),
    ("remote_sum.py", "requests=1001, answers=1001, failures=0"),
    ("python_stage.py", "the element holds (40, 5.0)"),
    ("aggregation.py", "batch: 10000 moves in 40 messages"),
    ("aggregation.py", "cache: 10000 tuples fetched in 1 request(s), 10000 reads served here, 0 went to the server"),
])
def test_example_runs(script, says):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert says in done.stdout


def paths_launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "paths", "launch", *args], capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("launch, workers", [
    (["--map", "local", "--threads", "3"], {"localhost"}),
    (["--map", "paper-4w", "--threads", "5", "--policy", "cyclic"], {"n1", "n2", "n3", "n4"}),
], ids=["local", "emulated multi-node"])
def test_bag_of_tasks_finds_pi_with_every_task_done_once(launch, workers):
    done = paths_launch(*launch, "--", sys.executable, str(EXAMPLES / "bag_of_tasks.py"), "--tasks", "20",
                        "--darts", "40000")
    assert done.returncode == 0, done.stderr
    [master] = [line for line in done.stdout.splitlines() if line.startswith("[0] ")]
    match = re.fullmatch(r"\[0\] bag of tasks: 20 tasks of 40000 darts by (\d) workers: pi ~ (\S+) \(error \S+\)",
                         master)
    assert match, master
    assert abs(float(match[2]) - math.pi) < 0.02  # 800000 darts: the error's deviation is about 0.002
    counts = re.findall(r"\[(\d)\] worker \1 on (\S+): (\d+) tasks", done.stdout)
    assert len(counts) == int(match[1])
    assert {node for _, node, _ in counts} == workers
    assert sum(int(n) for _, _, n in counts) == 20  # each task taken by exactly one worker


def test_bag_of_tasks_with_one_rank_is_done_by_the_master():
    done = paths_launch("--map", "local", "--threads", "1", "--timeout", "60", "--", sys.executable,
                        str(EXAMPLES / "bag_of_tasks.py"), "--tasks", "4", "--darts", "1000")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"\[0\] bag of tasks: 4 tasks of 1000 darts by 1 workers: pi ~ \S+ \(error \S+\)\n", done.stdout)


@pytest.mark.parametrize("script, option", [("bag_of_tasks.py", "--tasks"), ("bag_of_tasks.py", "--darts"),
                                            ("ping_pong.py", "--rounds")])
def test_an_example_given_nothing_to_do_says_so(script, option):
    done = subprocess.run([sys.executable, str(EXAMPLES / script), option, "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(f"error: {option}: expected at least 1, got 0"), done.stderr


@pytest.mark.parametrize("the_map", ["local", "paper-4w"])
def test_ping_pong_prints_the_round_trip(the_map):
    done = paths_launch("--map", the_map, "--threads", "2", "--policy", "cyclic", "--", sys.executable,
                        str(EXAMPLES / "ping_pong.py"), "--rounds", "200")
    assert done.returncode == 0, done.stderr
    node = "localhost" if the_map == "local" else "n0"
    assert re.fullmatch(rf"\[0\] ping-pong: 200 round trips between rank 0 on {node} and rank 1: "
                        r"median \d+\.\d us, best \d+\.\d us\n", done.stdout), done.stdout
