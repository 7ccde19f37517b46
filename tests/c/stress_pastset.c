/* stress_pastset.c — a standalone stress test of the PastSet core (the pastset/ sources, no Python).
 *
 * tests/test_c_stress.py builds it plain, under AddressSanitizer + UBSan and under ThreadSanitizer.
 * Usage: stress_pastset [tuples_per_producer]   (default 50000). Exits 1 on any failure.
 *
 * Two scenes run at the same time on one space, then a scene of names, then two checks of one call
 * at a time:
 *   flow     producers move under a delta bound that a keeper thread keeps changing (and checks),
 *            half of them in runs of up to 300 with one move_many each; next-observers consume,
 *            an axer axes everything moved so far, read or not, and what was consumed, in turns;
 *            a chaser reads random indexes meanwhile. Every move and observe uses a short timeout
 *            and retries, so a timed-out call that appended or consumed anything and did not say
 *            so shows up as a duplicate, a loss or a wrong counter; an axe that dropped an unread
 *            tuple shows up as a loss.
 *   history  producers move freely (half of them in runs, with move_many), indexed readers read
 *            every index in order, an axer frees what every reader has passed, a chaser reads
 *            random old indexes that may be axed. No one moves the cursor, so nothing is freed
 *            until the end, when a next-observer reads the whole axed history and so frees it.
 *   timeouts observe, observe_at and move at the bound expire on time and change nothing.
 *   names    threads enter, use and leave elements of a few names while a remover keeps removing
 *            them: a held element is never removed (the holder's own remove is refused), one
 *            nobody holds is, and a name removed is entered again as a new, empty element. Then
 *            10^5 names entered, listed in creation order, and removed.
 *   wake-up  an observer and a mover asleep in the futex are woken by the call they wait for, and so
 *            is an observer whose timeout reaches past the clock's end (it waits as without one);
 *            and a wait's running count, after 2^32 turns, still says it is no first wait.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pastset.h"
#include "waitpoint.h"

enum { PRODUCERS = 6, OBSERVERS = 4, READERS = 3, CHASER_SAMPLES = 4096, MAX_REPORTS = 20, MOVE_RUN_MAX = 300 };
_Static_assert(PRODUCERS >= OBSERVERS && PRODUCERS >= READERS, "workers are indexed by producer id");

#define TUPLE_FORMAT "qqq"
#define MS 1000000LL
/* The bounds the keeper cycles through; the flow's unread tuples never exceed the largest. */
static const int64_t FLOW_BOUNDS[] = {1, 7, 32};
#define FLOW_MAX_BOUND 32
/* Timeouts the flow's calls cycle through: an immediate one, a spinning one, a sleeping one. */
static const int64_t SHORT_TIMEOUTS[] = {0, 20000, 1 * MS};
/* The longest a call waits for something that must come: a lost wake-up fails, never hangs. */
#define WAKE_TIMEOUT (5000 * MS)
/* A log chunk holds at most 64 KiB, so a fully axed element keeps at most its current chunk and
 * one spare; one axed up to index a keeps at most those and the chunks from a on. */
#define CHUNK_BYTES_LIMIT (64 * 1024)
#define AXED_BYTES_LIMIT (2 * CHUNK_BYTES_LIMIT)

typedef struct stress_tuple {
    int64_t producer, seq, check;
} stress_tuple;

#include "stress_report.h"

static int64_t check_of(int64_t producer, int64_t seq) {
    return (int64_t)(((uint64_t)producer * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)seq);
}

static stress_tuple make_tuple(int64_t producer, int64_t seq) {
    stress_tuple t = {producer, seq, check_of(producer, seq)};
    return t;
}

/* A tuple is whole: its fields were written together (no torn copy) by a known producer. */
static bool tuple_is_whole(const stress_tuple *t, int64_t per_producer) {
    return t->producer >= 0 && t->producer < PRODUCERS && t->seq >= 0 && t->seq < per_producer &&
           t->check == check_of(t->producer, t->seq);
}

static void start_thread(pthread_t *thread, void *(*body)(void *), void *arg) {
    if (pthread_create(thread, NULL, body, arg) != 0) {
        fprintf(stderr, "FAIL: pthread_create\n");
        exit(1);
    }
}

static void pause_briefly(void) {
    struct timespec pause = {0, 50000};
    nanosleep(&pause, NULL);
}


static ps_element_stats stats_of(ps_element *e) {
    ps_element_stats s;
    ps_element_stats_read(e, &s);
    return s;
}

/* ---- flow: delta bound, next-observers, axe behind the cursor, timeouts everywhere ---------- */

