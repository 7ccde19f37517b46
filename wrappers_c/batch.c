/* batch.c — the `batch` stage: each caller's moves go down in bulk, as one move_many (ARMI's
 * aggregation of remote calls, Aurora's writes buffered until a scope ends).
 *
 * A pass-through stage. Each caller has `buffers` buffers of `capacity` tuples (max_moves, or as
 * many as fit in max_bytes, at least one). A move is copied into the caller's filling buffer,
 * which goes down as one move_many (a lone move when it holds one tuple) when it is full, when
 * flush_us has passed since its oldest move, before any other operation of the same caller (so a
 * caller never waits on its own unsent move and always observes its own moves), and when the
 * caller goes. A caller's moves go down in the order it made them, each once.
 *
 * Who sends. With buffers = 1 a caller sends its full buffer itself, and so it does above a stage
 * whose moves return once on their way (moves_queued: a pipelined delay), where a send costs the
 * caller no wait and a sender thread would only add a hand-off. Else, with buffers >= 2, it hands
 * the full buffer to the stage's sender thread and fills the next one meanwhile; the sender sends
 * the buffers handed to it, each caller's in order. A caller that would wait for them (all its
 * buffers on their way, or another operation to make) sends its oldest itself when the sender is
 * not sending one of its buffers (busy with another caller's, say): one thread at a time sends a
 * caller's buffers (`sending`), so they go in order, and one caller's slow send holds up no other
 * caller's. With flush_us > 0 the sender also sends a buffer whose oldest move has
 * waited flush_us; it takes the buffer only while its caller is in no operation (`owner`). An
 * operation other than a move first waits for what its caller handed over, then sends the rest
 * itself, and only then goes down; one that times out first hands the rest over (buffers >= 2).
 *
 * Failures. A send that times out keeps what did not go (at the front of the buffer, for the next
 * try; the sender tries again). Any other failure drops what did not go, and so the moves the
 * caller made after them until it hears of the failure (buffers handed over, the one filling), so
 * that what took effect of a caller's moves is always a prefix of them: the caller's next
 * operation (or the one that sent it) returns its status, with how many of the buffer's moves
 * took effect, and how many after them were dropped, said in the stage's error.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deferred_failure.h"
#include "forks.h"
#include "stage_base.h"
#include "stage_kinds.h"
#include "waitpoint.h"

enum { MAX_BUFFERS = 8, CACHE_LINE = 64, WORK_WORDS = PS_PASS_THROUGH_CALLERS / 64 };
enum { OWNER_FREE = 0, OWNER_CALLER, OWNER_SENDER };
static const int64_t SEND_SLICE_NS = 100000000LL;      /* the sender looks at `leaving` this often */
static const int64_t RELEASE_WAIT_NS = 1000000000LL;   /* a caller that goes sends what it holds within this */

/* One caller's buffers. Its thread owns everything but the fields the sender shares: `handed`,
 * `resume_at` (caller to sender), `sent`, `applied`, `halted` and the failure record (whoever
 * holds `sending` to the caller), and, with flush_us, the filling buffer while the sender holds
 * `owner`. */
typedef struct caller {
    _Alignas(CACHE_LINE) unsigned char *tuples; /* buffers * capacity tuples; NULL: no caller here */
    unsigned char *filling;      /* the filling buffer: buffer_of(handed) */
    uint32_t count;              /* tuples in the filling buffer, which is buffer handed % buffers */
    uint32_t counts[MAX_BUFFERS];/* tuples in each handed buffer */
    uint32_t resume;             /* the sending thread's: tuples of the oldest handed buffer sent before
                                    the rest was put aside (send_oldest) */
    _Atomic int sending;         /* a thread (the sender, or the caller) sends the handed buffers */
    _Atomic uint32_t handed;     /* buffers handed to the sender so far */
    _Atomic int owner;           /* flush_us only: OWNER_CALLER during an operation, OWNER_SENDER while
                                    the sender takes the filling buffer */
    _Atomic int missed;          /* flush_us only: the sender's timer found the caller in an operation
                                    (the caller wakes it when done) */
    _Atomic int64_t due_ns;      /* flush_us only: when the filling buffer's oldest move has waited
                                    flush_us, INT64_MAX while it is empty (the timer reads it without
                                    `owner` too, of a caller in an operation) */
    uint64_t made;               /* moves taken into the buffers so far */
    _Atomic uint64_t applied;    /* moves that took effect below so far (a prefix of those made) */
    uint64_t said_lost;          /* of the others, those a failure the caller heard of said (all_said) */
    _Atomic uint64_t dropped_below; /* moves of earlier sends a failed send's stage below dropped (a
                                    pipelined remote's), not said in the stage's error yet */
    _Atomic int halted;          /* a send of the sender's failed: it drops the buffers handed before the
                                    caller heard of it (before resume_at, once resume_known) */
    _Atomic int resume_known;
    _Atomic uint32_t resume_at;
    _Atomic int live;            /* a caller is attached (the sender's timer looks only at those) */
    unsigned forks;              /* ps_forks() when it attached: another count, and it is a parent's */
    _Atomic int leaving;         /* the caller goes: the sender gives up a send it cannot finish */
    _Alignas(CACHE_LINE) _Atomic uint32_t sent; /* handed buffers the sender is done with */
    ps_waitpoint sent_wp;        /* the caller waits here for `sent` */
    ps_deferred_failure failure; /* the sender's failures not reported yet */
} caller;

