"""`python -m benchmarks.aggregation --quick` runs end to end: ARMI's sweep (batch against no
batching, every k and factor, both delays), Aurora's cache load (per row against prefetch), MM2
on two maps with identical results, and cache hits from 1 and 2 threads; it prints the targets,
writes the CSV and the plot, and leaves no process behind (the `probe` fixture fails the test
otherwise)."""

from __future__ import annotations

import csv
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 240


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.aggregation", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=RUN_TIMEOUT_S)


def test_quick_run_reports_every_experiment_and_target(probe, tmp_path):
    out_csv, plot = tmp_path / "aggregation.csv", tmp_path / "aggregation.png"
    done = run("--quick", "--csv", str(out_csv), "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = list(csv.DictReader(out_csv.open()))
    armi = [r for r in rows if r["experiment"] == "armi"]
    assert {(r["delay_ms"], r["k"], r["factor"], r["variant"]) for r in armi} == {
        (d, k, f, v) for d in ("0.0", "0.2") for k in ("1", "10", "100")
        for f, v in (("", ""), ("", "waited (window=1)"), ("4", ""), ("16", ""), ("64", ""))}
    for r in armi:
        # the delay's table: k, the waited path's ms, the one without batching, then each factor's speed-up
        shown = re.search(rf"^\s+{r['k']}\s+([\d.]+) ms\s+([\d.]+) ms((\s+[\d.]+x)+)",
                          out.split(f"delay {float(r['delay_ms']):g} ms")[1], re.M)
        if r["factor"]:
            base = next(b for b in armi
                        if (b["delay_ms"], b["k"], b["factor"], b["variant"]) == (r["delay_ms"], r["k"], "", ""))
            assert math.isclose(float(r["speedup"]), float(base["ms"]) / float(r["ms"]), rel_tol=1e-9)
            assert f"{float(r['speedup']):.1f}x" in shown[3]
        else:
            assert f"{float(r['ms']):.3f}" == shown[2 if not r["variant"] else 1]
    callers = {r["buffers"]: float(r["ms"]) for r in rows if r["experiment"] == "callers"}
    assert set(callers) == {"1", "2"} and all(ms > 0 for ms in callers.values())
    assert re.search(rf"several callers: 4 threads .* buffers=1 {callers['1']:.2f} ms, buffers=2 {callers['2']:.2f} ms "
                     r"a round \(buffers=2 / buffers=1: [\d.]+x; 4 callers on \d+ cores\)", out)
    aurora = {(r["nodes"], r["delay_ms"], r["variant"]) for r in rows if r["experiment"] == "aurora"}
    assert aurora == {("2", d, v) for d in ("0.0", "0.2") for v in ("per_row", "prefetching")}
    mm2 = [r for r in rows if r["experiment"] == "mm2"]
    assert {(r["delay_ms"], r["variant"]) for r in mm2} == {(d, v) for d in ("0.0", "0.2") for v in ("plain", "aggregated")}
    expected = float(re.search(r"expected checksum (-?\d+)", out)[1])
    assert all(float(r["checksum"]) == expected for r in mm2)
    hits = {r["variant"]: float(r["ms"]) * 1e6 for r in rows if r["experiment"] == "hits"}
    assert set(hits) == {"threads=1", "threads=2"} and all(ns > 0 for ns in hits.values())
    for threads in (1, 2):
        assert re.search(rf"^\s+{threads} thread\(s\): {hits[f'threads={threads}']:.1f} ns a hit", out, re.M)
    assert re.search(r"info  2 threads make [\d.]+x the hits of one \(2 threads on \d+ cores\)", out)
    assert "Targets (a --quick run: small sizes, a few samples each; the verdicts show that every experiment runs, " \
           "they do not measure the targets)" in out
    targets = re.findall(r"^  (PASS|MISS|----)  (.*?):", out, re.M)
    assert [name for _, name in targets] == [
        "batch faster than no batching from k = 10 (every factor, both delays)",
        "k = 10,000 without delay, >= 3x faster",
        "k = 10,000 with 0.2 ms delay, >= 15x faster",
        "best factor at k = 10,000 strictly inside 4..64 (delay 0 ms)",
        "best factor at k = 10,000 strictly inside 4..64 (delay 0.2 ms)",
        "prefetch <= 0.5x the per-row load, delay 0 ms (2 nodes)",
        "prefetch <= 0.15x the per-row load, delay 0.2 ms (2 nodes)",
        "MM2 gives identical results on both maps, the expected ones",
    ]
    assert [verdict for verdict, _ in targets][1:5] == ["----"] * 4  # --quick stops at k = 100
    assert targets[-1][0] == "PASS"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, words", [
    (["--repeat", "0"], "--repeat"), (["--sections"], "unrecognized"),
    (["--csv", "/no/such/folder/out.csv"], "--csv /no/such/folder/out.csv: no folder /no/such/folder to write it in"),
    (["--plot", "/no/such/folder/out.png"], "--plot /no/such/folder/out.png: no folder /no/such/folder to write it in"),
    (["--csv", "aggregation.png"], "--plot aggregation.png: --csv writes that file too: give each its own"),  # default
    (["--csv", "same", "--plot", "./same"], "--plot ./same: --csv writes that file too: give each its own"),
])
def test_bad_options_exit_2(args, words):
    done = run(*args)
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_a_cell_gets_the_moves_or_the_time_it_asks_for_shared_by_its_turns():
    from benchmarks.aggregation import Sizes

    sizes = Sizes()  # 50,000 moves or 30 ms (60 ms with the delay) a run, at most 2,000 (1,000) rounds,
    # in 5 turns, or in turns of 40 rounds where the moves make more
    assert sizes.rounds_per_turn(0.0, 1, 0.01) == 40  # the moves ask for more rounds than the bound: the bound
    assert sizes.rounds_per_turn(0.2, 100, 1.0) == 42  # 500 rounds of moves, more than 60 ms of them, 12 turns
    assert sizes.rounds_per_turn(0.2, 10_000, 1.0) == 12  # 5 rounds of moves, 60 ms of 1 ms rounds: 60
    assert sizes.rounds_per_turn(0.2, 10_000, 70.0) == 1  # each turn makes one round at least