typedef struct flow_scene {
    ps_element *e;
    int64_t per_producer, total;
    atomic_uchar *seen;           /* seen[producer * per_producer + seq]: times observed */
    _Atomic int64_t consumed;     /* distinct tuples observed */
    atomic_int producers_running;
    atomic_bool done;             /* observers finished: helpers stop */
    _Atomic int64_t timed_out;    /* calls that expired and were retried */
    _Atomic int64_t chased;       /* the chaser's indexed reads that found their tuple */
} flow_scene;

typedef struct flow_worker {
    flow_scene *scene;
    int id;
} flow_worker;

/* Moves the producer's tuples seq .. seq + n - 1 with one ps_move_many, retried from where a
 * timeout left it (its `done` must be exact: a miscount shows up as a duplicate or a loss). */
static int move_run(ps_element *e, int id, int64_t seq, uint32_t n, const int64_t *timeouts, _Atomic int64_t *timed_out) {
    stress_tuple run[MOVE_RUN_MAX];
    for (uint32_t i = 0; i < n; i++) run[i] = make_tuple(id, seq + i);
    uint32_t moved = 0;
    int rc, attempt = 0;
    for (;;) {
        uint32_t done = UINT32_MAX;
        rc = ps_move_many(e, run + moved, n - moved, &done, timeouts ? timeouts[(id + attempt++) % 3] : PS_FOREVER);
        CHECK(done <= n - moved, "move_many: done %u of %u", done, n - moved);
        moved += done <= n - moved ? done : 0;
        if (rc != PS_ETIMEDOUT) break;
        atomic_fetch_add(timed_out, 1);
    }
    return rc;
}

/* Producers of odd id move runs of 1 to MOVE_RUN_MAX tuples with ps_move_many, the others one at a time. */
static uint32_t run_length(int id, int64_t seq, int64_t left) {
    int64_t n = id % 2 ? 1 + (seq * 7 + id) % MOVE_RUN_MAX : 1;
    return (uint32_t)(n < left ? n : left);
}

static void *flow_produce(void *arg) {
    flow_worker *w = arg;
    flow_scene *s = w->scene;
    for (int64_t seq = 0; seq < s->per_producer;) {
        uint32_t n = run_length(w->id, seq, s->per_producer - seq);
        int rc;
        if (w->id % 2) {
            rc = move_run(s->e, w->id, seq, n, SHORT_TIMEOUTS, &s->timed_out);
        } else {
            stress_tuple t = make_tuple(w->id, seq);
            int attempt = 0;
            while ((rc = ps_move(s->e, &t, SHORT_TIMEOUTS[(w->id + attempt++) % 3])) == PS_ETIMEDOUT)
                atomic_fetch_add(&s->timed_out, 1);
        }
        CHECK(rc == PS_OK, "flow move: %s", ps_status_name(rc));
        seq += n;
    }
    atomic_fetch_sub(&s->producers_running, 1);
    return NULL;
}

static void *flow_observe(void *arg) {
    flow_worker *w = arg;
    flow_scene *s = w->scene;
    int64_t last_seq[PRODUCERS], last_index = -1;
    for (int p = 0; p < PRODUCERS; p++) last_seq[p] = -1;
    for (int attempt = 0; atomic_load(&s->consumed) < s->total; attempt++) {
        stress_tuple t;
        int64_t index = -1;
        int rc = ps_observe(s->e, &t, &index, SHORT_TIMEOUTS[(w->id + attempt) % 3]);
        if (rc == PS_ETIMEDOUT) {
            atomic_fetch_add(&s->timed_out, 1);
            /* Everything moved was read, yet tuples are missing: flow_verify reports the loss. */
            if (atomic_load(&s->producers_running) == 0 && ps_first(s->e) == ps_last(s->e)) break;
            continue;
        }
        CHECK(rc == PS_OK, "flow observe: %s", ps_status_name(rc));
        if (rc != PS_OK) break;
        if (!tuple_is_whole(&t, s->per_producer)) {
            fail("flow observer %d: torn or foreign tuple at index %" PRId64, w->id, index);
            continue;
        }
        CHECK(index > last_index, "flow observer %d: index %" PRId64 " after %" PRId64, w->id, index, last_index);
        CHECK(t.seq > last_seq[t.producer], "flow observer %d: producer %" PRId64 " seq %" PRId64 " after %" PRId64,
              w->id, t.producer, t.seq, last_seq[t.producer]);
        last_index = index;
        last_seq[t.producer] = t.seq;
        unsigned char before = atomic_fetch_add(&s->seen[t.producer * s->per_producer + t.seq], 1);
        CHECK(before == 0, "flow: producer %" PRId64 " seq %" PRId64 " observed twice", t.producer, t.seq);
        if (before == 0) atomic_fetch_add(&s->consumed, 1);
    }
    return NULL;
}

