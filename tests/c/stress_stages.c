/* stress_stages.c — a standalone stress test of the stage layer (wrappers_c/ over pastset/, no Python).
 *
 * tests/test_c_stress.py builds it plain, under AddressSanitizer + UBSan and under ThreadSanitizer.
 * Usage: stress_stages [rounds]   (default 2000: the GSum rounds; the other scenes run a fraction).
 * Exits 1 on any failure. Every call that must succeed has a finite timeout, and a watchdog ends
 * the run with the name of the scene still running once the deadline passes: a hang fails.
 *
 * Stages are made with ps_stage_create(ps_stage_kind_find(...)) and reached through ps_stage_attach.
 *   gsum      16 threads x rounds through flat (16), two-level (4x4) and three-level (2x2x4)
 *             reduce-sum trees: every total exact, each round's total observed by every
 *             contributor exactly once, the element's history one total per round in order, and
 *             every stage's counters exact.
 *   fields    multi-field sums: "qd" (int64 + double) and "id" (int32 that wraps, padding, double).
 *   drift     contributors move up to 4 rounds ahead before observing, in random interleavings,
 *             a third of their moves as move_many of up to 4 rounds at once; a 5th move ahead (a
 *             move_many that does not fit) is refused and changes nothing, an observe with no move
 *             is refused.
 *   timeouts  every move and observe uses a tiny timeout (0, 1 us, 50 us) and retries until it
 *             succeeds; a gate thread keeps the delta-bounded element below full for random
 *             spells, so the sum going down times out too and the round is driven down by a
 *             later caller. Nothing may be lost or duplicated.
 *   pass      trace -> cache -> reduce-sum -> trace -> cache -> delay -> core (traces in operation
 *             mode): above the sum each caller stays a distinct caller; moves, observes, indexed
 *             observes (cached), first and last from many threads. The upper trace file, written
 *             when the last link goes, holds exactly each thread's operations in order with their
 *             tuples; the lower one the sum's rounds as exchanges in order, and what it forwarded.
 *             Every stage's operation count is exact: the sum's one link down carries its rounds
 *             and, at the same time, the callers' forwarded operations, and none may be lost.
 *   links     contributors attach concurrently and detach as they finish, readers attach and
 *             detach a cache above the same element over and over, a thread reads every stage's
 *             counters throughout (they never go back, and end exact); the owner's references go
 *             first, in shuffled order, and the last release frees everything (LeakSanitizer).
 *   explain   16 threads on one reduce-sum make moves it refuses, each thread a count of its own,
 *             all at once: each thread's failure is told in its own words (ps_stage_error_since),
 *             never in another thread's, though every one is written to the one stage's error.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pastset.h"
#include "stage.h"
#include "trace.h"

enum { THREADS = 16, MAX_STAGES = 32, MAX_LEVELS = 3, AHEAD = 4, MAX_REPORTS = 20, MAX_COUNTERS = 32 };

#define US 1000LL
#define MS 1000000LL
/* The longest a call waits for something that must come: a lost round fails, never hangs. */
#define WAIT (10000 * MS)
/* The whole run must end by then (the pytest timeout is 60 s). */
#define RUN_BUDGET (55000 * MS)
/* Contributions carry their round in the high bits, so a total names its round. */
#define ROUND_UNIT (1LL << 20)

#include "stress_report.h"
#include "stage_setup.h"

/* ---- small helpers ------------------------------------------------------------------------------ */

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void pause_ns(int64_t ns) {
    struct timespec pause = {0, ns};
    nanosleep(&pause, NULL);
}

static int64_t contribution(int thread, int64_t round) { return round * ROUND_UNIT + (thread + 1) * (round % 7 + 1); }

static int64_t expected_total(int threads, int64_t round) {
    return threads * round * ROUND_UNIT + (round % 7 + 1) * threads * (threads + 1) / 2;
}

/* The round a total belongs to, or -1 if it is no round's total. */
static int64_t round_of(int threads, int64_t total) {
    if (total < 0) return -1;
    int64_t round = total / ROUND_UNIT / threads;
    return expected_total(threads, round) == total ? round : -1;
}

/* A stage's counter by name; -1 (and a failure) if it has none. */
static int64_t counter(ps_stage *stage, const char *name) {
    ps_counter counters[MAX_COUNTERS];
    int n = ps_stage_counters(stage, counters, MAX_COUNTERS);
    for (int i = 0; i < n; i++)
        if (strcmp(counters[i].name, name) == 0) return counters[i].value;
    fail("stage '%s' has no counter '%s'", ps_stage_kind_name(stage), name);
    return -1;
}

/* ---- reduce-sum trees ---------------------------------------------------------------------------- */

/* Reduce-sum stages over one core, fan-ins given leaf level first ({2, 2, 4}: leaves of two,
 * then pairs of those, then a top of four). Thread t contributes at leaf t / fan_ins[0]. */
typedef struct tree {
    ps_stage *core;
    ps_stage *sums[MAX_STAGES];     /* every reduce-sum, top first */
    int sum_fan_in[MAX_STAGES];
    int sum_count;
    ps_stage *leaves[THREADS];
    int leaf_fan_in, threads;
    char shape[32];
} tree;

static void tree_build(tree *t, ps_space *space, const char *element, const char *format, const int *fan_ins,
                       int levels) {
    memset(t, 0, sizeof *t);
    t->core = create_core(space, element, format);
    ps_stage *level[THREADS], *above[THREADS];
    int count = 1, used = 0;
    level[0] = create_sum(space, fan_ins[levels - 1], t->core);
    t->sums[t->sum_count] = level[0];
    t->sum_fan_in[t->sum_count++] = fan_ins[levels - 1];
    for (int l = levels - 2; l >= 0; l--) {
        int below_fan_in = fan_ins[l + 1];
        for (int j = 0; j < count * below_fan_in; j++) {
            above[j] = create_sum(space, fan_ins[l], level[j / below_fan_in]);
            t->sums[t->sum_count] = above[j];
            t->sum_fan_in[t->sum_count++] = fan_ins[l];
        }
        count *= below_fan_in;
        memcpy(level, above, (size_t)count * sizeof *level);
    }
    for (int j = 0; j < count; j++) t->leaves[j] = level[j];
    t->leaf_fan_in = fan_ins[0];
    t->threads = count * fan_ins[0];
    for (int l = 0; l < levels; l++)
        used += snprintf(t->shape + used, sizeof t->shape - (size_t)used, "%s%d", l ? "x" : "", fan_ins[l]);
}

static ps_stage *tree_leaf(tree *t, int thread) { return t->leaves[thread / t->leaf_fan_in]; }

/* Drops the owner's references; the stages go when their last link does. */
static void tree_release(tree *t) {
    for (int i = 0; i < t->sum_count; i++) {
        ps_stage_release(t->sums[i]);
        t->sums[i] = NULL;
    }
    ps_stage_release(t->core);
    t->core = NULL;
    memset(t->leaves, 0, sizeof t->leaves);
}

/* Calls a sum stage takes per round from each of its callers: a move and an observe from a thread;
 * only the move from a sum above it, whose observers read the total at the lowest sum. */
static int64_t calls_per_caller(const tree *t, int i) {
    return i >= t->sum_count - t->threads / t->leaf_fan_in ? 2 : 1;
}

/* After `rounds` rounds with no downward timeout, every stage's counters are exact: each counts
 * calls_per_caller per round from each caller, and the leaves also the calls refused at them
 * (refused, all leaves together) and one call for the rounds a move_many moved (batched: the
 * rounds beyond each one's first); the core one exchange (a move and an observe in one call). */