def test_short_rounds_take_more_turns_each_on_a_fresh_handle():
    from benchmarks.aggregation import Sizes

    sizes = Sizes()
    assert [sizes.turns_for(0.0, k) for k in (1, 10, 100, 1_000, 10_000)] == [50, 50, 12, 5, 5]
    assert [sizes.turns_for(0.2, k) for k in (1, 10, 100, 1_000, 10_000)] == [25, 25, 12, 5, 5]
    assert Sizes(turns=1, turn_rounds=40, max_rounds={0.0: 200, 0.2: 20}).turns_for(0.2, 1) == 1  # fewer: at least 1


def test_quick_runs_once_unless_repeat_says_otherwise():
    from benchmarks.aggregation import QUICK, parse_arguments

    assert parse_arguments(["--quick"]).repeat == 1
    chosen = parse_arguments(["--quick", "--repeat", "2"])
    assert chosen.repeat == 2 and chosen.sizes.ks == QUICK["ks"]


def test_the_round_model_recovers_the_costs_a_sweep_was_made_of():
    from benchmarks.aggregation import FACTORS, fit_round_model

    k, base, message, tuple_ = 10_000, 0.1, 0.005, 5e-6  # ms: 100 us, 5 us a message, 5 ns a tuple
    model = fit_round_model(k, {f: base + k / f * message + f * tuple_ for f in FACTORS + (4096, 8192)})
    assert (model.base_ms, model.message_ms, model.tuple_ms) == pytest.approx((base, message, tuple_), rel=1e-6)
    assert model.worst_error < 1e-9
    assert model.best_factor(k) == pytest.approx(math.sqrt(k * message / tuple_))  # 3162: past 2048
    flat = fit_round_model(k, {f: base + k / f * message for f in FACTORS})  # no cost grows with the factor
    assert not math.isfinite(flat.best_factor(k)) or flat.best_factor(k) > 1e6


def test_the_best_factor_is_inside_the_range_only_when_none_past_it_is_faster():
    """1024 the fastest of 4 ... 2048 but 8192 faster still: the curve has not turned inside the
    range (a MISS); 256 the fastest of all: it has."""
    from benchmarks.aggregation import FACTORS, best_factors

    beyond = (4096, 8192)
    falling = {f: 1.0 / f for f in FACTORS + beyond} | {2048: 1.0}  # 2048 slow by chance, 8192 fastest
    assert best_factors(falling, FACTORS, beyond) == (8192, 4096, False)
    turning = {f: abs(math.log2(f) - 8.2) + 1.0 for f in FACTORS + beyond}  # least at 256, then 512
    assert best_factors(turning, FACTORS, beyond) == (256, 512, True)
    assert best_factors({f: 1.0 / f for f in FACTORS}, FACTORS, ()) == (2048, 1024, False)