/* Cycles the delta bound and checks it holds: reading last before first can only understate the
 * unread count, so last - first above the largest bound is a real violation. */
static void *flow_keep_bound(void *arg) {
    flow_scene *s = arg;
    for (size_t round = 0; !atomic_load(&s->done); round++) {
        CHECK(ps_set_delta(s->e, FLOW_BOUNDS[round % 3]) == PS_OK, "flow: set_delta failed");
        for (int probe = 0; probe < 16; probe++) {
            int64_t last = ps_last(s->e);
            int64_t first = ps_first(s->e);
            CHECK(last - first <= FLOW_MAX_BOUND, "flow: %" PRId64 " unread tuples, bound %d", last - first,
                  FLOW_MAX_BOUND);
        }
        pause_briefly();
    }
    return NULL;
}

/* Axes everything moved (ahead of the cursor: the unread tuples must still reach the observers)
 * and what was consumed, in turns; the axe point only grows. */
static void *flow_axe(void *arg) {
    flow_scene *s = arg;
    int64_t point = 0;
    for (int turn = 0; !atomic_load(&s->done); turn++) {
        int64_t index = turn % 2 ? ps_first(s->e) : ps_last(s->e);
        int rc = ps_axe(s->e, index);
        CHECK(rc == PS_OK, "flow axe(%" PRId64 "): %s", index, ps_status_name(rc));
        int64_t now = ps_axed(s->e);
        CHECK(now >= point && now >= index, "flow: axe point %" PRId64 " after %" PRId64 " and axe(%" PRId64 ")",
              now, point, index);
        point = now;
        pause_briefly();
    }
    return NULL;
}

/* Reads random indexes around the axe point while the axer works: each read is a whole tuple at
 * or past the axe point when it began, or axed, at an index before the axe point when it ended. */
static void *flow_chase(void *arg) {
    flow_scene *s = arg;
    uint64_t random_state = 0x9E3779B97F4A7C15ULL;
    while (!atomic_load(&s->done)) {
        int64_t point = ps_axed(s->e), last = ps_last(s->e);
        int64_t low = point > FLOW_MAX_BOUND ? point - FLOW_MAX_BOUND : 0;
        if (last <= low) {
            sched_yield();
            continue;
        }
        random_state ^= random_state << 13;
        random_state ^= random_state >> 7;
        random_state ^= random_state << 17;
        int64_t index = low + (int64_t)(random_state % (uint64_t)(last - low));
        int64_t before = ps_axed(s->e);
        stress_tuple t;
        int rc = ps_observe_at(s->e, index, &t, 0);
        int64_t after = ps_axed(s->e);
        pause_briefly(); /* a look now and then: the flow's own calls must keep the lock's pace */
        if (rc == PS_EAXED) {
            CHECK(index < after, "flow: observe_at(%" PRId64 ") axed, but the axe point is %" PRId64, index, after);
        } else {
            CHECK(rc == PS_OK, "flow chaser observe_at(%" PRId64 "): %s", index, ps_status_name(rc));
            if (rc != PS_OK) continue;
            atomic_fetch_add(&s->chased, 1);
            CHECK(index >= before, "flow: observe_at(%" PRId64 ") read, but the axe point was %" PRId64, index, before);
            CHECK(tuple_is_whole(&t, s->per_producer), "flow: torn tuple at index %" PRId64, index);
        }
    }
    return NULL;
}

static void flow_verify(flow_scene *s) {
    int64_t lost = 0;
    for (int64_t i = 0; i < s->total; i++) lost += atomic_load(&s->seen[i]) == 0;
    CHECK(lost == 0, "flow: %" PRId64 " tuples never observed", lost);
    ps_element_stats stats = stats_of(s->e);
    CHECK(stats.moves == s->total, "flow: %" PRId64 " moves counted, %" PRId64 " made", stats.moves, s->total);
    int64_t observes = s->total + atomic_load(&s->chased);
    CHECK(stats.observes == observes, "flow: %" PRId64 " observes counted, %" PRId64 " made", stats.observes,
          observes);
    CHECK(ps_first(s->e) == s->total && ps_last(s->e) == s->total, "flow: first %" PRId64 " last %" PRId64
          ", expected both %" PRId64, ps_first(s->e), ps_last(s->e), s->total);
    /* The cursor passed the axe point: everything before it is freed, chunk by chunk. */
    int64_t point = ps_axed(s->e);
    CHECK(stats.live_tuples == s->total - point, "flow: %" PRId64 " tuples live, axed up to %" PRId64 " of %" PRId64,
          stats.live_tuples, point, s->total);
    int64_t limit = (s->total - point) * (int64_t)sizeof(stress_tuple) + 3 * CHUNK_BYTES_LIMIT;
    CHECK(stats.bytes_held <= limit, "flow: %" PRId64 " bytes held, axed up to %" PRId64 " of %" PRId64,
          stats.bytes_held, point, s->total);
}