static void tree_check_counters(tree *t, const char *scene, int64_t rounds, int64_t refused, int64_t batched) {
    int leaf_count = t->threads / t->leaf_fan_in, first_leaf = t->sum_count - leaf_count; /* leaves come last */
    int64_t leaf_operations = 0;
    for (int i = first_leaf; i < t->sum_count; i++) leaf_operations += counter(t->sums[i], "operations");
    int64_t leaf_calls = 2 * rounds * t->threads + refused - batched;
    CHECK(leaf_operations == leaf_calls, "%s: the leaves count %" PRId64 " operations, expected %" PRId64, scene,
          leaf_operations, leaf_calls);
    for (int i = 0; i < t->sum_count; i++) {
        ps_stage *s = t->sums[i];
        int64_t fan_in = t->sum_fan_in[i];
        CHECK(counter(s, "rounds") == rounds, "%s: a sum stage counts %" PRId64 " rounds, expected %" PRId64, scene,
              counter(s, "rounds"), rounds);
        CHECK(counter(s, "links") == fan_in && ps_stage_link_count(s) == (uint32_t)fan_in,
              "%s: a sum stage has %" PRId64 " links, fan-in %" PRId64, scene, counter(s, "links"), fan_in);
        int64_t calls = fan_in * calls_per_caller(t, i) * rounds;
        CHECK(i >= first_leaf || counter(s, "operations") == calls, "%s: a sum stage counts %" PRId64
              " operations, expected %" PRId64, scene, counter(s, "operations"), calls);
    }
    CHECK(counter(t->core, "operations") == rounds && counter(t->core, "element_moves") == rounds &&
          counter(t->core, "links") == 1, "%s: core counts %" PRId64 " operations, %" PRId64 " moves, %" PRId64
          " links; expected %" PRId64 ", %" PRId64 ", 1", scene, counter(t->core, "operations"),
          counter(t->core, "element_moves"), counter(t->core, "links"), rounds, rounds);
}

/* ---- scenes of rounds: gsum, drift, timeouts ----------------------------------------------------- */

typedef enum sum_mode { MODE_LOCKSTEP, MODE_DRIFT, MODE_TINY_TIMEOUTS } sum_mode;

typedef struct sum_scene {
    const char *name;
    sum_mode mode;
    tree tree;
    ps_element *element;
    int64_t rounds;
    _Atomic int64_t *observed;     /* per round: contributors whose observe returned its total */
    pthread_barrier_t attached;
    _Atomic int64_t retries;       /* tiny timeouts: calls that timed out and were made again */
    _Atomic int64_t ahead_refused; /* drift: 5th moves ahead (move_many beyond the 4th), refused */
    _Atomic int64_t batched;       /* drift: rounds moved by a move_many beyond its first (one call) */
    _Atomic int64_t early_refused; /* drift: observes before a move, refused */
    atomic_bool done;              /* the contributors finished: the gate stops */
    int64_t gate_cycles;           /* junk tuples the gate moved and took back */
} sum_scene;

typedef struct sum_worker {
    sum_scene *scene;
    int id;
    ps_link link;
    uint64_t random;
} sum_worker;

static void record_total(sum_worker *w, int64_t round, int64_t total) {
    sum_scene *s = w->scene;
    int64_t got = round_of(s->tree.threads, total);
    CHECK(got == round, "%s: contributor %d observed %" PRId64 " (round %" PRId64 ") for round %" PRId64, s->name,
          w->id, total, got, round);
    if (got >= 0 && got < s->rounds) atomic_fetch_add(&s->observed[got], 1);
}

static void rounds_lockstep(sum_worker *w) {
    sum_scene *s = w->scene;
    for (int64_t r = 0; r < s->rounds; r++) {
        int64_t value = contribution(w->id, r), total = -1;
        int rc = link_move(&w->link, &value, WAIT);
        CHECK(rc == PS_OK, "%s: contributor %d move %" PRId64 ": %s", s->name, w->id, r, ps_status_name(rc));
        if (rc != PS_OK) return;
        rc = link_observe(&w->link, &total, WAIT);
        CHECK(rc == PS_OK, "%s: contributor %d observe %" PRId64 ": %s", s->name, w->id, r, ps_status_name(rc));
        if (rc != PS_OK) return;
        record_total(w, r, total);
    }
}

static void rounds_drifting(sum_worker *w) {
    sum_scene *s = w->scene;
    int64_t moves = 0, observes = 0;
    while (observes < s->rounds) {
        uint64_t x = next_random(&w->random);
        int64_t ahead = moves - observes, total = -1;
        uint32_t fits = (uint32_t)(AHEAD - ahead), left = (uint32_t)(s->rounds - moves);
        if (ahead > 0 && left > fits && x % 8 == 3) {
            /* A move_many of a round more than fits: refused whole, nothing moved. */
            int64_t values[AHEAD + 1];
            for (uint32_t k = 0; k <= fits; k++) values[k] = contribution(w->id, moves + k);
            uint32_t done = 99;
            int rc = link_move_many(&w->link, values, fits + 1, 100 * US, &done);
            CHECK(rc == PS_ESTATE && done == 0, "%s: a move_many of %u with room for %u returned %s, %u done",
                  s->name, fits + 1, fits, ps_status_name(rc), done);
            CHECK(w->link.moves == (uint64_t)moves && w->link.observes == (uint64_t)observes,
                  "%s: a refused move_many changed the link", s->name);
            atomic_fetch_add(&s->ahead_refused, 1);
        }
        if (ahead == AHEAD && moves < s->rounds && x % 4 == 0) {
            /* A 5th round ahead: its slot still holds a round this contributor has not observed. */
            int64_t value = contribution(w->id, moves);
            int rc = link_move(&w->link, &value, (x >> 8) % 2 ? 0 : 100 * US);
            CHECK(rc == PS_ESTATE, "%s: a 5th move ahead returned %s", s->name, ps_status_name(rc));
            CHECK(w->link.moves == (uint64_t)moves && w->link.observes == (uint64_t)observes,
                  "%s: a refused move changed the link", s->name);
            atomic_fetch_add(&s->ahead_refused, 1);
        } else if (ahead == 0 && x % 16 == 1) {
            int rc = link_observe(&w->link, &total, 0);
            CHECK(rc == PS_ESTATE && total == -1, "%s: an observe with no move returned %s", s->name,
                  ps_status_name(rc));
            atomic_fetch_add(&s->early_refused, 1);
        }
        bool move = moves < s->rounds && ahead < AHEAD && (ahead == 0 || (x >> 16) % 3 != 0);
        if (move && (x >> 40) % 3 == 0) {
            /* Consecutive rounds as one move_many: as many as fit, at random. */
            uint32_t n = 1 + (uint32_t)((x >> 44) % (fits < left ? fits : left)), done = 0;
            int64_t values[AHEAD];
            for (uint32_t k = 0; k < n; k++) values[k] = contribution(w->id, moves + k);
            int rc = link_move_many(&w->link, values, n, WAIT, &done);
            CHECK(rc == PS_OK && done == n && w->link.moves == (uint64_t)(moves + n), "%s: contributor %d "
                  "move_many of %u at %" PRId64 ": %s, %u done", s->name, w->id, n, moves, ps_status_name(rc), done);
            if (rc != PS_OK) return;
            moves += n;
            atomic_fetch_add(&s->batched, n - 1);
        } else if (move) {
            int64_t value = contribution(w->id, moves);
            int rc = link_move(&w->link, &value, WAIT);
            CHECK(rc == PS_OK && w->link.moves == (uint64_t)moves + 1, "%s: contributor %d move %" PRId64 ": %s",
                  s->name, w->id, moves, ps_status_name(rc));
            if (rc != PS_OK) return;
            moves++;
        } else {
            int rc = link_observe(&w->link, &total, WAIT);
            CHECK(rc == PS_OK, "%s: contributor %d observe %" PRId64 ": %s", s->name, w->id, observes,
                  ps_status_name(rc));
            if (rc != PS_OK) return;
            record_total(w, observes, total);
            observes++;
        }
        if ((x >> 24) % 8 == 0) sched_yield();
    }
}