typedef struct batch_stage {
    ps_stage base;
    uint32_t capacity, buffers;
    int64_t flush_ns;            /* 0: no timer */
    caller *callers;             /* one per slot */
    int has_sender;
    pthread_t sender;
    _Atomic int stopping;
    _Atomic int going;           /* callers leaving: a send the sender cannot finish waits for their sends */
    _Alignas(CACHE_LINE) _Atomic uint64_t work[WORK_WORDS]; /* callers with buffers handed, a bit each */
    ps_waitpoint work_wp;        /* the sender waits here */
    _Atomic int64_t timer_due;   /* when the sender looks at the buffers' ages next (INT64_MAX: never) */
    _Alignas(CACHE_LINE) _Atomic int64_t sends, moves_sent, timed_sends, handoffs, dropped;
} batch_stage;

static batch_stage *batch_of(ps_link *link) { return (batch_stage *)link->stage; }
static unsigned char *buffer_of(const batch_stage *b, const caller *c, uint32_t sequence) {
    return c->tuples + (size_t)(sequence % b->buffers) * b->capacity * b->base.tuple_size;
}

/* ---- the stage's error: what a failed send did ----------------------------------------------- */

static void explain(batch_stage *b, int status, uint32_t done, uint32_t of, uint32_t unsure, uint64_t before,
                    uint64_t after) {
    char dropped[192] = "";
    int n = 0;
    if (before) /* with the answers lost (a broken connection), what became of them is not known */
        n = snprintf(dropped, sizeof dropped, ", and the %llu moves sent down before them %s",
                     (unsigned long long)before,
                     ps_op_done_is_at_least(status) ? "may not have taken effect" : "did not take effect");
    if (after)
        snprintf(dropped + n, sizeof dropped - (size_t)n, ", and the %llu moves made after them were dropped",
                 (unsigned long long)after);
    ps_stage_explain_moves(&b->base, status, done, of, unsure, "sent down together", "the send failed", dropped);
}

/* The caller's moves that did not take effect, made before it had made `made`, that no failure it
 * heard of said, when it had heard of `said`. */
static uint64_t unsaid_lost(caller *c, uint64_t made, uint64_t said) {
    uint64_t applied = atomic_load_explicit(&c->applied, memory_order_acquire);
    uint64_t lost = made > applied ? made - applied : 0;
    return lost > said ? lost - said : 0;
}

/* The caller heard of a failure, with none of its moves on their way: every one that did not take
 * effect has been said, and a later failure says only those after them. */
static void all_said(caller *c) {
    c->said_lost += unsaid_lost(c, c->made, c->said_lost);
}

/* An operation passed down failed: the stage below explains it, not an older send of ours. */
static void forget_explanation(batch_stage *b) {
    pthread_mutex_lock(&b->base.links_lock);
    b->base.error[0] = 0;
    pthread_mutex_unlock(&b->base.links_lock);
}

/* The filling buffer is empty: nothing of it is due. */
static void empty(caller *c) {
    c->count = 0;
    atomic_store_explicit(&c->due_ns, INT64_MAX, memory_order_relaxed);
}

static int wait_sent(batch_stage *b, caller *c, uint32_t slot, uint32_t on_way, int64_t deadline);

/* A failure of the sender's that the caller has not heard of: its status (explained), or PS_OK.
 * The moves the caller made after the failed ones go too: the buffers handed over since (dropped
 * before it returns, so that the counters say so), the one filling. */
static int take_failure(batch_stage *b, caller *c, uint32_t slot) {
    uint32_t done, of, unsure;
    if (!ps_deferred_failure_pending(&c->failure)) return PS_OK; /* every move asks */
    int status = ps_deferred_failure_take(&c->failure, &done, &of, &unsure);
    if (status == PS_OK) return PS_OK;
    atomic_store_explicit(&c->resume_at, atomic_load_explicit(&c->handed, memory_order_relaxed), memory_order_relaxed);
    atomic_store_explicit(&c->resume_known, 1, memory_order_release);
    wait_sent(b, c, slot, 0, ps_deadline(RELEASE_WAIT_NS)); /* none goes down: all are dropped */
    atomic_fetch_add_explicit(&b->dropped, c->count, memory_order_relaxed);
    empty(c);
    uint64_t lost = unsaid_lost(c, c->made, c->said_lost);
    uint64_t before = atomic_exchange(&c->dropped_below, 0), failed = of - done + before;
    explain(b, status, done, of, unsure, before, lost > failed ? lost - failed : 0);
    all_said(c);
    return status;
}