/* ---- history: indexed readers, axe behind the slowest reader, a chaser of axed indexes ------- */

typedef struct history_scene {
    ps_element *e;
    int64_t per_producer, total;
    stress_tuple *copies[READERS];    /* what each reader read, index by index */
    _Atomic int64_t progress[READERS]; /* indexes below this were read by that reader */
    atomic_bool done;
    int64_t sample_index[CHASER_SAMPLES]; /* the chaser's latest successful reads, a ring */
    stress_tuple sample[CHASER_SAMPLES];
    int64_t chaser_reads, chaser_axed_hits;
} history_scene;

typedef struct history_worker {
    history_scene *scene;
    int id;
} history_worker;

static void *history_produce(void *arg) {
    history_worker *w = arg;
    history_scene *s = w->scene;
    _Atomic int64_t never = 0;
    for (int64_t seq = 0; seq < s->per_producer;) {
        uint32_t n = run_length(w->id, seq, s->per_producer - seq);
        stress_tuple t = make_tuple(w->id, seq);
        int rc = w->id % 2 ? move_run(s->e, w->id, seq, n, NULL, &never) : ps_move(s->e, &t, PS_FOREVER);
        CHECK(rc == PS_OK, "history move: %s", ps_status_name(rc));
        seq += n;
    }
    return NULL;
}

static void *history_read(void *arg) {
    history_worker *w = arg;
    history_scene *s = w->scene;
    for (int64_t i = 0; i < s->total; i++) {
        int rc = ps_observe_at(s->e, i, &s->copies[w->id][i], WAKE_TIMEOUT);
        CHECK(rc == PS_OK, "history reader %d: observe_at(%" PRId64 "): %s", w->id, i, ps_status_name(rc));
        if (rc != PS_OK) break;
        atomic_store(&s->progress[w->id], i + 1);
    }
    return NULL;
}

static void *history_axe_read(void *arg) {
    history_scene *s = arg;
    while (!atomic_load(&s->done)) {
        int64_t slowest = s->total;
        for (int r = 0; r < READERS; r++) {
            int64_t read = atomic_load(&s->progress[r]);
            if (read < slowest) slowest = read;
        }
        int rc = ps_axe(s->e, slowest);
        CHECK(rc == PS_OK, "history axe(%" PRId64 "): %s", slowest, ps_status_name(rc));
        pause_briefly();
    }
    return NULL;
}

/* Reads random indexes of the history: each read either succeeds (the latest are kept to compare
 * with the readers later) or reports the index axed, which it must then be. */
static void *history_chase(void *arg) {
    history_scene *s = arg;
    uint64_t random_state = 0x2545F4914F6CDD1DULL;
    while (!atomic_load(&s->done)) {
        int64_t last = ps_last(s->e);
        if (last == 0) {
            sched_yield();
            continue;
        }
        random_state ^= random_state << 13;
        random_state ^= random_state >> 7;
        random_state ^= random_state << 17;
        int64_t index = (int64_t)(random_state % (uint64_t)last);
        stress_tuple t;
        int rc = ps_observe_at(s->e, index, &t, 0);
        if (rc == PS_EAXED) {
            s->chaser_axed_hits++;
            CHECK(index < ps_axed(s->e), "history: observe_at(%" PRId64 ") axed but axed = %" PRId64, index,
                  ps_axed(s->e));
        } else {
            CHECK(rc == PS_OK, "history chaser observe_at(%" PRId64 "): %s", index, ps_status_name(rc));
            if (rc == PS_OK) {
                int64_t slot = s->chaser_reads++ % CHASER_SAMPLES;
                s->sample_index[slot] = index;
                s->sample[slot] = t;
            }
        }
    }
    return NULL;
}