static const int64_t TINY_TIMEOUTS[] = {0, 1 * US, 50 * US};

static void rounds_tiny_timeouts(sum_worker *w) {
    sum_scene *s = w->scene;
    unsigned attempt = (unsigned)w->id;
    for (int64_t r = 0; r < s->rounds; r++) {
        int64_t value = contribution(w->id, r), total = -1;
        int rc, moved = 0;
        bool observed = false;
        if (next_random(&w->random) % 3 == 0) {
            /* Move then observe as one call: after a timeout, *moved says whether the move is done. */
            while ((rc = link_exchange(&w->link, &value, &total, TINY_TIMEOUTS[attempt++ % 3], &moved)) ==
                       PS_ETIMEDOUT && !moved)
                atomic_fetch_add(&s->retries, 1);
            observed = rc == PS_OK;
        } else {
            while ((rc = link_move(&w->link, &value, TINY_TIMEOUTS[attempt++ % 3])) == PS_ETIMEDOUT)
                atomic_fetch_add(&s->retries, 1);
            moved = rc == PS_OK;
        }
        CHECK(moved && w->link.moves == (uint64_t)r + 1, "%s: contributor %d move %" PRId64 ": %s, %" PRIu64
              " moves", s->name, w->id, r, ps_status_name(rc), w->link.moves);
        if (!moved) return;
        if (!observed) {
            CHECK(w->link.observes == (uint64_t)r, "%s: a timed-out observe advanced the link", s->name);
            while ((rc = link_observe(&w->link, &total, TINY_TIMEOUTS[attempt++ % 3])) == PS_ETIMEDOUT)
                atomic_fetch_add(&s->retries, 1);
        }
        CHECK(rc == PS_OK, "%s: contributor %d observe %" PRId64 ": %s", s->name, w->id, r, ps_status_name(rc));
        if (rc != PS_OK) return;
        record_total(w, r, total);
    }
}

static void *sum_contributor(void *arg) {
    sum_worker *w = arg;
    sum_scene *s = w->scene;
    attach_or_die(tree_leaf(&s->tree, w->id), &w->link);
    pthread_barrier_wait(&s->attached);
    if (s->mode == MODE_LOCKSTEP) rounds_lockstep(w);
    else if (s->mode == MODE_DRIFT) rounds_drifting(w);
    else rounds_tiny_timeouts(w);
    ps_link_detach(&w->link);
    return NULL;
}

/* Keeps the delta-bounded element full for random spells: moves a junk tuple (which the bound
 * admits only once the sum driven down before it was observed), holds it, then takes it back.
 * While the junk is unread no sum can go down; and nothing else can be moved, so the gate's
 * observe takes its own junk, never a total. */
static void *gate(void *arg) {
    sum_scene *s = arg;
    uint64_t random = 0x9E3779B97F4A7C15ULL;
    while (!atomic_load(&s->done)) {
        int64_t junk = -(s->gate_cycles + 1), out = 0, index = -1;
        int rc = ps_move(s->element, &junk, 50 * US);
        if (rc == PS_ETIMEDOUT) continue;
        CHECK(rc == PS_OK, "%s: gate move: %s", s->name, ps_status_name(rc));
        if (rc != PS_OK) return NULL;
        uint64_t x = next_random(&random);
        if (x % 4 == 0) sched_yield();
        else pause_ns((int64_t)(x >> 8) % (100 * US));
        rc = ps_observe(s->element, &out, &index, WAIT);
        CHECK(rc == PS_OK && out == junk, "%s: the gate observed %" PRId64 " at %" PRId64 ", not its junk %" PRId64 " (%s)",
              s->name, out, index, junk, ps_status_name(rc));
        s->gate_cycles++;
        pause_ns((int64_t)(x >> 32) % (200 * US));
    }
    return NULL;
}

/* The element holds one total per round, in round order (and, with a gate, its junk between). */
static void check_history(sum_scene *s) {
    int64_t last = ps_last(s->element), round = 0, junk = 0;
    for (int64_t i = 0; i < last; i++) {
        int64_t value = 0;
        int rc = ps_observe_at(s->element, i, &value, 0);
        CHECK(rc == PS_OK, "%s: history[%" PRId64 "]: %s", s->name, i, ps_status_name(rc));
        if (value < 0) {
            CHECK(value == -(junk + 1), "%s: history[%" PRId64 "] = %" PRId64 ", expected junk %" PRId64, s->name, i,
                  value, -(junk + 1));
            junk++;
        } else {
            CHECK(value == expected_total(s->tree.threads, round), "%s: history[%" PRId64 "] = %" PRId64
                  ", expected round %" PRId64 "'s total %" PRId64, s->name, i, value, round,
                  expected_total(s->tree.threads, round));
            round++;
        }
    }
    CHECK(round == s->rounds && junk == s->gate_cycles, "%s: history holds %" PRId64 " totals and %" PRId64
          " junk, expected %" PRId64 " and %" PRId64, s->name, round, junk, s->rounds, s->gate_cycles);
    CHECK(ps_first(s->element) == last, "%s: %" PRId64 " tuples left unread", s->name, last - ps_first(s->element));
}

/* Runs one tree through `rounds` rounds in the given mode and checks everything. */
static double run_sum_scene(ps_space *space, const char *name, sum_mode mode, const int *fan_ins, int levels,
                            int64_t rounds) {
    int64_t started = ps_now_ns();
    static sum_scene s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.mode = mode;
    s.rounds = rounds;
    atomic_store(&scene_running, name);
    tree_build(&s.tree, space, name, "q", fan_ins, levels);
    s.element = enter_or_die(space, name, "q");
    s.observed = calloc((size_t)rounds, sizeof *s.observed);
    if (!s.observed) exit(1);
    pthread_barrier_init(&s.attached, NULL, THREADS + 1);
    pthread_t gate_thread;
    if (mode == MODE_TINY_TIMEOUTS) {
        ps_set_delta(s.element, 1);
        start_thread(&gate_thread, gate, &s);
    }
    sum_worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (sum_worker){&s, i, {0}, 0x853C49E6748FEA9BULL * (uint64_t)(i + 1) + (uint64_t)started};
        start_thread(&threads[i], sum_contributor, &workers[i]);
    }
    pthread_barrier_wait(&s.attached);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    atomic_store(&s.done, true);
    if (mode == MODE_TINY_TIMEOUTS) pthread_join(gate_thread, NULL);

    for (int64_t r = 0; r < rounds; r++)
        CHECK(atomic_load(&s.observed[r]) == THREADS, "%s: round %" PRId64 "'s total observed %" PRId64
              " times, expected %d", name, r, atomic_load(&s.observed[r]), THREADS);
    check_history(&s);
    if (mode == MODE_TINY_TIMEOUTS) {
        /* Links count timed-out calls too: what a stage counts beyond calls_per_caller per round
         * from each caller are calls that timed out (a sum above hands its rounds down without
         * waiting, so only threads' calls and the lowest sum's calls into the element do). (The
         * gate uses the element itself, not a link.) */
        int64_t into_element = counter(s.tree.core, "operations") - rounds;
        int64_t into_top = counter(s.tree.sums[0], "operations") -
                           calls_per_caller(&s.tree, 0) * rounds * s.tree.sum_fan_in[0];
        CHECK(counter(s.tree.core, "element_moves") == rounds + s.gate_cycles, "%s: element moves %" PRId64, name,
              counter(s.tree.core, "element_moves"));
        CHECK(s.retries > 0 && s.gate_cycles > 0 && into_element > 0 && into_top >= 0,
              "%s: not exercised: %" PRId64 " retries, %" PRId64 " gate spells, %" PRId64 " and %" PRId64
              " downward timeouts", name, atomic_load(&s.retries), s.gate_cycles, into_element, into_top);
        printf("  %-9s %-6s %5" PRId64 " rounds: %" PRId64 " calls retried, %" PRId64 " gate spells; downward "
               "timeouts: %" PRId64 " into the element, %" PRId64 " into the top sum; %.2f s\n",
               name, s.tree.shape, rounds, atomic_load(&s.retries), s.gate_cycles, into_element, into_top,
               (double)(ps_now_ns() - started) / 1e9);
    } else {
        tree_check_counters(&s.tree, name, rounds, atomic_load(&s.ahead_refused) + atomic_load(&s.early_refused),
                            atomic_load(&s.batched));
        if (mode == MODE_DRIFT) {
            CHECK(s.ahead_refused > 0 && s.batched > 0, "%s: no 5th move ahead was tried, or no move_many", name);
            printf("  %-9s %-6s %5" PRId64 " rounds: %" PRId64 " moves 5 ahead refused, %" PRId64
                   " early observes refused, %" PRId64 " rounds moved in a move_many beyond its first; %.2f s\n",
                   name, s.tree.shape, rounds, atomic_load(&s.ahead_refused), atomic_load(&s.early_refused),
                   atomic_load(&s.batched), (double)(ps_now_ns() - started) / 1e9);
        } else {
            printf("  %-9s %-6s %5" PRId64 " rounds; %.2f s\n", name, s.tree.shape, rounds,
                   (double)(ps_now_ns() - started) / 1e9);
        }
    }
    tree_release(&s.tree);
    pthread_barrier_destroy(&s.attached);
    free(s.observed);
    return (double)(ps_now_ns() - started) / 1e9;
}