/* ---- sending a buffer down ------------------------------------------------------------------ */

/* A failed operation says that `earlier` of the caller's moves counted as applied were dropped below
 * (a pipelined remote sends them later, and they did not take effect). */
static void count_off(batch_stage *b, caller *c, int64_t earlier) {
    if (earlier <= 0) return;
    atomic_fetch_sub_explicit(&c->applied, (uint64_t)earlier, memory_order_release);
    atomic_fetch_sub_explicit(&b->moves_sent, earlier, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->dropped, earlier, memory_order_relaxed);
}

/* Sends n of the caller's tuples down its link as one operation (a lone move for one tuple);
 * returns its status, with the tuples that took effect in *took, and of the others those that may
 * have too in *unsure (ps_op_unsure). */
static int send_down(batch_stage *b, caller *c, ps_link *down, const unsigned char *tuples, uint32_t n,
                     int64_t timeout_ns, uint32_t *took, uint32_t *unsure) {
    ps_op op = {.kind = n == 1 ? PS_OP_MOVE : PS_OP_MOVE_MANY, .in = tuples, .count = n, .timeout_ns = timeout_ns};
    int rc = ps_link_call(down, &op);
    *took = op.done;
    *unsure = ps_op_unsure(&op, rc);
    atomic_fetch_add_explicit(&c->applied, op.done, memory_order_release);
    atomic_fetch_add_explicit(&b->moves_sent, op.done, memory_order_relaxed);
    if (rc == PS_OK) atomic_fetch_add_explicit(&b->sends, 1, memory_order_relaxed);
    if (rc != PS_OK && rc != PS_ETIMEDOUT && op.dropped > 0) {
        count_off(b, c, op.dropped);
        atomic_fetch_add_explicit(&c->dropped_below, (uint64_t)op.dropped, memory_order_relaxed);
    }
    return rc;
}

/* The caller sends its filling buffer itself, by the deadline. A timeout keeps what did not go at
 * the front of the buffer; another failure drops it and is returned, explained. */
static int send_filling(batch_stage *b, caller *c, ps_link *down, int64_t deadline) {
    if (c->count == 0) return PS_OK;
    unsigned char *tuples = c->filling;
    uint32_t took, unsure;
    int rc = send_down(b, c, down, tuples, c->count, ps_remaining(deadline), &took, &unsure);
    if (rc == PS_ETIMEDOUT) {
        size_t size = b->base.tuple_size;
        memmove(tuples, tuples + (size_t)took * size, (size_t)(c->count - took) * size);
        c->count -= took;
        return rc;
    }
    if (rc != PS_OK) {
        atomic_fetch_add_explicit(&b->dropped, c->count - took, memory_order_relaxed);
        explain(b, rc, took, c->count, unsure, atomic_exchange(&c->dropped_below, 0), 0);
    }
    empty(c);
    if (rc != PS_OK) all_said(c);
    return rc;
}

/* The caller in `slot` has buffers for the sender to send. */
static void mark_work(batch_stage *b, uint32_t slot) {
    atomic_fetch_or(&b->work[slot / 64], (uint64_t)1 << (slot % 64));
    ps_waitpoint_wake(&b->work_wp);
}

/* Hands the filling buffer to the sender: the caller fills the next one. */
static void hand_off(batch_stage *b, caller *c, uint32_t slot) {
    uint32_t handed = atomic_load_explicit(&c->handed, memory_order_relaxed);
    c->counts[handed % b->buffers] = c->count;
    empty(c);
    c->filling = buffer_of(b, c, handed + 1);
    atomic_store_explicit(&c->handed, handed + 1, memory_order_release);
    atomic_fetch_add_explicit(&b->handoffs, 1, memory_order_relaxed);
    mark_work(b, slot);
}

/* ---- sending the buffers handed over --------------------------------------------------------- */

/* Records a failed send for its caller's next operation; until the caller hears of it, the buffers
 * it hands over are dropped (halted). */
static void record_failure(batch_stage *b, caller *c, int status, uint32_t done, uint32_t of, uint32_t unsure) {
    atomic_fetch_add_explicit(&b->dropped, of - done, memory_order_relaxed);
    atomic_store_explicit(&c->resume_known, 0, memory_order_relaxed);
    atomic_store_explicit(&c->halted, 1, memory_order_relaxed);
    ps_deferred_failure_record(&c->failure, status, done, of, unsure, 1); /* publishes both */
}

/* Whether the caller's handed buffer `sequence` is dropped: handed after a failed send and before
 * the caller heard of it (take_failure says from where on it sends again). */