static void history_verify(history_scene *s) {
    const stress_tuple *reference = s->copies[0];
    int64_t next_seq[PRODUCERS] = {0};
    for (int64_t i = 0; i < s->total; i++) {
        const stress_tuple *t = &reference[i];
        if (!tuple_is_whole(t, s->per_producer)) {
            fail("history: torn or foreign tuple at index %" PRId64, i);
            continue;
        }
        /* Exactly once and in each producer's order: producer p's k-th tuple has seq k. */
        CHECK(t->seq == next_seq[t->producer], "history[%" PRId64 "]: producer %" PRId64 " seq %" PRId64
              ", expected %" PRId64, i, t->producer, t->seq, next_seq[t->producer]);
        next_seq[t->producer] = t->seq + 1;
    }
    for (int r = 1; r < READERS; r++)
        CHECK(memcmp(s->copies[r], reference, (size_t)s->total * sizeof *reference) == 0,
              "history: reader %d saw another history than reader 0", r);
    int64_t samples = s->chaser_reads < CHASER_SAMPLES ? s->chaser_reads : CHASER_SAMPLES;
    for (int64_t k = 0; k < samples; k++)
        CHECK(memcmp(&s->sample[k], &reference[s->sample_index[k]], sizeof(stress_tuple)) == 0,
              "history: chaser read another tuple at index %" PRId64, s->sample_index[k]);

    /* Axed, but never read by a next-observe: every tuple is kept, and refused by index. */
    CHECK(ps_axe(s->e, s->total) == PS_OK, "history: final axe failed");
    ps_element_stats stats = stats_of(s->e);
    CHECK(stats.live_tuples == s->total, "history: %" PRId64 " tuples live after axing all unread, expected %" PRId64,
          stats.live_tuples, s->total);
    stress_tuple t;
    CHECK(ps_observe_at(s->e, 0, &t, 0) == PS_EAXED, "history: axed tuple 0 still observable");
    /* A next-observer reads them all, in order, and frees them as it goes. */
    for (int64_t i = 0; i < s->total; i++) {
        int64_t index = -1;
        int rc = ps_observe(s->e, &t, &index, 0);
        CHECK(rc == PS_OK && index == i && memcmp(&t, &reference[i], sizeof t) == 0,
              "history: axed unread tuple %" PRId64 ": %s, index %" PRId64, i, ps_status_name(rc), index);
        if (rc != PS_OK) break;
    }
    stats = stats_of(s->e);
    CHECK(stats.live_tuples == 0, "history: %" PRId64 " tuples live after reading all axed", stats.live_tuples);
    CHECK(stats.bytes_held <= AXED_BYTES_LIMIT, "history: %" PRId64 " bytes held after reading all axed",
          stats.bytes_held);
}

/* ---- names: enter, leave and remove from many threads ----------------------------------------- */

enum { NAMES = 48, NAME_WORKERS = 4, NAME_ROUNDS = 20000, MANY_NAMES = 100000 };

typedef struct names_scene {
    ps_space *space;
    atomic_bool done;
    _Atomic int64_t removed, refused, absent;
} names_scene;

static void name_of(char *out, size_t size, int64_t k) { snprintf(out, size, "name-%" PRId64, k); }

/* Enters a name, moves into it, tries to remove it while holding it (refused), leaves it. */
static void *names_use(void *arg) {
    names_scene *s = arg;
    uint64_t random_state = 0xD1B54A32D192ED03ULL ^ (uint64_t)(uintptr_t)&random_state;
    for (int round = 0; round < NAME_ROUNDS; round++) {
        random_state ^= random_state << 13;
        random_state ^= random_state >> 7;
        random_state ^= random_state << 17;
        char name[32];
        name_of(name, sizeof name, (int64_t)(random_state % NAMES));
        ps_element *e = NULL;
        int rc = ps_enter(s->space, name, "q", &e);
        CHECK(rc == PS_OK, "names: enter %s: %s", name, ps_status_name(rc));
        if (rc != PS_OK) continue;
        int64_t value = round;
        CHECK(ps_move(e, &value, 0) == PS_OK && ps_last(e) >= 1, "names: move into %s", name);
        int64_t holds = 0;
        rc = ps_remove(s->space, name, "q", &holds);
        CHECK(rc == PS_ESTATE && holds >= 1, "names: removing %s while holding it: %s, %" PRId64 " holds", name,
              ps_status_name(rc), holds);
        CHECK(strcmp(ps_element_name(e), name) == 0, "names: %s is now %s", name, ps_element_name(e));
        ps_leave(e);
    }
    return NULL;
}

static void *names_remove(void *arg) {
    names_scene *s = arg;
    for (int64_t k = 0; !atomic_load(&s->done); k = (k + 1) % NAMES) {
        char name[32];
        name_of(name, sizeof name, k);
        int64_t holds = 0;
        int rc = ps_remove(s->space, name, "q", &holds);
        if (rc == PS_OK) atomic_fetch_add(&s->removed, 1);
        else if (rc == PS_ESTATE) atomic_fetch_add(&s->refused, 1);
        else if (rc == PS_EINVAL) atomic_fetch_add(&s->absent, 1);
        CHECK(rc == PS_OK || rc == PS_EINVAL || (rc == PS_ESTATE && holds > 0), "names: remove %s: %s, %" PRId64
              " holds", name, ps_status_name(rc), holds);
    }
    return NULL;
}