/* ---- fields: multi-field sums --------------------------------------------------------------------- */

typedef struct qd_tuple {
    int64_t q;
    double d;
} qd_tuple;

typedef struct id_tuple {
    int32_t i; /* 4 bytes of padding follow: native alignment, as Python's struct */
    double d;
} id_tuple;

_Static_assert(sizeof(qd_tuple) == 16 && sizeof(id_tuple) == 16, "tuple layouts of 'qd' and 'id'");

typedef struct fields_scene {
    const char *name, *format;
    tree tree;
    ps_element *element;
    int64_t rounds;
    pthread_barrier_t attached;
} fields_scene;

typedef struct fields_worker {
    fields_scene *scene;
    int id;
    ps_link link;
} fields_worker;

/* Doubles that are multiples of 1/4 and small add exactly in any order. */
static void fields_contribution(const char *format, int thread, int64_t round, void *out) {
    if (strcmp(format, "qd") == 0) {
        qd_tuple t = {contribution(thread, round) - 3 * round, (thread + 1) * 0.5 - round * 0.25};
        memcpy(out, &t, sizeof t);
    } else {
        id_tuple t = {INT32_MAX - thread - (int32_t)(round % 1000), thread * 0.75 + round * 0.25};
        memcpy(out, &t, sizeof t);
    }
}

static void fields_expected(const char *format, int threads, int64_t round, void *out) {
    if (strcmp(format, "qd") == 0) {
        qd_tuple t = {0, 0.0};
        for (int i = 0; i < threads; i++) {
            t.q += contribution(i, round) - 3 * round;
            t.d += (i + 1) * 0.5 - round * 0.25;
        }
        memcpy(out, &t, sizeof t);
    } else {
        uint32_t sum = 0; /* int32 fields wrap */
        double d = 0.0;
        for (int i = 0; i < threads; i++) {
            sum += (uint32_t)(INT32_MAX - i - (int32_t)(round % 1000));
            d += i * 0.75 + round * 0.25;
        }
        id_tuple t = {(int32_t)sum, d};
        memcpy(out, &t, sizeof t);
    }
}

/* Compares the fields, not the padding. */
static bool fields_equal(const char *format, const void *a, const void *b) {
    if (strcmp(format, "qd") == 0) {
        const qd_tuple *x = a, *y = b;
        return x->q == y->q && x->d == y->d;
    }
    const id_tuple *x = a, *y = b;
    return x->i == y->i && x->d == y->d;
}

static void *fields_contributor(void *arg) {
    fields_worker *w = arg;
    fields_scene *s = w->scene;
    attach_or_die(tree_leaf(&s->tree, w->id), &w->link);
    pthread_barrier_wait(&s->attached);
    for (int64_t r = 0; r < s->rounds; r++) {
        unsigned char in[16], out[16], expected[16];
        fields_contribution(s->format, w->id, r, in);
        int rc = link_move(&w->link, in, WAIT);
        CHECK(rc == PS_OK, "fields %s: move: %s", s->format, ps_status_name(rc));
        if (rc == PS_OK) rc = link_observe(&w->link, out, WAIT);
        CHECK(rc == PS_OK, "fields %s: observe: %s", s->format, ps_status_name(rc));
        if (rc != PS_OK) break;
        fields_expected(s->format, s->tree.threads, r, expected);
        CHECK(fields_equal(s->format, out, expected), "fields %s: contributor %d got a wrong total in round %" PRId64,
              s->format, w->id, r);
    }
    ps_link_detach(&w->link);
    return NULL;
}

static double run_fields_scene(ps_space *space, const char *name, const char *format, const int *fan_ins, int levels,
                               int64_t rounds) {
    int64_t started = ps_now_ns();
    static fields_scene s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.format = format;
    s.rounds = rounds;
    atomic_store(&scene_running, name);
    tree_build(&s.tree, space, name, format, fan_ins, levels);
    s.element = enter_or_die(space, name, format);
    CHECK(ps_stage_format(s.tree.sums[0])->size == 16, "fields %s: tuple size %zu", format,
          ps_stage_format(s.tree.sums[0])->size);
    pthread_barrier_init(&s.attached, NULL, THREADS + 1);
    fields_worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (fields_worker){&s, i, {0}};
        start_thread(&threads[i], fields_contributor, &workers[i]);
    }
    pthread_barrier_wait(&s.attached);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    CHECK(ps_last(s.element) == rounds, "fields %s: %" PRId64 " tuples in the element", format, ps_last(s.element));
    for (int64_t r = 0; r < ps_last(s.element); r++) {
        unsigned char got[16], expected[16];
        int rc = ps_observe_at(s.element, r, got, 0);
        fields_expected(format, s.tree.threads, r, expected);
        CHECK(rc == PS_OK && fields_equal(format, got, expected), "fields %s: history[%" PRId64 "] is wrong", format, r);
    }
    tree_check_counters(&s.tree, name, rounds, 0, 0);
    tree_release(&s.tree);
    pthread_barrier_destroy(&s.attached);
    double took = (double)(ps_now_ns() - started) / 1e9;
    printf("  %-9s %-6s %5" PRId64 " rounds of '%s'; %.2f s\n", name, s.tree.shape, rounds, format, took);
    return took;
}

/* ---- pass: trace and cache above a reduce-sum; trace, cache and delay below it -------------------- */

enum { PASS_THREADS = 8, PASS_CACHE = 64, PASS_OPS_PER_ROUND = 6 };

typedef struct op_record {
    uint8_t op;    /* ps_op_kind */
    int64_t index; /* observe_at's index, else -1 */
} op_record;

/* Callers -> trace -> cache -> reduce-sum -> trace -> cache -> delay -> core: above the sum each
 * caller stays a caller of its own; below it the sum is the one caller, and its rounds go down as
 * exchanges, which the lower trace records as one event each. */
typedef struct pass_scene {
    ps_stage *top_trace, *top_cache, *sum, *low_trace, *low_cache, *delay, *core;
    ps_element *element;
    int64_t rounds;
    char top_path[256], low_path[256];
    pthread_barrier_t attached;
    _Atomic int64_t indexed;       /* observe_at calls */
} pass_scene;