static int dropped_unsent(caller *c, uint32_t sequence) {
    if (!atomic_load_explicit(&c->halted, memory_order_relaxed)) return 0;
    if (!atomic_load_explicit(&c->resume_known, memory_order_acquire) ||
        (int32_t)(sequence - atomic_load_explicit(&c->resume_at, memory_order_relaxed)) < 0)
        return 1;
    atomic_store_explicit(&c->halted, 0, memory_order_relaxed);
    return 0;
}

/* One thread at a time sends a caller's handed buffers: the one that claimed it. */
static int claim_sending(caller *c) {
    int idle = 0;
    return atomic_compare_exchange_strong(&c->sending, &idle, 1);
}

/* The claimer stops: a buffer handed over meanwhile, or put aside, goes to the sender, and a
 * caller waiting for it may send it itself. */
static void unclaim_sending(batch_stage *b, caller *c, uint32_t slot) {
    atomic_store(&c->sending, 0);
    if (atomic_load(&c->sent) != atomic_load(&c->handed)) {
        mark_work(b, slot);
        ps_waitpoint_wake(&c->sent_wp);
    }
}

/* The claimer sends the caller's oldest handed buffer, from where a send put aside left it: the
 * sender (by_caller 0) in slices until it went, failed, or its caller left; while another caller
 * leaves, one that takes more than a slice is put aside, so that the leaving caller's sends are
 * not held up behind it. The caller itself, by its deadline. PS_OK when done with the buffer (sent,
 * or failed: recorded, the rest dropped), PS_ETIMEDOUT when put aside. */
static int send_oldest(batch_stage *b, caller *c, uint32_t slot, int64_t by_caller) {
    uint32_t sent = atomic_load_explicit(&c->sent, memory_order_relaxed);
    uint32_t n = c->counts[sent % b->buffers], done = c->resume, took, unsure;
    if (dropped_unsent(c, sent)) {
        atomic_fetch_add_explicit(&b->dropped, n - done, memory_order_relaxed);
    } else {
        const unsigned char *tuples = buffer_of(b, c, sent);
        int rc;
        do {
            rc = send_down(b, c, &b->base.caller_links[slot], tuples + (size_t)done * b->base.tuple_size, n - done,
                           by_caller ? ps_remaining(by_caller) : SEND_SLICE_NS, &took, &unsure);
            done += took;
        } while (rc == PS_ETIMEDOUT && !by_caller && !atomic_load(&c->leaving) && !atomic_load(&b->stopping) &&
                 !atomic_load(&b->going));
        if (rc == PS_ETIMEDOUT && !atomic_load(&c->leaving) && !atomic_load(&b->stopping)) {
            c->resume = done;
            return PS_ETIMEDOUT;
        }
        if (rc != PS_OK) record_failure(b, c, rc, done, n, unsure);
    }
    c->resume = 0;
    atomic_store_explicit(&c->sent, sent + 1, memory_order_release);
    ps_waitpoint_wake(&c->sent_wp);
    return PS_OK;
}

/* Waits until at most `on_way` of the caller's handed buffers are still on their way, sending its
 * oldest itself, by the deadline, whenever no other thread is sending them (not once it leaves). */