static void count_element(void *context, const ps_element *e) {
    (void)e;
    (*(int64_t *)context)++;
}

/* Checks that the elements listed are name-0, name-1, ... name-(count-1) in creation order. */
static void check_listed_in_order(void *context, const ps_element *e) {
    int64_t *next = context;
    char name[32];
    name_of(name, sizeof name, (*next)++);
    CHECK(strcmp(ps_element_name(e), name) == 0, "names: listed %s where %s was expected", ps_element_name(e), name);
}

static void check_names(void) {
    names_scene s = {.space = ps_space_new()};
    if (!s.space) exit(1);
    pthread_t workers[NAME_WORKERS], remover;
    start_thread(&remover, names_remove, &s);
    for (int i = 0; i < NAME_WORKERS; i++) start_thread(&workers[i], names_use, &s);
    for (int i = 0; i < NAME_WORKERS; i++) pthread_join(workers[i], NULL);
    atomic_store(&s.done, true);
    pthread_join(remover, NULL);
    CHECK(atomic_load(&s.removed) > 0, "names: the remover never removed an element");

    /* Nobody holds anything now: every name left is removed, and a new one starts empty. */
    for (int64_t k = 0; k < NAMES; k++) {
        char name[32];
        name_of(name, sizeof name, k);
        int rc = ps_remove(s.space, name, "q", NULL);
        CHECK(rc == PS_OK || rc == PS_EINVAL, "names: final remove of %s: %s", name, ps_status_name(rc));
    }
    int64_t listed = 0;
    ps_space_each(s.space, count_element, &listed);
    CHECK(listed == 0, "names: %" PRId64 " elements listed after removing all", listed);
    ps_element *e = enter_or_die(s.space, "name-0", "q");
    CHECK(ps_last(e) == 0, "names: a name entered again holds %" PRId64 " old tuples", ps_last(e));
    ps_leave(e);
    CHECK(ps_remove(s.space, "name-0", "q", NULL) == PS_OK, "names: remove of a fresh element");

    /* Many names: the table grows under them, they list in creation order, and all go. */
    for (int64_t k = 0; k < MANY_NAMES; k++) {
        char name[32];
        name_of(name, sizeof name, k);
        ps_leave(enter_or_die(s.space, name, "q"));
    }
    int64_t next = 0;
    ps_space_each(s.space, check_listed_in_order, &next);
    CHECK(next == MANY_NAMES, "names: %" PRId64 " of %d names listed", next, MANY_NAMES);
    for (int64_t k = MANY_NAMES - 1; k >= 0; k--) {
        char name[32];
        name_of(name, sizeof name, k);
        CHECK(ps_remove(s.space, name, "q", NULL) == PS_OK, "names: remove %s of many", name);
    }
    listed = 0;
    ps_space_each(s.space, count_element, &listed);
    CHECK(listed == 0, "names: %" PRId64 " of many names left", listed);
    printf("stress_pastset names: %" PRId64 " removed, %" PRId64 " refused in use, %" PRId64 " absent\n",
           atomic_load(&s.removed), atomic_load(&s.refused), atomic_load(&s.absent));
    ps_space_free(s.space);
}

/* ---- timeouts and wake-ups, one call at a time ------------------------------------------------ */

/* The three calls that block: each waits on the element prepared by check_timeouts. */
static int observe_next(ps_element *e, int64_t timeout_ns) {
    int64_t out;
    return ps_observe(e, &out, NULL, timeout_ns);
}

static int observe_past_last(ps_element *e, int64_t timeout_ns) {
    int64_t out;
    return ps_observe_at(e, ps_last(e) + 2, &out, timeout_ns);
}

static int move_at_bound(ps_element *e, int64_t timeout_ns) {
    int64_t value = -1;
    return ps_move(e, &value, timeout_ns);
}

/* Runs one blocking call that must expire: it takes at least its timeout (and not absurdly
 * longer) and leaves the element's indexes and counters as they were. */
static void expect_timeout(ps_element *e, const char *what, int (*call)(ps_element *, int64_t), int64_t timeout_ns) {
    ps_element_stats before = stats_of(e);
    int64_t first = ps_first(e), last = ps_last(e), started = ps_now_ns();
    int rc = call(e, timeout_ns);
    int64_t took = ps_now_ns() - started;
    ps_element_stats after = stats_of(e);
    CHECK(rc == PS_ETIMEDOUT, "%s: %s, expected a timeout", what, ps_status_name(rc));
    CHECK(took >= timeout_ns && took < timeout_ns + 2000 * MS, "%s: took %" PRId64 " ns for a %" PRId64
          " ns timeout", what, took, timeout_ns);
    CHECK(ps_first(e) == first && ps_last(e) == last && after.moves == before.moves &&
          after.observes == before.observes, "%s: a timed-out call changed the element", what);
}