typedef struct pass_worker {
    pass_scene *scene;
    int id;
    ps_link link;
    uint32_t trace_slot;
    op_record *log;
    int64_t logged;
    uint64_t random;
} pass_worker;

static void pass_log(pass_worker *w, ps_op_kind op, int64_t index) {
    w->log[w->logged++] = (op_record){(uint8_t)op, index};
}

static void *pass_contributor(void *arg) {
    pass_worker *w = arg;
    pass_scene *s = w->scene;
    attach_or_die(s->top_trace, &w->link);
    w->trace_slot = w->link.slot;
    pthread_barrier_wait(&s->attached);
    for (int64_t r = 0; r < s->rounds; r++) {
        int64_t value = contribution(w->id, r), total = -1, out = -1;
        int rc = link_move(&w->link, &value, WAIT);
        pass_log(w, PS_OP_MOVE, -1);
        CHECK(rc == PS_OK, "pass: move: %s", ps_status_name(rc));
        if (rc != PS_OK) break;
        rc = link_observe(&w->link, &total, WAIT);
        pass_log(w, PS_OP_OBSERVE, -1);
        CHECK(rc == PS_OK && total == expected_total(PASS_THREADS, r), "pass: observe %" PRId64 ": %s, %" PRId64, r,
              ps_status_name(rc), total);
        if (rc != PS_OK) break;
        uint64_t x = next_random(&w->random);
        if (x % 4 == 0) {
            /* An old total twice: the second read is usually the upper cache's. */
            int64_t index = (int64_t)((x >> 8) % (uint64_t)(r + 1));
            for (int k = 0; k < 2; k++) {
                rc = link_observe_at(&w->link, index, &out, WAIT);
                pass_log(w, PS_OP_OBSERVE_AT, index);
                atomic_fetch_add(&s->indexed, 1);
                CHECK(rc == PS_OK && out == expected_total(PASS_THREADS, index), "pass: observe_at(%" PRId64
                      "): %s, %" PRId64, index, ps_status_name(rc), out);
            }
        }
        if ((x >> 4) % 8 == 1) {
            rc = link_value(&w->link, PS_OP_LAST, &out);
            pass_log(w, PS_OP_LAST, -1);
            CHECK(rc == PS_OK && out > r && out <= s->rounds, "pass: last %" PRId64 " after round %" PRId64, out, r);
        } else if ((x >> 4) % 8 == 2) {
            rc = link_value(&w->link, PS_OP_FIRST, &out);
            pass_log(w, PS_OP_FIRST, -1);
            CHECK(rc == PS_OK && out >= 0 && out <= s->rounds, "pass: first %" PRId64, out);
        }
    }
    ps_link_detach(&w->link);
    return NULL;
}

/* Reads a whole trace file (format in trace.h) written in operation mode for format "q". Returns
 * the event count, or -1 (with a failure) if the file or its header is not what it must be. */
static int64_t read_trace(const char *path, const char *node, ps_trace_event **events, int64_t **tuples) {
    *events = NULL;
    *tuples = NULL;
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "trace file %s: %s", path, strerror(errno));
    if (!f) return -1;
    struct stat st;
    fstat(fileno(f), &st);
    ps_trace_header h;
    memset(&h, 0, sizeof h);
    bool whole = fread(&h, sizeof h, 1, f) == 1;
    CHECK(whole && memcmp(h.magic, PS_TRACE_MAGIC, 8) == 0 && h.version == PS_TRACE_VERSION &&
          h.header_size == PS_TRACE_HEADER_SIZE && h.event_size == PS_TRACE_EVENT_SIZE &&
          h.mode == PS_TRACE_OPERATION && h.tuple_size == 8 && strcmp(h.format, "q") == 0 &&
          strcmp(h.node, node) == 0 && h.ticks_per_ns > 0 && h.dropped == 0, "%s: bad trace header", path);
    uint64_t n = h.event_count;
    CHECK((uint64_t)st.st_size == PS_TRACE_HEADER_SIZE + n * (PS_TRACE_EVENT_SIZE + 8),
          "%s: %lld bytes for %" PRIu64 " events", path, (long long)st.st_size, n);
    if (!whole || (uint64_t)st.st_size != PS_TRACE_HEADER_SIZE + n * (PS_TRACE_EVENT_SIZE + 8)) {
        fclose(f);
        return -1;
    }
    *events = calloc(n + 1, sizeof **events);
    *tuples = calloc(n + 1, sizeof **tuples);
    if (!*events || !*tuples) exit(1);
    whole = fread(*events, sizeof **events, n, f) == n && fread(*tuples, 8, n, f) == n;
    fclose(f);
    CHECK(whole, "%s: cut short", path);
    return whole ? (int64_t)n : -1;
}

/* The upper trace holds each thread's operations, in its order, with their tuples. */
static void check_top_trace(pass_scene *s, pass_worker *workers, int64_t operations) {
    ps_trace_event *e;
    int64_t *tuples;
    int64_t n = read_trace(s->top_path, "top", &e, &tuples);
    CHECK(n == operations, "pass: the upper trace holds %" PRId64 " events; %" PRId64 " operations were made", n,
          operations);
    int64_t next[PASS_THREADS] = {0}, moves[PASS_THREADS] = {0}, observes[PASS_THREADS] = {0};
    int by_slot[PASS_THREADS];
    for (int i = 0; i < PASS_THREADS; i++) by_slot[workers[i].trace_slot % PASS_THREADS] = i;
    for (int64_t k = 0; k < n; k++) {
        if (e[k].thread >= PASS_THREADS) {
            fail("pass: upper event %" PRId64 " of thread %u", k, e[k].thread);
            continue;
        }
        int w = by_slot[e[k].thread];
        pass_worker *worker = &workers[w];
        if (next[w] >= worker->logged) {
            fail("pass: thread %u has more events than operations", e[k].thread);
            continue;
        }
        op_record want = worker->log[next[w]++];
        bool tuple_op = want.op <= PS_OP_OBSERVE_AT;
        CHECK(e[k].op == want.op && e[k].index == want.index && e[k].status == PS_OK &&
              e[k].flags == (tuple_op ? PS_TRACE_HAS_TUPLE : 0) && e[k].start_ticks <= e[k].end_ticks,
              "pass: upper event %" PRId64 " (thread %u): op %u index %" PRId64 " status %u flags %u, expected op %u"
              " index %" PRId64, k, e[k].thread, e[k].op, e[k].index, e[k].status, e[k].flags, want.op, want.index);
        int64_t expected = 0;
        if (want.op == PS_OP_MOVE) expected = contribution(worker->id, moves[w]++);
        else if (want.op == PS_OP_OBSERVE) expected = expected_total(PASS_THREADS, observes[w]++);
        else if (want.op == PS_OP_OBSERVE_AT) expected = expected_total(PASS_THREADS, want.index);
        CHECK(tuples[k] == expected, "pass: upper event %" PRId64 " holds %" PRId64 ", expected %" PRId64, k, tuples[k],
              expected);
    }
    for (int w = 0; w < PASS_THREADS; w++)
        CHECK(next[w] == workers[w].logged, "pass: thread %d made %" PRId64 " operations, the trace has %" PRId64, w,
              workers[w].logged, next[w]);
    free(e);
    free(tuples);
}

/* The lower trace has one caller, the sum: its rounds as exchanges in round order, each holding
 * the sum moved, and what it forwarded (indexed observes, first, last) in between. */