static int wait_sent(batch_stage *b, caller *c, uint32_t slot, uint32_t on_way, int64_t deadline) {
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&c->sent_wp);
        uint32_t handed = atomic_load_explicit(&c->handed, memory_order_relaxed);
        if (handed - atomic_load_explicit(&c->sent, memory_order_acquire) <= on_way) return PS_OK;
        if (!atomic_load(&c->leaving) && claim_sending(c)) {
            int rc = handed - atomic_load_explicit(&c->sent, memory_order_relaxed) <= on_way
                         ? PS_OK : send_oldest(b, c, slot, deadline);
            unclaim_sending(b, c, slot);
            if (rc != PS_OK) return rc;
            continue;
        }
        if (ps_waitpoint_wait(&c->sent_wp, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
}

/* Everything the caller holds goes down by the deadline: what it handed over, then the rest. At
 * the deadline, what is left of the rest goes to the sender (buffers >= 2): an operation that
 * timed out (a fence, say) has put the moves before it on their way all the same. */
static int send_all(batch_stage *b, caller *c, ps_link *link, int64_t deadline) {
    int rc = wait_sent(b, c, link->slot, 0, deadline);
    if (rc == PS_OK) rc = take_failure(b, c, link->slot);
    if (rc == PS_OK) rc = send_filling(b, c, ps_stage_down(link), deadline);
    if (rc == PS_ETIMEDOUT && b->buffers > 1 && c->count) hand_off(b, c, link->slot);
    return rc;
}

/* ---- the caller's operations ---------------------------------------------------------------- */

/* With flush_us, an operation holds its caller's buffer against the sender's timer; the sender
 * holds it only for a moment. */
static void take_owner(caller *c) {
    for (;;) {
        int expected = OWNER_FREE;
        if (atomic_compare_exchange_weak_explicit(&c->owner, &expected, OWNER_CALLER, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        sched_yield();
    }
}

/* The operation is over. If the sender's timer found it going on meanwhile (send_aged), the sender
 * looks again now at a buffer whose oldest move is due (else at its next look, one flush_us on):
 * it does not poll a caller in an operation. */
static void give_owner(batch_stage *b, caller *c) {
    atomic_store(&c->owner, OWNER_FREE); /* seq_cst: against the sender's `missed`, then its look */
    if (!atomic_load(&c->missed)) return;
    int64_t due = atomic_load_explicit(&c->due_ns, memory_order_relaxed); /* the buffer may be the sender's now */
    if (due == INT64_MAX || due <= ps_now_ns()) {
        atomic_store_explicit(&c->missed, 0, memory_order_relaxed);
        if (due != INT64_MAX) ps_waitpoint_wake(&b->work_wp);
    }
}

/* A buffer's first tuple came: with flush_us, the sender must look at it once it is due. */
static void note_first(batch_stage *b, caller *c) {
    int64_t due = ps_now_ns() + b->flush_ns;
    atomic_store_explicit(&c->due_ns, due, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* against the sender's look at this buffer (sender_loop) */
    if (atomic_load(&b->timer_due) > due) ps_waitpoint_wake(&b->work_wp);
}

/* A full buffer goes down: to the sender (buffers >= 2), else sent now by the caller. A timeout of
 * the caller's own send keeps it full. */
static int send_full(batch_stage *b, caller *c, ps_link *link, int64_t deadline) {
    if (b->buffers > 1) {
        hand_off(b, c, link->slot);
        return PS_OK;
    }
    return send_filling(b, c, ps_stage_down(link), deadline);
}

/* The operation's deadline, read from the clock when first needed (0: not yet): a move that only
 * goes into a buffer reads no clock. */
static int64_t deadline_of(int64_t *deadline, const ps_op *op) {
    if (*deadline == 0) *deadline = ps_deadline(op->timeout_ns);
    return *deadline;
}

/* Returns rc; after a failure (not a timeout), op->done counts only those of the moves op took
 * since it came (when the caller had made `made`, had heard of `said` lost, and op had done `done`)
 * that took effect, and op->dropped how many of the caller's earlier moves were dropped that no
 * failure said before (those an earlier call of a move_many waiting in slices took too: its
 * caller counts them off). */
static int settle(caller *c, ps_op *op, uint64_t made, uint64_t said, uint32_t done, int rc) {
    if (rc == PS_OK || rc == PS_ETIMEDOUT) return rc;
    uint64_t applied = atomic_load_explicit(&c->applied, memory_order_acquire);
    uint64_t took = applied > made ? applied - made : 0;
    if (took < op->done - done) op->done = done + (uint32_t)took;
    op->dropped = (int64_t)unsaid_lost(c, made, said);
    return rc;
}

/* Moves (one, or a move_many's): copied into the caller's buffers, which go down as they fill. A
 * timeout with the buffers full and still on their way returns with op->done of them taken; a
 * failure, with op->done of them that took effect. */
static int buffer_moves(batch_stage *b, caller *c, ps_link *link, ps_op *op) {
    int64_t deadline = 0;
    uint32_t n = ps_op_tuples_in(op), done = op->done;
    uint64_t made = c->made, said = c->said_lost;
    int rc = take_failure(b, c, link->slot);
    if (rc != PS_OK) return settle(c, op, made, said, done, rc);
    size_t size = b->base.tuple_size;
    const unsigned char *in = op->in;
    while (op->done < n) {
        if (c->count == b->capacity && (rc = send_full(b, c, link, deadline_of(&deadline, op))) != PS_OK)
            return settle(c, op, made, said, done, rc);
        if (c->count == 0) { /* the buffer to fill next may still be on its way */
            if ((rc = wait_sent(b, c, link->slot, b->buffers - 1, deadline_of(&deadline, op))) != PS_OK) return rc;
            if ((rc = take_failure(b, c, link->slot)) != PS_OK) return settle(c, op, made, said, done, rc);
        }
        uint32_t k = n - op->done < b->capacity - c->count ? n - op->done : b->capacity - c->count;
        memcpy(c->filling + (size_t)c->count * size, in + (size_t)op->done * size, (size_t)k * size);
        if (c->count == 0 && b->flush_ns) note_first(b, c);
        c->count += k;
        c->made += k;
        op->done += k;
    }
    /* Full: it goes now. The moves are taken either way: a timeout leaves them for the next try. */
    rc = c->count == b->capacity ? send_full(b, c, link, deadline_of(&deadline, op)) : PS_OK;
    return rc == PS_ETIMEDOUT ? PS_OK : settle(c, op, made, said, done, rc);
}

/* Any other operation: what the caller holds goes down first, then the operation. */
static int send_then_pass(batch_stage *b, caller *c, ps_link *link, ps_op *op) {
    int waits = ps_op_kinds[op->kind].shape & PS_OP_WAITS;
    int64_t deadline = ps_held_moves_due(op);
    int rc = send_all(b, c, link, deadline);
    if (rc != PS_OK) return rc;
    int64_t timeout_ns = op->timeout_ns;
    if (waits) op->timeout_ns = ps_remaining(deadline);
    rc = ps_stage_pass(link, op);
    op->timeout_ns = timeout_ns;
    if (rc != PS_OK && rc != PS_ETIMEDOUT) {
        count_off(b, c, op->dropped); /* the stage below says which of them (pipelined remote's) */
        forget_explanation(b);
        all_said(c);
    }
    return rc;
}

/* Moves that fit in the filling buffer and neither begin it (its buffer may still be on its way)
 * nor fill it (it goes down then), with no failure to hear of and no timer that shares the buffer:
 * only copied, the way most moves go. Returns whether it took them. */
static int buffered_at_once(batch_stage *b, caller *c, ps_op *op, uint32_t n) {
    if (b->flush_ns || c->count == 0 || n >= b->capacity - c->count || ps_deferred_failure_pending(&c->failure))
        return 0; /* the timer's first: with it, the buffer is the caller's only within take_owner */
    size_t size = b->base.tuple_size;
    unsigned char *to = c->filling + (size_t)c->count * size;
    if (size == sizeof(int64_t) && n == 1) memcpy(to, op->in, sizeof(int64_t)); /* one word: no call */
    else memcpy(to, op->in, (size_t)n * size);
    c->count += n;
    c->made += n;
    op->done = n;
    return 1;
}

static int batch_call(ps_link *link, ps_op *op) {
    batch_stage *b = batch_of(link);
    caller *c = &b->callers[link->slot];
    if (c->forks != ps_forks())
        return ps_stage_refuse_inherited(&b->base, b->has_sender ? "buffers and sender thread" : "buffers");
    uint32_t shape = ps_op_kinds[op->kind].shape;
    int moves_only = shape & (PS_OP_TUPLE_IN | PS_OP_TUPLES_IN) && !(shape & (PS_OP_TUPLE_OUT | PS_OP_TUPLES_OUT));
    if (moves_only && op->done == 0 && buffered_at_once(b, c, op, ps_op_tuples_in(op))) return PS_OK;
    if (b->flush_ns) take_owner(c);
    int rc = moves_only ? buffer_moves(b, c, link, op) : send_then_pass(b, c, link, op);
    if (b->flush_ns) give_owner(b, c);
    return rc;
}

/* ---- the sender thread ---------------------------------------------------------------------- */

/* Sends every buffer the caller in `slot` handed over, in order, unless the caller is sending them
 * itself. */
static void send_handed(batch_stage *b, uint32_t slot) {
    caller *c = &b->callers[slot];
    if (!claim_sending(c)) return; /* the caller gives them back when it stops (unclaim_sending) */
    int rc = PS_OK;
    while (rc == PS_OK && atomic_load_explicit(&c->sent, memory_order_relaxed) !=
                              atomic_load_explicit(&c->handed, memory_order_acquire))
        rc = send_oldest(b, c, slot, 0);
    unclaim_sending(b, c, slot);
}

/* Sends the buffers handed over since the last look; returns whether there were any. */
static int send_work(batch_stage *b) {
    int found = 0;
    for (uint32_t w = 0; w < WORK_WORDS; w++) {
        uint64_t bits = atomic_load_explicit(&b->work[w], memory_order_relaxed) ? atomic_exchange(&b->work[w], 0) : 0;
        for (; bits; bits &= bits - 1, found = 1) send_handed(b, w * 64 + (uint32_t)__builtin_ctzll(bits));
    }
    return found;
}

/* flush_us: sends the buffers whose oldest move has waited that long (taking each from a caller in
 * no operation); returns when to look next (INT64_MAX: no buffer holds a move). */
static int64_t send_aged(batch_stage *b) {
    int64_t now = ps_now_ns(), next = INT64_MAX;
    uint32_t slots = atomic_load(&b->base.links);
    for (uint32_t slot = 0; slot < slots && slot < PS_PASS_THROUGH_CALLERS; slot++) {
        caller *c = &b->callers[slot];
        if (!atomic_load_explicit(&c->live, memory_order_acquire)) continue;
        int expected = OWNER_FREE;
        atomic_store(&c->missed, 1); /* before the look: a caller in an operation wakes this thread after it */
        if (!atomic_compare_exchange_strong(&c->owner, &expected, OWNER_SENDER)) {
            int64_t due = atomic_load_explicit(&c->due_ns, memory_order_relaxed), again = due > now ? due : now + b->flush_ns;
            if (due != INT64_MAX && again < next) next = again; /* a buffer with moves: look again then anyway */
            continue;
        }
        atomic_store_explicit(&c->missed, 0, memory_order_relaxed);
        if (!atomic_load_explicit(&c->live, memory_order_acquire)) { /* it left meanwhile: its slot may be */
            atomic_store_explicit(&c->owner, OWNER_FREE, memory_order_release); /* a new caller's, being set up */
            continue;
        }
        int64_t due = atomic_load_explicit(&c->due_ns, memory_order_relaxed); /* INT64_MAX: empty */
        if (due <= now) hand_off(b, c, slot);
        else if (due < next) next = due;
        atomic_store_explicit(&c->owner, OWNER_FREE, memory_order_release);
        if (due <= now) {
            atomic_fetch_add_explicit(&b->timed_sends, 1, memory_order_relaxed);
            send_handed(b, slot);
        }
    }
    return next;
}

static void *sender_loop(void *arg) {
    batch_stage *b = arg;
    while (!atomic_load(&b->stopping)) {
        uint32_t seen = ps_waitpoint_sequence(&b->work_wp);
        /* Published before the look: a caller whose first move the look misses sees a time past its
         * own due and wakes this thread (note_first). */
        if (b->flush_ns) atomic_store(&b->timer_due, INT64_MAX);
        int found = send_work(b);
        int64_t due = b->flush_ns ? send_aged(b) : INT64_MAX;
        if (b->flush_ns) atomic_store(&b->timer_due, due);
        if (found) continue;
        uint32_t spins = 0;
        while (ps_waitpoint_sequence(&b->work_wp) == seen && !atomic_load(&b->stopping) &&
               ps_waitpoint_wait(&b->work_wp, seen, due == INT64_MAX ? PS_FOREVER : due, &spins) != PS_ETIMEDOUT) {
        }
    }
    return NULL;
}

/* ---- callers coming and going --------------------------------------------------------------- */

static int batch_attach(ps_stage *stage, uint32_t slot) {
    batch_stage *b = (batch_stage *)stage;
    caller *c = &b->callers[slot];
    c->tuples = malloc((size_t)b->buffers * b->capacity * b->base.tuple_size);
    if (!c->tuples) return PS_ENOMEM;
    c->filling = buffer_of(b, c, atomic_load_explicit(&c->handed, memory_order_relaxed));
    empty(c);
    c->made = c->said_lost = 0;
    atomic_store(&c->applied, 0);
    atomic_store(&c->dropped_below, 0);
    atomic_store(&c->halted, 0);
    atomic_store(&c->leaving, 0);
    c->forks = ps_forks();
    atomic_store_explicit(&c->live, 1, memory_order_release);
    return PS_OK;
}

/* The caller goes: what it holds goes down first, within RELEASE_WAIT_NS; what cannot (a bound
 * that stays full, a failure nobody will hear of now) is said on stderr, never dropped silently.
 * A forked child's copy of its parent's caller only goes: what it holds is the parent's. */
static void batch_detach(ps_stage *stage, uint32_t slot) {
    batch_stage *b = (batch_stage *)stage;
    caller *c = &b->callers[slot];
    if (!c->tuples) return; /* its attach failed before it got buffers */
    if (c->forks != ps_forks()) {
        free(c->tuples);
        c->tuples = NULL;
        return;
    }
    if (b->flush_ns) take_owner(c);
    atomic_store(&c->live, 0);
    int64_t deadline = ps_deadline(RELEASE_WAIT_NS);
    if (wait_sent(b, c, slot, 0, deadline) != PS_OK) {
        atomic_store(&c->leaving, 1); /* the sender gives up within a slice */
        atomic_fetch_add(&b->going, 1); /* ... and puts aside another caller's send that holds it */
        wait_sent(b, c, slot, 0, PS_FOREVER);
        atomic_fetch_sub(&b->going, 1);
    }
    if (take_failure(b, c, slot) != PS_OK) ps_stage_print_error(&b->base, "a caller left stage 'batch' unaware");
    uint32_t held = c->count;
    int rc = send_filling(b, c, &b->base.caller_links[slot], deadline);
    if (rc == PS_ETIMEDOUT) {
        atomic_fetch_add_explicit(&b->dropped, c->count, memory_order_relaxed);
        fprintf(stderr, "paths: stage 'batch': %u of the %u moves a caller held when it left did not go down within "
                "%lld ms: lost\n", c->count, held, (long long)(RELEASE_WAIT_NS / 1000000));
    } else if (rc != PS_OK) {
        ps_stage_print_error(&b->base, "a caller left stage 'batch'");
    }
    free(c->tuples);
    c->tuples = NULL;
    c->count = 0;
    if (b->flush_ns) give_owner(b, c);
}

/* ---- the kind ------------------------------------------------------------------------------- */

static int batch_counters(ps_stage *stage, ps_counter *out, int max) {
    batch_stage *b = (batch_stage *)stage;
    const ps_counter mine[] = {
        {"sends", atomic_load(&b->sends)},        {"moves_sent", atomic_load(&b->moves_sent)},
        {"handoffs", atomic_load(&b->handoffs)},  {"timed_sends", atomic_load(&b->timed_sends)},
        {"dropped", atomic_load(&b->dropped)},    {"capacity", (int64_t)b->capacity},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof mine / sizeof mine[0] && n < max; i++) out[n++] = mine[i];
    return n;
}

static void batch_destroy(ps_stage *stage) {
    batch_stage *b = (batch_stage *)stage;
    if (b->has_sender) {
        atomic_store(&b->stopping, 1);
        ps_waitpoint_wake(&b->work_wp);
        pthread_join(b->sender, NULL);
    }
    for (uint32_t i = 0; b->callers && i < PS_PASS_THROUGH_CALLERS; i++) {
        free(b->callers[i].tuples);
        ps_deferred_failure_destroy(&b->callers[i].failure);
    }
    free(b->callers);
}

/* The tuples one buffer holds: max_moves, or as many as fit in max_bytes, at least one. */
static uint32_t capacity_of(const ps_params *params, size_t tuple_size) {
    int64_t moves = ps_params_int(params, "max_moves");
    int64_t fit = tuple_size ? ps_params_int(params, "max_bytes") / (int64_t)tuple_size : moves;
    int64_t capacity = moves < fit ? moves : fit;
    return capacity > 0 ? (uint32_t)capacity : 1;
}

static size_t batch_footprint(const ps_params *params, size_t tuple_size) {
    size_t per_caller = (size_t)ps_params_int(params, "buffers") * capacity_of(params, tuple_size) * tuple_size;
    return sizeof(batch_stage) + PS_PASS_THROUGH_CALLERS * (sizeof(caller) + per_caller);
}

static int batch_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                        ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (!below) {
        snprintf(error, error_size, "stage 'batch': needs a stage below it (a path ends with 'core')");
        return PS_EINVAL;
    }
    batch_stage *b = aligned_alloc(CACHE_LINE, (sizeof *b + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (!b) return PS_ENOMEM;
    memset(b, 0, sizeof *b);
    b->capacity = capacity_of(params, ps_stage_format(below)->size);
    b->buffers = below->moves_queued ? 1 : (uint32_t)ps_params_int(params, "buffers"); /* the caller sends */
    b->flush_ns = ps_params_int(params, "flush_us") * 1000;
    ps_waitpoint_init(&b->work_wp);
    atomic_init(&b->timer_due, INT64_MAX);
    int rc = ps_stage_init(&b->base, &ps_kind_batch, ps_stage_format(below), 0, below);
    if (rc == PS_OK) {
        b->callers = aligned_alloc(CACHE_LINE, PS_PASS_THROUGH_CALLERS * sizeof *b->callers);
        if (!b->callers) rc = PS_ENOMEM;
    }
    if (rc == PS_OK) {
        memset(b->callers, 0, PS_PASS_THROUGH_CALLERS * sizeof *b->callers);
        for (uint32_t i = 0; i < PS_PASS_THROUGH_CALLERS; i++) {
            ps_waitpoint_init(&b->callers[i].sent_wp);
            ps_deferred_failure_init(&b->callers[i].failure);
        }
    }
    if (rc == PS_OK && (b->buffers > 1 || b->flush_ns)) {
        if (pthread_create(&b->sender, NULL, sender_loop, b) != 0) rc = PS_ENOMEM;
        else b->has_sender = 1;
    }
    if (rc != PS_OK) {
        batch_destroy(&b->base);
        ps_stage_abandon(&b->base);
        return rc;
    }
    *out = &b->base;
    return PS_OK;
}

static const ps_param_spec BATCH_PARAMS[] = {
    {"max_moves", PS_PARAM_INT, 0, "256", 1, 1 << 20, NULL, "a caller's buffer goes down when it holds this many moves",
     PS_PARAM_GIVEN},
    {"max_bytes", PS_PARAM_INT, 0, "8192", 1, 1 << 26, NULL,
     "... or this many bytes of tuples (a buffer holds at least one tuple)", PS_PARAM_GIVEN},
    {"flush_us", PS_PARAM_INT, 0, "0", 0, 60000000, NULL,
     "... or when its oldest move has waited this many microseconds (0: no timer)", PS_PARAM_GIVEN},
    {"buffers", PS_PARAM_INT, 0, "2", 1, MAX_BUFFERS, NULL,
     "buffers per caller: with 2 or more, a sender thread sends a full one while the caller fills the next "
     "(above a pipelined delay, whose moves return at once, the caller sends its one buffer itself)",
     PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_batch = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "batch",
    .doc = "Sends each caller's moves down in bulk, one move_many per buffer: when max_moves or max_bytes are "
           "buffered, flush_us after the oldest, before any other operation of the caller, and when it goes.",
    .params = BATCH_PARAMS,
    .param_count = sizeof BATCH_PARAMS / sizeof BATCH_PARAMS[0],
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .create = batch_create,
    .call = batch_call,
    .footprint = batch_footprint,
    .counters = batch_counters,
    .destroy = batch_destroy,
    .attach = batch_attach,
    .detach = batch_detach,
};