static void check_timeouts(ps_space *space) {
    ps_element *e = enter_or_die(space, "timeouts", "q");
    int64_t value = 0, out = -1;
    for (int sleeping = 0; sleeping < 2; sleeping++) {
        int64_t timeout = sleeping ? 30 * MS : 0; /* 30 ms outlasts spinning and yielding */
        expect_timeout(e, "observe", observe_next, timeout);
        expect_timeout(e, "observe_at past last", observe_past_last, timeout);
        CHECK(ps_set_delta(e, 1) == PS_OK, "timeouts: set_delta");
        CHECK(ps_move(e, &value, 0) == PS_OK, "timeouts: move below the bound");
        expect_timeout(e, "move at the bound", move_at_bound, timeout);
        CHECK(ps_observe(e, &out, NULL, 0) == PS_OK && out == value, "timeouts: element unusable after timeouts");
        value++;
    }
}

/* A call made on its own thread that should block until released. */
typedef struct blocked_call {
    ps_element *e;
    int64_t value, timeout_ns;
    int rc;
    atomic_bool returned;
} blocked_call;

static void *observe_until_woken(void *arg) {
    blocked_call *c = arg;
    c->rc = ps_observe(c->e, &c->value, NULL, c->timeout_ns);
    atomic_store(&c->returned, true);
    return NULL;
}

static void *move_until_woken(void *arg) {
    blocked_call *c = arg;
    c->rc = ps_move(c->e, &c->value, c->timeout_ns);
    atomic_store(&c->returned, true);
    return NULL;
}

/* Starts body on its own thread, lets it wait until it sleeps in the futex, then runs release. */
static void run_blocked(const char *what, blocked_call *c, void *(*body)(void *), void (*release)(ps_element *)) {
    int64_t waits_before = stats_of(c->e).waits;
    pthread_t thread;
    start_thread(&thread, body, c);
    while (stats_of(c->e).waits == waits_before && !atomic_load(&c->returned)) sched_yield();
    CHECK(!atomic_load(&c->returned), "wake-up: %s returned without blocking", what);
    struct timespec asleep = {0, 20 * MS}; /* long past spinning and yielding: coverage, not sync */
    nanosleep(&asleep, NULL);
    release(c->e);
    pthread_join(thread, NULL);
}

static void move_answer(ps_element *e) {
    int64_t answer = 42;
    CHECK(ps_move(e, &answer, 0) == PS_OK, "wake-up: move");
}

static void observe_one(ps_element *e) {
    int64_t out;
    CHECK(ps_observe(e, &out, NULL, 0) == PS_OK, "wake-up: observe");
}

static void check_wake_ups(ps_space *space) {
    ps_element *e = enter_or_die(space, "wake-up", "q");
    blocked_call observer = {.e = e, .value = -1, .timeout_ns = WAKE_TIMEOUT, .rc = -1};
    run_blocked("observe on an empty element", &observer, observe_until_woken, move_answer);
    CHECK(observer.rc == PS_OK && observer.value == 42, "wake-up: sleeping observer got rc %d value %" PRId64,
          observer.rc, observer.value);

    /* A timeout too long for the clock to count (now + timeout overflows) is no limit at all. */
    blocked_call patient = {.e = e, .value = -1, .timeout_ns = INT64_MAX, .rc = -1};
    run_blocked("observe with a timeout past the clock's end", &patient, observe_until_woken, move_answer);
    CHECK(patient.rc == PS_OK && patient.value == 42, "wake-up: observer with timeout INT64_MAX got rc %d value %"
          PRId64, patient.rc, patient.value);

    CHECK(ps_set_delta(e, 1) == PS_OK, "wake-up: set_delta");
    move_answer(e);
    blocked_call mover = {.e = e, .value = 7, .timeout_ns = WAKE_TIMEOUT, .rc = -1};
    run_blocked("move at the bound", &mover, move_until_woken, observe_one);
    CHECK(mover.rc == PS_OK && ps_last(e) == 4, "wake-up: sleeping mover got rc %d, last %" PRId64, mover.rc,
          ps_last(e));
}

/* An operation counts its waiter and sets its deadline on its first wait (a running count of 0):
 * a wait woken 2^32 times (say an observe_at far ahead of busy movers) must not look like a first
 * wait again, which would count the waiter twice and push its deadline back. */