static void check_low_trace(pass_scene *s, int64_t forwarded, int64_t forwarded_indexed) {
    ps_trace_event *e;
    int64_t *tuples;
    int64_t n = read_trace(s->low_path, "low", &e, &tuples), exchanges = 0, indexed = 0, scalar = 0;
    CHECK(n == s->rounds + forwarded, "pass: the lower trace holds %" PRId64 " events, expected %" PRId64, n,
          s->rounds + forwarded);
    for (int64_t k = 0; k < n; k++) {
        CHECK(e[k].thread == 0 && e[k].status == PS_OK, "pass: lower event %" PRId64 ": thread %u status %u", k,
              e[k].thread, e[k].status);
        if (e[k].op == PS_OP_EXCHANGE) {
            CHECK(e[k].flags == PS_TRACE_HAS_TUPLE && tuples[k] == expected_total(PASS_THREADS, exchanges),
                  "pass: lower exchange %" PRId64 " holds %" PRId64 ", expected round %" PRId64 "'s sum", k, tuples[k],
                  exchanges);
            exchanges++;
        } else if (e[k].op == PS_OP_OBSERVE_AT) {
            CHECK(e[k].flags == PS_TRACE_HAS_TUPLE && tuples[k] == expected_total(PASS_THREADS, e[k].index),
                  "pass: lower observe_at(%" PRId64 ") holds %" PRId64, e[k].index, tuples[k]);
            indexed++;
        } else {
            CHECK(e[k].op == PS_OP_FIRST || e[k].op == PS_OP_LAST, "pass: lower event %" PRId64 " is op %u", k,
                  e[k].op);
            scalar++;
        }
    }
    CHECK(exchanges == s->rounds && indexed == forwarded_indexed && scalar == forwarded - forwarded_indexed,
          "pass: the lower trace has %" PRId64 " exchanges, %" PRId64 " indexed observes, %" PRId64 " first/last",
          exchanges, indexed, scalar);
    free(e);
    free(tuples);
}

static ps_stage *create_trace(ps_space *space, const char *path, int64_t capacity, const char *node, ps_stage *below) {
    ps_param_value values[] = {str_param("file", path), int_param("capacity", capacity), str_param("mode", "operation"),
                               str_param("node", node)};
    return create_stage(space, "trace", values, 4, below);
}

static ps_stage *create_cache(ps_space *space, int64_t capacity, ps_stage *below) {
    ps_param_value values[] = {int_param("capacity", capacity)};
    return create_stage(space, "cache", values, 1, below);
}

static double run_pass_scene(ps_space *space, int64_t rounds, const char *directory) {
    int64_t started = ps_now_ns();
    atomic_store(&scene_running, "pass");
    static pass_scene s;
    memset(&s, 0, sizeof s);
    s.rounds = rounds;
    snprintf(s.top_path, sizeof s.top_path, "%s/top.trace", directory);
    snprintf(s.low_path, sizeof s.low_path, "%s/low.trace", directory);
    int64_t capacity = rounds * PASS_THREADS * PASS_OPS_PER_ROUND;
    s.core = create_core(space, "pass", "q");
    s.element = enter_or_die(space, "pass", "q");
    ps_param_value delay[] = {float_param("ms", 0.002), float_param("jitter_ms", 0.002)};
    s.delay = create_stage(space, "delay", delay, 2, s.core);
    s.low_cache = create_cache(space, 16 * PASS_CACHE, s.delay); /* keeps what the upper one evicts */
    s.low_trace = create_trace(space, s.low_path, capacity, "low", s.low_cache);
    s.sum = create_sum(space, PASS_THREADS, s.low_trace);
    s.top_cache = create_cache(space, PASS_CACHE, s.sum);
    s.top_trace = create_trace(space, s.top_path, capacity, "top", s.top_cache);
    ps_stage *stages[] = {s.top_trace, s.top_cache, s.sum, s.low_trace, s.low_cache, s.delay, s.core};
    enum { STAGES = sizeof stages / sizeof stages[0] };
    pthread_barrier_init(&s.attached, NULL, PASS_THREADS + 1);

    pass_worker workers[PASS_THREADS];
    pthread_t threads[PASS_THREADS];
    for (int i = 0; i < PASS_THREADS; i++) {
        workers[i] = (pass_worker){&s, i, {0}, 0, calloc((size_t)(rounds * PASS_OPS_PER_ROUND), sizeof(op_record)), 0,
                                   0xD1B54A32D192ED03ULL * (uint64_t)(i + 1)};
        if (!workers[i].log) exit(1);
        start_thread(&threads[i], pass_contributor, &workers[i]);
    }
    pthread_barrier_wait(&s.attached);
    /* Each caller of the upper trace is a caller of the upper cache and of the sum, whose fan-in is
     * used up now; below the sum there is one caller. */
    CHECK(ps_stage_link_count(s.top_trace) == PASS_THREADS && ps_stage_link_count(s.top_cache) == PASS_THREADS &&
          ps_stage_link_count(s.sum) == PASS_THREADS && ps_stage_link_count(s.low_trace) == 1 &&
          ps_stage_link_count(s.low_cache) == 1 && ps_stage_link_count(s.delay) == 1,
          "pass: links %u %u %u %u %u %u from the top", ps_stage_link_count(s.top_trace),
          ps_stage_link_count(s.top_cache), ps_stage_link_count(s.sum), ps_stage_link_count(s.low_trace),
          ps_stage_link_count(s.low_cache), ps_stage_link_count(s.delay));
    ps_link extra;
    CHECK(ps_stage_attach(s.top_trace, &extra) == PS_ESTATE, "pass: a caller beyond the sum's fan-in was attached");
    for (int k = 0; k < 50; k++) { /* counters of stages in use, read while they run */
        CHECK(counter(s.top_trace, "dropped") == 0 && counter(s.low_trace, "dropped") == 0 &&
              counter(s.top_cache, "capacity") == PASS_CACHE, "pass: a trace dropped events");
        sched_yield();
    }
    struct stat st;
    CHECK(stat(s.top_path, &st) != 0 && stat(s.low_path, &st) != 0, "pass: a trace file was written while in use");
    /* The owner lets go now: the last caller to detach releases the upper trace, which writes its
     * file. The stages below it have one more reference, for the counters read once all is done. */
    for (int i = 1; i < STAGES; i++) ps_stage_retain(stages[i]);
    for (int i = 0; i < STAGES; i++) ps_stage_release(stages[i]);
    for (int i = 0; i < PASS_THREADS; i++) pthread_join(threads[i], NULL);
    CHECK(stat(s.top_path, &st) == 0, "pass: no upper trace file once its stage was released");

    int64_t operations = 0, scalar = 0; /* first and last, which the sum forwards */
    for (int i = 0; i < PASS_THREADS; i++) {
        operations += workers[i].logged;
        for (int64_t k = 0; k < workers[i].logged; k++)
            scalar += workers[i].log[k].op == PS_OP_FIRST || workers[i].log[k].op == PS_OP_LAST;
    }
    int64_t hits = counter(s.top_cache, "hits"), misses = counter(s.top_cache, "misses");
    int64_t low_hits = counter(s.low_cache, "hits"), low_misses = counter(s.low_cache, "misses");
    int64_t forwarded = scalar + misses; /* what the sum passed down besides its rounds */
    CHECK(hits + misses == atomic_load(&s.indexed) && hits > 0 && low_hits + low_misses == misses,
          "pass: upper cache %" PRId64 " hits + %" PRId64 " misses for %" PRId64 " indexed observes; lower %" PRId64
          " + %" PRId64, hits, misses, atomic_load(&s.indexed), low_hits, low_misses);
    /* Every link counts each call once; an exchange is one call. The sum's one link down carries
     * its rounds and, at the same time, what it forwards: none may be lost. */
    int64_t expected[STAGES] = {-1, operations, operations - hits, rounds + forwarded, rounds + forwarded,
                                rounds + forwarded - low_hits, rounds + forwarded - low_hits};
    for (int i = 1; i < STAGES; i++)
        CHECK(counter(stages[i], "operations") == expected[i], "pass: stage %d ('%s') counts %" PRId64
              " operations, expected %" PRId64, i, ps_stage_kind_name(stages[i]), counter(stages[i], "operations"),
              expected[i]);
    CHECK(counter(s.low_trace, "events") == rounds + forwarded, "pass: the lower trace counts %" PRId64 " events",
          counter(s.low_trace, "events"));
    for (int i = 1; i < STAGES; i++) ps_stage_release(stages[i]); /* the last references: all go now */
    memset(stages, 0, sizeof stages);
    s.top_trace = s.top_cache = s.sum = s.low_trace = s.low_cache = s.delay = s.core = NULL;

    check_top_trace(&s, workers, operations);
    check_low_trace(&s, forwarded, misses);
    CHECK(ps_last(s.element) == rounds, "pass: %" PRId64 " totals in the element", ps_last(s.element));
    unlink(s.top_path);
    unlink(s.low_path);
    for (int i = 0; i < PASS_THREADS; i++) free(workers[i].log);
    pthread_barrier_destroy(&s.attached);
    double took = (double)(ps_now_ns() - started) / 1e9;
    printf("  %-9s %-6s %5" PRId64 " rounds: %" PRId64 " traced operations, %" PRId64 " forwarded by the sum; caches %"
           PRId64 " + %" PRId64 " hits; %.2f s\n", "pass", "8", rounds, operations, forwarded, hits, low_hits, took);
    return took;
}