static void check_long_wait_count(void) {
    ps_waitpoint w;
    ps_waitpoint_init(&w);
    uint32_t spins = UINT32_MAX;
    int rc = ps_waitpoint_wait(&w, ps_waitpoint_sequence(&w) + 1, PS_FOREVER, &spins); /* moved: returns */
    CHECK(rc == 0 && spins != 0, "wait count: the 2^32nd turn of a wait (rc %d) made its count %" PRIu32
          ", a first wait's", rc, spins);
}

/* ---- main ------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int64_t per_producer = argc > 1 ? strtoll(argv[1], NULL, 10) : 50000;
    if (per_producer <= 0) {
        fprintf(stderr, "usage: %s [tuples_per_producer > 0]\n", argv[0]);
        return 2;
    }
    int64_t total = per_producer * PRODUCERS;
    int64_t started = ps_now_ns();
    ps_space *space = ps_space_new();
    if (!space) return 1;

    static flow_scene flow;
    flow.e = enter_or_die(space, "flow", TUPLE_FORMAT);
    flow.per_producer = per_producer;
    flow.total = total;
    flow.seen = calloc((size_t)total, sizeof *flow.seen);
    atomic_init(&flow.producers_running, PRODUCERS);
    ps_set_delta(flow.e, FLOW_MAX_BOUND); /* bounded before the first producer runs */

    static history_scene history;
    history.e = enter_or_die(space, "history", TUPLE_FORMAT);
    history.per_producer = per_producer;
    history.total = total;
    if (!flow.seen) return 1;
    for (int r = 0; r < READERS; r++) {
        history.copies[r] = calloc((size_t)total, sizeof(stress_tuple));
        if (!history.copies[r]) return 1;
    }

    /* Producer i, observer i and reader i share worker i: it only names the scene and the id. */
    flow_worker flow_workers[PRODUCERS];
    history_worker history_workers[PRODUCERS];
    pthread_t flow_producers[PRODUCERS], flow_observers[OBSERVERS], flow_keeper, flow_axer, flow_chaser;
    pthread_t history_producers[PRODUCERS], history_readers[READERS], history_axer, history_chaser;
    for (int i = 0; i < PRODUCERS; i++) {
        flow_workers[i] = (flow_worker){&flow, i};
        history_workers[i] = (history_worker){&history, i};
    }

    start_thread(&flow_keeper, flow_keep_bound, &flow);
    start_thread(&flow_axer, flow_axe, &flow);
    start_thread(&flow_chaser, flow_chase, &flow);
    start_thread(&history_axer, history_axe_read, &history);
    start_thread(&history_chaser, history_chase, &history);
    for (int i = 0; i < OBSERVERS; i++) start_thread(&flow_observers[i], flow_observe, &flow_workers[i]);
    for (int i = 0; i < READERS; i++) start_thread(&history_readers[i], history_read, &history_workers[i]);
    for (int i = 0; i < PRODUCERS; i++) {
        start_thread(&flow_producers[i], flow_produce, &flow_workers[i]);
        start_thread(&history_producers[i], history_produce, &history_workers[i]);
    }

    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(flow_producers[i], NULL);
        pthread_join(history_producers[i], NULL);
    }
    for (int i = 0; i < OBSERVERS; i++) pthread_join(flow_observers[i], NULL);
    for (int i = 0; i < READERS; i++) pthread_join(history_readers[i], NULL);
    atomic_store(&flow.done, true);
    atomic_store(&history.done, true);
    pthread_join(flow_keeper, NULL);
    pthread_join(flow_axer, NULL);
    pthread_join(flow_chaser, NULL);
    pthread_join(history_axer, NULL);
    pthread_join(history_chaser, NULL);

    flow_verify(&flow);
    history_verify(&history);
    check_names();
    check_timeouts(space);
    check_wake_ups(space);
    check_long_wait_count();

    printf("stress_pastset: %d producers x %" PRId64 " tuples per scene; flow: %" PRId64
           " timed-out calls retried, %" PRId64 " chaser reads; history: %" PRId64 " chaser reads, %" PRId64
           " axed hits; %.2f s\n",
           PRODUCERS, per_producer, atomic_load(&flow.timed_out), atomic_load(&flow.chased), history.chaser_reads,
           history.chaser_axed_hits, (double)(ps_now_ns() - started) / 1e9);
    ps_space_free(space);
    free(flow.seen);
    for (int r = 0; r < READERS; r++) free(history.copies[r]);
    int failed = atomic_load(&failures);
    if (failed) fprintf(stderr, "stress_pastset: %d failure(s)\n", failed);
    return failed ? 1 : 0;
}