/* ---- links: concurrent attach and detach, counters read throughout, release in any order --------- */

enum { LINK_READERS = 2, READER_ATTACH_LIMIT = 900, READER_OPS = 8, WATCHED = MAX_STAGES + 2 };

typedef struct links_scene {
    tree tree;
    ps_stage *cache;               /* above the tree's core, for the readers */
    ps_stage *watched[WATCHED];    /* every stage, for the counters thread (which holds a reference) */
    int watched_count;
    int64_t rounds;
    pthread_barrier_t attached;
    atomic_bool contributors_done, stop;
    _Atomic int64_t reader_attaches, reader_ops, reader_indexed, reader_forwarded_scalar; /* first, last */
    int64_t readings;
} links_scene;

typedef struct links_worker {
    links_scene *scene;
    int id;
    ps_link link;
} links_worker;

static void *links_contributor(void *arg) {
    links_worker *w = arg;
    links_scene *s = w->scene;
    attach_or_die(tree_leaf(&s->tree, w->id), &w->link);
    pthread_barrier_wait(&s->attached);
    for (int64_t r = 0; r < s->rounds; r++) {
        int64_t value = contribution(w->id, r), total = -1;
        int rc = link_move(&w->link, &value, WAIT);
        if (rc == PS_OK) rc = link_observe(&w->link, &total, WAIT);
        CHECK(rc == PS_OK && total == expected_total(THREADS, r), "links: round %" PRId64 ": %s, %" PRId64, r,
              ps_status_name(rc), total);
        if (rc != PS_OK) break;
    }
    ps_link_detach(&w->link);
    return NULL;
}

static void *links_reader(void *arg) {
    links_scene *s = arg;
    uint64_t random = 0xA0761D6478BD642FULL ^ (uint64_t)(uintptr_t)&random;
    while (!atomic_load(&s->contributors_done) && atomic_fetch_add(&s->reader_attaches, 1) < READER_ATTACH_LIMIT) {
        ps_link link;
        attach_or_die(s->cache, &link);
        for (int k = 0; k < READER_OPS; k++) {
            uint64_t x = next_random(&random);
            int64_t value = -1, last = -1;
            int rc = link_value(&link, PS_OP_LAST, &last);
            atomic_fetch_add(&s->reader_ops, 1);
            atomic_fetch_add(&s->reader_forwarded_scalar, 1);
            CHECK(rc == PS_OK && last >= 0 && last <= s->rounds, "links: last %" PRId64, last);
            if (last > 0 && x % 2) {
                int64_t index = (int64_t)((x >> 8) % (uint64_t)last);
                rc = link_observe_at(&link, index, &value, WAIT);
                atomic_fetch_add(&s->reader_ops, 1);
                atomic_fetch_add(&s->reader_indexed, 1);
                CHECK(rc == PS_OK && value == expected_total(THREADS, index), "links: observe_at(%" PRId64 "): %s, %" PRId64,
                      index, ps_status_name(rc), value);
            } else if (x % 4 == 2) {
                rc = link_value(&link, PS_OP_FIRST, &value);
                atomic_fetch_add(&s->reader_ops, 1);
                atomic_fetch_add(&s->reader_forwarded_scalar, 1);
                CHECK(rc == PS_OK && value >= 0, "links: first %" PRId64, value);
            }
        }
        ps_link_detach(&link);
        if (next_random(&random) % 2) sched_yield();
    }
    return NULL;
}

static int64_t counter_in(const ps_counter *counters, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(counters[i].name, name) == 0) return counters[i].value;
    return -1;
}

/* Reads every stage's counters until told to stop: operations, links and rounds never go back. */
static void *links_counters(void *arg) {
    links_scene *s = arg;
    static const char *const MONOTONE[] = {"operations", "links", "rounds", "hits", "misses", "element_moves"};
    enum { MONOTONE_COUNT = sizeof MONOTONE / sizeof MONOTONE[0] };
    int64_t seen[WATCHED][MONOTONE_COUNT];
    memset(seen, 0, sizeof seen);
    while (!atomic_load(&s->stop)) {
        for (int i = 0; i < s->watched_count; i++) {
            ps_counter counters[MAX_COUNTERS];
            int n = ps_stage_counters(s->watched[i], counters, MAX_COUNTERS);
            for (int m = 0; m < MONOTONE_COUNT; m++) {
                int64_t value = counter_in(counters, n, MONOTONE[m]);
                if (value < 0) continue;
                CHECK(value >= seen[i][m], "links: counter '%s' of a '%s' went from %" PRId64 " to %" PRId64,
                      MONOTONE[m], ps_stage_kind_name(s->watched[i]), seen[i][m], value);
                seen[i][m] = value;
            }
            uint32_t max = ps_stage_max_links(s->watched[i]);
            CHECK(max == 0 || ps_stage_link_count(s->watched[i]) <= max, "links: more links than the fan-in");
            CHECK(stage_error(s->watched[i])[0] == 0, "links: stage error '%s'", stage_error(s->watched[i]));
        }
        s->readings++;
        if (s->readings % 4 == 0) sched_yield();
    }
    return NULL;
}

static double run_links_scene(ps_space *space, int64_t rounds) {
    int64_t started = ps_now_ns();
    atomic_store(&scene_running, "links");
    static links_scene s;
    memset(&s, 0, sizeof s);
    s.rounds = rounds;
    static const int fan_ins[] = {4, 4};
    tree_build(&s.tree, space, "links", "q", fan_ins, 2);
    s.cache = create_cache(space, 16, s.tree.core);
    for (int i = 0; i < s.tree.sum_count; i++) s.watched[s.watched_count++] = s.tree.sums[i];
    s.watched[s.watched_count++] = s.cache;
    s.watched[s.watched_count++] = s.tree.core;
    for (int i = 0; i < s.watched_count; i++) ps_stage_retain(s.watched[i]); /* the counters thread's */
    pthread_barrier_init(&s.attached, NULL, THREADS + 1);

    pthread_t counters_thread, readers[LINK_READERS], threads[THREADS];
    links_worker workers[THREADS];
    start_thread(&counters_thread, links_counters, &s);
    for (int i = 0; i < LINK_READERS; i++) start_thread(&readers[i], links_reader, &s);
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (links_worker){&s, i, {0}};
        start_thread(&threads[i], links_contributor, &workers[i]);
    }
    pthread_barrier_wait(&s.attached);
    /* Everyone is attached: the owner's references go, in a shuffled order. */
    ps_stage *owned[MAX_STAGES + 2];
    int owned_count = 0;
    for (int i = 0; i < s.tree.sum_count; i++) owned[owned_count++] = s.tree.sums[i];
    owned[owned_count++] = s.tree.core;
    uint64_t random = (uint64_t)started | 1;
    for (int i = owned_count - 1; i > 0; i--) {
        int j = (int)(next_random(&random) % (uint64_t)(i + 1));
        ps_stage *swap = owned[i];
        owned[i] = owned[j];
        owned[j] = swap;
    }
    for (int i = 0; i < owned_count; i++) ps_stage_release(owned[i]);
    memset(&s.tree.sums, 0, sizeof s.tree.sums);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    atomic_store(&s.contributors_done, true);
    for (int i = 0; i < LINK_READERS; i++) pthread_join(readers[i], NULL);
    ps_stage_release(s.cache); /* the owner's; readers are gone */
    atomic_store(&s.stop, true);
    pthread_join(counters_thread, NULL);

    /* All callers are gone; only the counters thread's references keep the stages. Exact now. */
    /* reader_attaches also counts the tries past the limit, which attached nothing. */
    int64_t attaches = atomic_load(&s.reader_attaches), reader_ops = atomic_load(&s.reader_ops);
    if (attaches > READER_ATTACH_LIMIT) attaches = READER_ATTACH_LIMIT;
    int64_t cache_links = counter(s.cache, "links");
    int64_t hits = counter(s.cache, "hits"), misses = counter(s.cache, "misses");
    CHECK(counter(s.cache, "operations") == reader_ops, "links: cache counts %" PRId64 " operations, readers made %" PRId64,
          counter(s.cache, "operations"), reader_ops);
    CHECK(hits + misses == atomic_load(&s.reader_indexed), "links: cache %" PRId64 " + %" PRId64 " for %" PRId64, hits,
          misses, atomic_load(&s.reader_indexed));
    /* A pass-through stage gives a gone caller's slot to the next: the cache never needed more
     * slots than readers at once, and has no caller left; below it, every attach was one. */
    CHECK(cache_links > 0 && cache_links <= LINK_READERS && ps_stage_link_count(s.cache) == 0,
          "links: cache handed out %" PRId64 " slots for %d readers at once, %u callers left", cache_links,
          LINK_READERS, ps_stage_link_count(s.cache));
    CHECK(counter(s.tree.core, "links") == 1 + attaches, "links: core has %" PRId64 " links, expected %" PRId64,
          counter(s.tree.core, "links"), 1 + attaches);
    CHECK(counter(s.tree.core, "operations") == rounds + misses + atomic_load(&s.reader_forwarded_scalar),
          "links: core counts %" PRId64 " operations, expected %" PRId64, counter(s.tree.core, "operations"),
          rounds + misses + atomic_load(&s.reader_forwarded_scalar));
    for (int i = 0; i < s.tree.sum_count; i++) {
        ps_stage *sum = s.watched[i];
        CHECK(counter(sum, "rounds") == rounds && counter(sum, "operations") == 4 * calls_per_caller(&s.tree, i) * rounds,
              "links: a sum counts %" PRId64 " rounds, %" PRId64 " operations", counter(sum, "rounds"),
              counter(sum, "operations"));
    }
    /* The last references, in the reverse order of the tree: the core goes last. */
    for (int i = s.watched_count - 1; i >= 0; i--) {
        ps_stage_release(s.watched[i]);
        s.watched[i] = NULL;
    }
    memset(&s.tree, 0, sizeof s.tree);
    s.cache = NULL;
    pthread_barrier_destroy(&s.attached);
    double took = (double)(ps_now_ns() - started) / 1e9;
    printf("  %-9s %-6s %5" PRId64 " rounds: %" PRId64 " reader attaches, %" PRId64 " reader operations, %" PRId64
           " counter sweeps; %.2f s\n", "links", "4x4", rounds, cache_links, reader_ops, s.readings, took);
    return took;
}

/* ---- main -------------------------------------------------------------------------------------------- */

/* ---- explain: each thread's failures in its own words ------------------------------------------ */

enum { SUM_AHEAD = 4 }; /* rounds a reduce-sum holds ahead of a caller's observes */

typedef struct explain_worker {
    ps_stage *sum;
    int id;
    int64_t rounds;
    pthread_barrier_t *start;
} explain_worker;

static void *explain_refused(void *arg) {
    explain_worker *w = arg;
    ps_link link;
    attach_or_die(w->sum, &link);
    uint32_t count = SUM_AHEAD + 1 + (uint32_t)w->id; /* more than fit, and this thread's own count */
    int64_t tuples[SUM_AHEAD + 1 + THREADS] = {0};
    char own[64], said[PS_STAGE_ERROR_MAX];
    snprintf(own, sizeof own, "these %u moves", count);
    pthread_barrier_wait(w->start);
    for (int64_t r = 0; r < w->rounds; r++) {
        ps_error_mark began = ps_stage_error_mark();
        uint32_t done = 1;
        int rc = link_move_many(&link, tuples, count, WAIT, &done);
        ps_stage_error_since(w->sum, began, said, sizeof said);
        if (rc != PS_ESTATE || done != 0) fail("explain: thread %d: %s with %u done, not refused", w->id,
                                               ps_status_name(rc), done);
        else if (!strstr(said, own)) fail("explain: thread %d was told '%s', not of %s", w->id, said, own);
        if (atomic_load(&failures)) break;
    }
    ps_link_detach(&link);
    return NULL;
}

static void run_explain_scene(ps_space *space, int64_t rounds) {
    atomic_store(&scene_running, "explain");
    ps_stage *core = create_core(space, "explain", "q");
    ps_stage *sum = create_sum(space, THREADS, core);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t threads[THREADS];
    explain_worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (explain_worker){sum, i, rounds, &start};
        start_thread(&threads[i], explain_refused, &workers[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    ps_stage_release(sum);
    ps_stage_release(core);
}

int main(int argc, char **argv) {
    stress_run run = stress_begin("stress_stages", argc, argv, 2000, RUN_BUDGET);
    int64_t rounds = run.rounds;
    char directory[] = "/tmp/stress_stages.XXXXXX";
    if (!mkdtemp(directory)) {
        fprintf(stderr, "FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    ps_space *space = ps_space_new();
    if (!space) return 1;
    printf("stress_stages: %d threads, %" PRId64 " rounds\n", THREADS, rounds);

    static const int flat[] = {16}, two[] = {4, 4}, three[] = {2, 2, 4}, wide[] = {2, 8};
    run_sum_scene(space, "gsum-1", MODE_LOCKSTEP, flat, 1, rounds);
    run_sum_scene(space, "gsum-2", MODE_LOCKSTEP, two, 2, rounds);
    run_sum_scene(space, "gsum-3", MODE_LOCKSTEP, three, 3, rounds);
    run_fields_scene(space, "fields-qd", "qd", wide, 2, rounds / 4);
    run_fields_scene(space, "fields-id", "id", two, 2, rounds / 4);
    run_sum_scene(space, "drift-2", MODE_DRIFT, two, 2, rounds / 2);
    run_sum_scene(space, "drift-3", MODE_DRIFT, three, 3, rounds / 2);
    run_sum_scene(space, "timeouts", MODE_TINY_TIMEOUTS, two, 2, rounds / 4);
    run_pass_scene(space, rounds / 4, directory);
    run_links_scene(space, rounds / 4);
    run_explain_scene(space, rounds / 4);

    int code = stress_end(&run);
    ps_space_free(space);
    rmdir(directory);
    return code;
}
