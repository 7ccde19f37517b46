/* allreduce.c — the `allreduce` stage: a global sum whose members, one per node, send their
 * partial sums to each other directly, as MPI_Allreduce's ranks do. The caller's own thread
 * writes and reads its peers' connections: no server thread on the way, and no round trip to a
 * root the others wait on.
 *
 * The group is `nodes` (the members' servers, in rank order) and `rank` (this member); `group`
 * names it. Each round the caller moves its partial and observes the round's total: the field-
 * wise sum of every member's partial, the same bytes at every member. `algorithm` says how the
 * partials travel:
 *   doubling  recursive doubling: in step s a member swaps its running sum with member
 *             rank ^ 2^s and adds, log2(N) steps; with N not a power of two, each member past the
 *             largest power P first hands its partial to member rank - P and gets the total
 *             back from it at the end.
 *   tree      a tree of fan-in `fanin` (2: binomial): at level l, the members whose rank is a
 *             multiple of fanin^(l+1) add those of ranks + i * fanin^l; the total goes back down.
 * Rank 0 then moves the total one stage down and observes it back, as the root of a tree of
 * reduce-sums does: the element's one writer and reader. So allreduce is a path's last sum; a
 * stage below that answers another total fails the round (PS_ESTATE). A group of one (`nodes`
 * empty or one node) is no group: every operation goes straight down.
 *
 * Joining. A member listens on a socket of its own and lists itself, with a fresh secret, in the
 * process's peer directory, where its server answers a PEER request (wire.md). From its first
 * operation on, a member connects to its partners of lower rank, presenting the secret their
 * server told it, and admits those of higher rank, as a server admits a direct link's client; a
 * move only looks, an observe waits; a partner still missing timeout_ms after the first operation
 * breaks the group, naming it. So does a partner made for another group shape (the PEER answer
 * and CONNECT carry it: the members' count, the algorithm and fan-in, the tuples' layout), whose
 * rounds would not fit this member's: members given different nodes would sum in part, silently.
 * Members then exchange PART frames; a frame that is not the one expected (its round, sender and
 * step) breaks the group, as a closed connection does: every later operation fails with
 * PS_EREMOTE, naming the member. The member then tells its partners why (BREAK: the member that
 * broke the group, and how) and closes its connections; they break in turn and pass the news on,
 * so each names the member that broke the group and the partner it heard it from, never a
 * partner that only passed it on. A member that broke its group stays listed as broken, with
 * that news, for the partners that ask its server while they join, and for one that finds its
 * connection closed with no word of why. A wait for one partner looks at the other partners'
 * connections between slices: one closed with a BREAK, or with a part left in the round, breaks
 * the group there too.
 *
 * A round is the schedule of sends and receives computed for this member when it is made; the
 * caller works through it, and a receive that times out leaves it where it stopped, for the
 * caller's next call. Rounds go through it one after the other; as with a reduce-sum, the
 * caller may move up to ROUNDS_AHEAD rounds before observing the first (their partials wait their
 * turn), and a move further ahead is refused. Other operations (first, last, observe_at, ...) go
 * to the stage below.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "control_plane.h"
#include "direct_channel.h"
#include "peer_directory.h"
#include "stage_base.h"
#include "stage_kinds.h"

enum {
    ROUNDS_AHEAD = 4,     /* rounds a caller may move before observing the first, as at a reduce-sum */
    MAX_MEMBERS = 65536,
    PENDING_MAX = 8,      /* connections that may be presenting a secret at once */
    CONNECT_WAIT_MS = 1000, /* ... each within this long */
    JOIN_PAUSE_MS = 1,    /* a joining member looks again this soon */
    ASK_AGAIN_MS = 2,     /* a partner not listed yet is asked again this soon */
    ASK_WHY_MS = 200,     /* a partner gone with no word of why: its server is asked this long */
    TAG_DOWN = 64,        /* tags of a round's way down (its way up and steps: below it) */
};
static const int64_t MS = 1000000;
static const int64_t SEND_WAIT_NS = 1000000000LL;   /* a member that reads (nearly) nothing this long is gone */
static const int64_t RECEIVE_SLICE_NS = 100000000LL; /* a wait looks up (at its other partners) this often */

typedef enum step_kind { SEND, ADD, TAKE } step_kind; /* send the running sum; add a partner's; take its total */

typedef struct step {
    step_kind kind;
    uint32_t partner;       /* index in partners */
    uint32_t tag;           /* which exchange of the round: both ends name it alike */
} step;

typedef struct partner {
    uint32_t rank;
    ps_channel channel;     /* fd -1 until joined */
    ps_control_call lookup; /* a partner of lower rank: the PEER request under way */
    int64_t lookup_due;     /* when to ask again after "not listed yet" */
    int unlisted;           /* its server answered so: it is up */
    char *endpoint;         /* its answer: where it listens (NULL until answered) */
    unsigned char secret[PS_WIRE_SECRET]; /* and the secret to present there */
    uint64_t shape;         /* and its group's shape */
    ps_channel attempt;     /* the connection to it under way (fd -1: none) */
    int asked_again;        /* refused there once: its server was asked again (did it break the group?) */
} partner;

typedef struct allreduce_stage {
    ps_stage base;
    char group[PS_GROUP_MAX + 1];
    uint32_t rank, size;
    uint32_t fanin;         /* algorithm tree: its fan-in, at most size (a larger one builds the same
                               tree); doubling: 0 */
    uint64_t shape;         /* what its partners must agree on (group_shape) */
    int transport;
    int64_t timeout_ns;
    char (*servers)[PS_PEER_ENDPOINT_MAX];  /* each member's server (its main endpoint) */
    char (*server_keys)[41];                /* and its CURVE key, "" for none */
    char client_public[41], client_secret[41];
    step *schedule;
    uint32_t steps;
    partner *partners;
    uint32_t partner_count;
    struct pollfd *watched; /* the partners looked at while the member waits for one of them */
    size_t frame_max;
    /* Joining: until every partner is in. */
    int listener;           /* -1 when none (no partner of higher rank) or closed */
    int listed;
    unsigned char secret[PS_WIRE_SECRET];
    ps_presenting waiting[PENDING_MAX]; /* refused if it has not presented the secret by its due */
    int waiting_count;
    int64_t join_due;       /* 0 until the first operation */
    int joined;
    /* The rounds: owned by the caller's thread. observed <= completed <= moved <= observed +
     * ROUNDS_AHEAD; round `completed` is under way while it is below `moved`. */
    uint64_t moved, completed, observed;
    int started;            /* round `completed` is under way: its schedule begun */
    uint32_t next_step;     /* where the schedule of the round under way stands */
    int down;               /* rank 0: 0 to do, 1 moved (its observe left), 2 done */
    int failed;             /* PS_EREMOTE once the group is broken */
    unsigned char *sum;     /* the round under way: the running sum, then the total */
    unsigned char *echo;    /* what rank 0 observes back from below */
    unsigned char *partials;/* ROUNDS_AHEAD slots: a round's partial, as moved */
    unsigned char *totals;  /* ROUNDS_AHEAD slots: a round's total, once completed */
    int status[ROUNDS_AHEAD]; /* a completed round's status */
    char why[ROUNDS_AHEAD][PS_STAGE_ERROR_MAX]; /* a completed round's failure, as the stage below said it */
    char broke[PS_STAGE_ERROR_MAX]; /* why the group broke, as the stage said it */
    unsigned char *frame;   /* an encoded PART */
    _Atomic int64_t rounds, refused;
} allreduce_stage;

static allreduce_stage *allreduce_of(ps_link *link) { return (allreduce_stage *)link->stage; }

/* ---- the schedule ---------------------------------------------------------------------------- */

typedef struct schedule_builder {
    allreduce_stage *a;
    step *out;              /* NULL: only count */
    uint32_t count;
} schedule_builder;

static uint32_t partner_index(allreduce_stage *a, uint32_t rank) {
    for (uint32_t i = 0; i < a->partner_count; i++)
        if (a->partners[i].rank == rank) return i;
    a->partners[a->partner_count].rank = rank;
    return a->partner_count++;
}

static void add_step(schedule_builder *b, step_kind kind, uint32_t rank, uint32_t tag) {
    if (b->out) b->out[b->count] = (step){kind, partner_index(b->a, rank), tag};
    b->count++;
}

static void doubling_schedule(schedule_builder *b) {
    uint32_t rank = b->a->rank, size = b->a->size, power = 1;
    while (power * 2 <= size) power *= 2;
    uint32_t extra = size - power;
    if (rank >= power) { /* hands its partial in, gets the total back */
        add_step(b, SEND, rank - power, 0);
        add_step(b, TAKE, rank - power, TAG_DOWN);
        return;
    }
    if (rank < extra) add_step(b, ADD, rank + power, 0);
    for (uint32_t mask = 1, s = 1; mask < power; mask *= 2, s++) {
        add_step(b, SEND, rank ^ mask, s);
        add_step(b, ADD, rank ^ mask, s);
    }
    if (rank < extra) add_step(b, SEND, rank + power, TAG_DOWN);
}

static void tree_schedule(schedule_builder *b, uint32_t fanin) {
    uint32_t rank = b->a->rank, size = b->a->size, level = 0;
    uint64_t span = 1;
    for (; span < size; span *= fanin, level++) { /* up: add the children's sums, or send to the parent */
        uint64_t group = span * fanin;
        if (rank % group) {
            uint32_t parent = rank - (uint32_t)(rank % group);
            add_step(b, SEND, parent, level);
            add_step(b, TAKE, parent, TAG_DOWN + level);
            break;
        }
        for (uint64_t i = 1; i < fanin && rank + i * span < size; i++) add_step(b, ADD, (uint32_t)(rank + i * span), level);
    }
    while (level-- > 0) { /* down: the total to the children, the largest subtrees first */
        span /= fanin;
        for (uint64_t i = 1; i < fanin && rank + i * span < size; i++)
            add_step(b, SEND, (uint32_t)(rank + i * span), TAG_DOWN + level);
    }
}

static void build_schedule(schedule_builder *b) {
    b->count = 0;
    b->a->partner_count = 0;
    if (b->a->size == 1) return;
    if (b->a->fanin) tree_schedule(b, b->a->fanin);
    else doubling_schedule(b);
}

/* FNV-1a over a 32-bit word, its low byte first. */
static uint32_t digest_word(uint32_t digest, uint32_t word) {
    for (int i = 0; i < 4; i++) digest = (digest ^ ((word >> (8 * i)) & 0xff)) * 16777619u;
    return digest;
}

/* What the members' schedules and sums rest on, as one word: the members' count (high half), and
 * a digest of the tree's fan-in and the tuples' layout: each value's kind, size, byte order and
 * place (a bytes run as one; pads not at all), so that 'q' and 'd' differ, and '@q' and 'q', 'lq'
 * and 'qq' (here), 'b7xq' and 'bq' do not. */
static uint64_t group_shape(const allreduce_stage *a) {
    const ps_tuple_format *f = &a->base.format;
    uint32_t digest = digest_word(digest_word(2166136261u, a->fanin), (uint32_t)f->size);
    for (uint32_t i = 0; i < f->run_count; i++) {
        const ps_field_run *run = &f->runs[i];
        if (run->kind == PS_FIELD_PAD) continue; /* never summed: 'b7xq' is 'bq' */
        int each = run->kind != PS_FIELD_BYTES;
        for (uint32_t v = 0; v < (each ? run->count : 1); v++) {
            uint32_t words[] = {run->kind, each ? run->item_size : run->count * run->item_size, run->swapped,
                                run->offset + v * run->item_size};
            for (size_t w = 0; w < sizeof words / sizeof *words; w++) digest = digest_word(digest, words[w]);
        }
    }
    return (uint64_t)a->size << 32 | digest;
}

/* ---- failures ------------------------------------------------------------------------------ */

/* How a member broke its group. QUIT: this member gave up (its process exits, out of memory); its
 * partners hear that it left (GONE). */
typedef enum cause { GONE = 1, STRAY, ABSENT, UNREACHABLE, SHAPE, QUIT } cause;

/* Why a group broke, as its members pass it on (BREAK, and the PEER answer for a member that broke
 * it): the member that broke it, how, and for SHAPE that member's shape. */
typedef struct news {
    uint32_t culprit;
    uint32_t cause;
    uint64_t shape;
} news;

static void put_news(unsigned char out[PS_PEER_NEWS], news n) {
    ps_wire_put_u32(n.culprit, out);
    ps_wire_put_u32(n.cause, out + 4);
    ps_wire_put_u64(n.shape, out + 8);
}

static news get_news(const unsigned char *in) {
    return (news){ps_wire_get_u32(in), ps_wire_get_u32(in + 4), ps_wire_get_u64(in + 8)};
}

/* "allreduce 'GROUP', member R of N: WHAT", in the stage's error. */
static void explain(allreduce_stage *a, const char *fmt, ...) {
    char detail[PS_STAGE_ERROR_MAX - PS_GROUP_MAX - 64];
    va_list args;
    va_start(args, fmt);
    vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    ps_stage_explain(&a->base, "allreduce '%s', member %u of %u: %s", a->group, a->rank, a->size, detail);
}

typedef struct member_name { char text[PS_PEER_ENDPOINT_MAX + 64]; } member_name;

/* "member R (its server S)", or "member R, past this group's". */
static member_name name_of(const allreduce_stage *a, uint64_t rank) {
    member_name name;
    if (rank < a->size) snprintf(name.text, sizeof name.text, "member %llu (its server %s)", (unsigned long long)rank,
                                 a->servers[rank]);
    else snprintf(name.text, sizeof name.text, "member %llu, past this group's", (unsigned long long)rank);
    return name;
}

static void close_listener(allreduce_stage *a);

/* Closes every connection of the member: its listener, its partners', its questions to their
 * servers. */
static void hang_up(allreduce_stage *a) {
    close_listener(a);
    for (uint32_t i = 0; a->partners && i < a->partner_count; i++) {
        partner *p = &a->partners[i];
        ps_channel_close(&p->channel);
        ps_control_close(&p->lookup);
        ps_channel_close(&p->attempt);
        free(p->endpoint);
        p->endpoint = NULL;
    }
}

/* Sends BREAK with the news to every partner connected, and to each connection waiting to be
 * admitted that presented this member's secret (a partner that takes itself for joined). */
static void tell_partners(allreduce_stage *a, const unsigned char said[PS_PEER_NEWS]) {
    ps_frame notice = {PS_WIRE_BREAK, 0, 0, a->rank, 0, 0, said, PS_PEER_NEWS};
    size_t length = ps_wire_encode(&notice, a->frame, a->frame_max);
    for (uint32_t i = 0; a->partners && i < a->partner_count; i++)
        if (a->partners[i].channel.fd >= 0) ps_channel_send(&a->partners[i].channel, a->frame, length, 0);
    for (int i = 0; i < a->waiting_count; i++) {
        ps_frame frame;
        ps_channel *c = &a->waiting[i].channel;
        if (ps_channel_receive(c, 0, &frame) == PS_OK && frame.op == PS_WIRE_CONNECT &&
            ps_wire_presents(&frame, a->secret))
            ps_channel_send(c, a->frame, length, 0);
    }
}

/* The group is broken for good, for the reason `why`: this and every later operation fail with
 * PS_EREMOTE. The member tells its partners why, and lists itself as broken for those that ask
 * its server (one that had joined for timeout_ms: as long as a member may still be joining, and
 * no longer, so that a new group of the same name built later finds nothing of it), then closes
 * its connections, so that its partners learn it at once and break in turn, passing the news on. */
static int break_group(allreduce_stage *a, news why) {
    unsigned char said[PS_PEER_NEWS];
    put_news(said, why);
    a->failed = PS_EREMOTE;
    pthread_mutex_lock(&a->base.links_lock); /* what the caller that broke it was just told: */
    snprintf(a->broke, sizeof a->broke, "%s", a->base.error); /* this stage's line, its caller's own */
    pthread_mutex_unlock(&a->base.links_lock);
    tell_partners(a, said);
    int64_t until = a->listed ? 0 : ps_now_ns() + a->timeout_ns;
    if (ps_peer_list_broken(a, a->group, a->rank, a->shape, said, until) == PS_OK) a->listed = 1;
    hang_up(a);
    return PS_EREMOTE;
}

/* Broken, because of member `rank`, by `how`: "WHAT member R (its server S)" in the stage's error. */
static int broken(allreduce_stage *a, const char *what, uint32_t rank, cause how) {
    explain(a, "%s %s", what, name_of(a, rank).text);
    return break_group(a, how == QUIT ? (news){a->rank, GONE, 0} : (news){rank, how, 0});
}

/* Member `rank` (of its own group, which may be larger) was made for a group of another shape, as
 * this member found or (`heard`: " (heard from member P)") as a partner told: broken, saying how
 * it differs. */
static int disagrees(allreduce_stage *a, uint64_t rank, uint64_t shape, const char *heard) {
    char what[PS_FORMAT_MAX_TEXT + 200];
    uint32_t members = (uint32_t)(shape >> 32);
    int n = snprintf(what, sizeof what, "every member needs the same nodes, algorithm, fanin and element format; ");
    if (members != a->size)
        snprintf(what + n, sizeof what - n, "this one has %u members, %u at", a->size, members);
    else if (a->fanin)
        snprintf(what + n, sizeof what - n, "this one has a tree of fan-in %u and format '%s', another at", a->fanin,
                 a->base.format.text);
    else
        snprintf(what + n, sizeof what - n, "this one has doubling and format '%s', another at", a->base.format.text);
    explain(a, "%s %s%s", what, name_of(a, rank).text, heard);
    return break_group(a, (news){(uint32_t)rank, SHAPE, shape});
}

/* Partner `from` broke the group and says why: broken, with its news, naming the member that broke
 * the group and where the news came from. */
static int heard(allreduce_stage *a, uint32_t from, news why) {
    static const char *const how[] = {[GONE] = "left the group", [STRAY] = "sent a frame out of step",
                                      [ABSENT] = "did not join in time", [UNREACHABLE] = "could not be reached"};
    char source[64] = "";
    if (why.culprit != from) snprintf(source, sizeof source, " (heard from member %u)", from);
    if (why.cause == SHAPE) return disagrees(a, why.culprit, why.shape, source);
    int known = why.cause < sizeof how / sizeof *how && how[why.cause];
    explain(a, "%s %s%s", name_of(a, why.culprit).text, known ? how[why.cause] : "broke the group", source);
    return break_group(a, why);
}

/* A BREAK from partner p: its news, or a frame out of step. */
static int notice(allreduce_stage *a, partner *p, const ps_frame *frame) {
    if (frame->handle_id != p->rank || frame->payload_length != PS_PEER_NEWS)
        return broken(a, "a frame out of step (a malformed BREAK) from", p->rank, STRAY);
    return heard(a, p->rank, get_news(frame->payload));
}

/* ---- joining ------------------------------------------------------------------------------- */

/* Asks member p's server where p listens and the secret to present (PEER), into p's endpoint
 * and secret. The question stays asked across calls until its answer comes. PS_OK; PS_ESTATE
 * when p is not listed yet (asked again a little later); PS_ETIMEDOUT by `deadline`; else
 * broken. */
static int look_up(allreduce_stage *a, partner *p, int64_t deadline) {
    if (!p->lookup.socket) {
        if (ps_now_ns() < p->lookup_due) return PS_ESTATE;
        ps_curve_client keys = {a->server_keys[p->rank], a->client_public, a->client_secret};
        ps_frame request = {PS_WIRE_PEER, 0, 1, 0, p->rank, 0, (const unsigned char *)a->group,
                            (uint32_t)strlen(a->group)};
        if (ps_control_send(&p->lookup, a->servers[p->rank], &keys, &request) != PS_OK)
            return broken(a, "cannot send PEER to the server of", p->rank, UNREACHABLE);
    }
    ps_frame answer;
    int rc = ps_control_answer(&p->lookup, deadline, &answer);
    if (rc == PS_ETIMEDOUT) return rc;
    if (rc == PS_EINTR && !ps_remote_waits_abandoned()) return PS_ETIMEDOUT; /* the caller gave up: asked still */
    if (rc == PS_EINTR) return broken(a, "this process is exiting: gave up joining", p->rank, QUIT);
    if (rc == PS_OK && answer.status == PS_ESTATE) {
        p->unlisted = 1;
        ps_control_close(&p->lookup);
        p->lookup_due = ps_now_ns() + ASK_AGAIN_MS * MS;
        return PS_ESTATE;
    }
    if (rc == PS_OK && answer.status == PS_EREMOTE && answer.payload_length == PS_PEER_NEWS) { /* p broke the group */
        news why = get_news(answer.payload);
        uint64_t shape = (uint64_t)answer.value;
        ps_control_close(&p->lookup);
        return shape != a->shape ? disagrees(a, p->rank, shape, "") : heard(a, p->rank, why);
    }
    if (rc != PS_OK || answer.status != PS_OK || answer.payload_length <= PS_WIRE_SECRET ||
        answer.payload_length - PS_WIRE_SECRET >= PS_PEER_ENDPOINT_MAX)
        return broken(a, "a refused or malformed answer to PEER for", p->rank, UNREACHABLE);
    char endpoint[PS_PEER_ENDPOINT_MAX];
    memcpy(p->secret, answer.payload, PS_WIRE_SECRET);
    p->shape = (uint64_t)answer.value;
    snprintf(endpoint, sizeof endpoint, "%.*s", (int)(answer.payload_length - PS_WIRE_SECRET),
             (const char *)answer.payload + PS_WIRE_SECRET);
    ps_control_close(&p->lookup);
    ps_reachable_endpoint(a->servers[p->rank], endpoint, sizeof endpoint);
    p->endpoint = strdup(endpoint);
    return p->endpoint ? PS_OK : broken(a, "out of memory: cannot connect to", p->rank, QUIT);
}

/* Looks member p up, then connects where it listens and presents its secret and the group's shape
 * (so that p hears of a disagreement too). A connection under way (p's queue is full) stays under
 * way across calls until it is made. PS_OK; PS_ESTATE as look_up; PS_ETIMEDOUT by `deadline`;
 * else broken. */
static int connect_to(allreduce_stage *a, partner *p, int64_t deadline) {
    if (!p->endpoint) {
        int asked = look_up(a, p, deadline);
        if (asked != PS_OK) return asked;
    }
    char error[300];
    int rc = ps_channel_connect_resumable(p->endpoint, a->frame_max, SEND_WAIT_NS, deadline, &p->attempt, error,
                                          sizeof error);
    if (rc == PS_ETIMEDOUT) return rc;
    if (rc != PS_OK && !p->asked_again) { /* its listener may have closed as it broke the group: ask its server */
        free(p->endpoint);
        p->endpoint = NULL;
        p->asked_again = 1;
        return PS_ESTATE;
    }
    if (rc != PS_OK) return broken(a, "cannot connect to", p->rank, UNREACHABLE);
    p->channel = p->attempt;
    p->attempt = (ps_channel){.fd = -1};
    ps_frame hello = {PS_WIRE_CONNECT, 0, 0, a->rank, 0, (int64_t)a->shape, p->secret, PS_WIRE_SECRET};
    size_t length = ps_wire_encode(&hello, a->frame, a->frame_max);
    if (ps_channel_send(&p->channel, a->frame, length, 0) != PS_OK)
        return broken(a, "cannot present itself to", p->rank, GONE);
    return p->shape == a->shape ? PS_OK : disagrees(a, p->rank, p->shape, "");
}

static partner *missing_partner(allreduce_stage *a, uint64_t rank) {
    for (uint32_t i = 0; i < a->partner_count; i++)
        if (a->partners[i].rank == rank && a->partners[i].channel.fd < 0) return &a->partners[i];
    return NULL;
}

/* Whether a frame is the CONNECT of a partner of higher rank still missing, with our secret
 * (compared in constant time). */
static partner *presented(allreduce_stage *a, const ps_frame *frame) {
    if (frame->op != PS_WIRE_CONNECT || frame->handle_id <= a->rank || !ps_wire_presents(frame, a->secret)) return NULL;
    return missing_partner(a, frame->handle_id);
}

static void refuse(allreduce_stage *a, ps_presenting *p) {
    atomic_fetch_add(&a->refused, 1);
    ps_channel_close(&p->channel);
    *p = a->waiting[--a->waiting_count];
}

/* A waiting connection that has presented the secret of a missing partner of higher rank is
 * admitted, if made for this group's shape (else the group is broken); one that sent anything
 * else, or nothing by its due time (or `now`: its place is wanted), is refused, counted; any
 * other waits on. PS_OK, or broken. */
static int judge(allreduce_stage *a, ps_presenting *p, int now) {
    ps_frame frame;
    int received = ps_channel_receive(&p->channel, 0, &frame); /* no wait: it is there or not */
    if (received == PS_ETIMEDOUT && !now && ps_now_ns() < p->due) return PS_OK;
    if (received == PS_OK && frame.op == PS_WIRE_CONNECT && ps_wire_presents(&frame, a->secret) &&
        (uint64_t)frame.value != a->shape && frame.handle_id < (uint64_t)frame.value >> 32)
        /* a member of the group (a rank of its own group's), whatever its rank: it disagrees */
        return disagrees(a, frame.handle_id, (uint64_t)frame.value, "");
    partner *in = received == PS_OK ? presented(a, &frame) : NULL;
    if (!in) {
        refuse(a, p);
        return PS_OK;
    }
    in->channel = p->channel; /* with whatever came after the CONNECT */
    *p = a->waiting[--a->waiting_count];
    return PS_OK;
}

/* Takes the connections that came (at most PENDING_MAX a call; with PENDING_MAX waiting, a new
 * one takes the place of the one that has waited longest, judged on what it sent by then), then
 * judges those waiting. PS_OK, or broken. */
static int admit(allreduce_stage *a) {
    ps_channel fresh;
    for (int taken = 0; a->listener >= 0 && taken < PENDING_MAX &&
                        ps_channel_accept(a->listener, a->frame_max, SEND_WAIT_NS, &fresh) == PS_OK; taken++) {
        if (a->waiting_count == PENDING_MAX &&
            judge(a, &a->waiting[ps_presenting_oldest(a->waiting, a->waiting_count)], 1) != PS_OK) {
            ps_channel_close(&fresh);
            return PS_EREMOTE;
        }
        a->waiting[a->waiting_count++] = (ps_presenting){fresh, ps_now_ns() + CONNECT_WAIT_MS * MS};
    }
    for (int i = a->waiting_count - 1; i >= 0; i--)
        if (judge(a, &a->waiting[i], 0) != PS_OK) return PS_EREMOTE;
    return PS_OK;
}

/* Takes the member off its process's list (its own entry only). */
static void unlist(allreduce_stage *a) {
    if (a->listed) ps_peer_unlist(a, a->group, a->rank);
    a->listed = 0;
}

/* Stops listening: every partner is in, or the group is broken. */
static void close_listener(allreduce_stage *a) {
    while (a->waiting_count) refuse(a, &a->waiting[a->waiting_count - 1]);
    if (a->listener >= 0) close(a->listener);
    a->listener = -1;
}

/* Waits a moment for a connection to come or present itself. */
static void pause_for_peers(allreduce_stage *a) {
    struct pollfd items[1 + PENDING_MAX];
    int n = 0;
    if (a->listener >= 0) items[n++] = (struct pollfd){a->listener, POLLIN, 0};
    for (int i = 0; i < a->waiting_count; i++) items[n++] = (struct pollfd){a->waiting[i].channel.fd, POLLIN, 0};
    poll(items, (nfds_t)n, JOIN_PAUSE_MS);
}

/* Whether partner p has a step left in the round under way (before the group has joined: any). */
static int has_part(const allreduce_stage *a, const partner *p) {
    if (!a->joined) return 1;
    for (uint32_t i = a->next_step; a->started && i < a->steps; i++)
        if (&a->partners[a->schedule[i].partner] == p) return 1;
    return 0;
}

/* Partner p's connection closed with no word of why: its server says whether p broke the group
 * (a member that breaks it before it admits a partner has no connection to tell it on), else p
 * left. Broken either way. */
static int lost(allreduce_stage *a, partner *p) {
    free(p->endpoint);
    p->endpoint = NULL;
    p->lookup_due = 0;
    if (look_up(a, p, ps_now_ns() + ASK_WHY_MS * MS) == PS_EREMOTE) return PS_EREMOTE;
    return broken(a, "the connection closed or failed: lost", p->rank, GONE);
}

/* Partner p's connection closed while the member waited for another: a BREAK, the last it sent,
 * says why. One that sent nothing and has no part left in the round under way may have finished
 * its rounds and gone: its end is closed too (a later receive from it fails); any other left the
 * group. PS_OK, or broken. */
static int closed(allreduce_stage *a, partner *p) {
    ps_frame frame;
    int rc, sent = 0;
    while ((rc = ps_channel_receive(&p->channel, 0, &frame)) == PS_OK && frame.op != PS_WIRE_BREAK) sent = 1;
    if (rc == PS_OK) return notice(a, p, &frame);
    if (rc == PS_ETIMEDOUT && !sent) return PS_OK; /* not closed after all */
    if (rc == PS_EREMOTE && !sent && !has_part(a, p)) {
        ps_channel_close(&p->channel);
        return PS_OK;
    }
    return lost(a, p);
}

/* Looks, without waiting, whether the connection of a partner other than `awaited` (NULL: any)
 * has closed: a slow path's check, between the waits for a frame. PS_OK, or broken. */
static int watch_partners(allreduce_stage *a, const partner *awaited) {
    nfds_t n = 0;
    for (uint32_t i = 0; i < a->partner_count; i++)
        if (&a->partners[i] != awaited && a->partners[i].channel.fd >= 0)
            a->watched[n++] = (struct pollfd){a->partners[i].channel.fd, POLLRDHUP, 0};
    if (n == 0 || poll(a->watched, n, 0) <= 0) return PS_OK;
    for (uint32_t i = 0, j = 0; i < a->partner_count; i++) {
        partner *p = &a->partners[i];
        if (p == awaited || p->channel.fd < 0) continue;
        if (a->watched[j++].revents && closed(a, p) != PS_OK) return PS_EREMOTE;
    }
    return PS_OK;
}

/* Connects every partner: PS_OK, PS_ETIMEDOUT at the caller's deadline (joining goes on at the
 * next call), or broken (a partner missing at the group's own deadline, timeout_ms after the
 * first operation). */
static int join(allreduce_stage *a, int64_t deadline) {
    if (a->joined) return PS_OK;
    if (!a->join_due) a->join_due = ps_now_ns() + a->timeout_ns;
    int64_t until = deadline == PS_FOREVER || deadline > a->join_due ? a->join_due : deadline;
    for (;;) {
        for (uint32_t i = 0; i < a->partner_count; i++) {
            partner *p = &a->partners[i];
            if (p->channel.fd < 0 && p->rank < a->rank && connect_to(a, p, until) == PS_EREMOTE) return PS_EREMOTE;
        }
        if (admit(a) != PS_OK || watch_partners(a, NULL) != PS_OK) return PS_EREMOTE;
        uint32_t missing = 0;
        partner *first = NULL;
        for (uint32_t i = 0; i < a->partner_count; i++)
            if (a->partners[i].channel.fd < 0 && missing++ == 0) first = &a->partners[i];
        if (!missing) {
            unlist(a);
            close_listener(a);
            a->joined = 1;
            return PS_OK;
        }
        int64_t now = ps_now_ns();
        if (now >= a->join_due) {
            char what[256];
            snprintf(what, sizeof what, "%u member(s) did not join within %lld ms%s, among them", missing,
                     (long long)(a->timeout_ns / MS),
                     first->unlisted ? " (its server answers PEER that it lists no such member: not made, made "
                                       "for other nodes, or in its group already)"
                     : first->lookup.socket ? " (a server that did not answer PEER: is it up?)" : "");
            return broken(a, what, first->rank, ABSENT);
        }
        if (now >= until) return PS_ETIMEDOUT;
        pause_for_peers(a);
    }
}

/* ---- the round ----------------------------------------------------------------------------- */

static int send_part(allreduce_stage *a, const step *s) {
    partner *p = &a->partners[s->partner];
    ps_frame part = {PS_WIRE_PART, 0, a->completed, a->rank, s->tag, 0, a->sum, (uint32_t)a->base.tuple_size};
    size_t length = ps_wire_encode(&part, a->frame, a->frame_max);
    return ps_channel_send(&p->channel, a->frame, length, 0) == PS_OK ? PS_OK : lost(a, p);
}

/* Receives the step's PART from its partner by the deadline (PS_FOREVER: none) and adds or
 * takes it; between slices of the wait, looks at the other partners. PS_OK, PS_ETIMEDOUT, or
 * broken. */
static int receive_part(allreduce_stage *a, const step *s, int64_t deadline) {
    partner *p = &a->partners[s->partner];
    ps_frame frame;
    int rc;
    do {
        int64_t slice = ps_now_ns() + RECEIVE_SLICE_NS;
        rc = ps_channel_receive(&p->channel, deadline == PS_FOREVER || deadline > slice ? slice : deadline, &frame);
        if (rc == PS_ETIMEDOUT && watch_partners(a, p) != PS_OK) return PS_EREMOTE;
    } while (rc == PS_ETIMEDOUT && (deadline == PS_FOREVER || ps_now_ns() < deadline));
    if (rc == PS_ETIMEDOUT) return rc;
    if (rc == PS_EREMOTE) return lost(a, p);
    if (rc == PS_OK && frame.op == PS_WIRE_BREAK) return notice(a, p, &frame);
    if (rc != PS_OK || frame.op != PS_WIRE_PART || frame.handle_id != p->rank || frame.request_id != a->completed ||
        frame.argument != s->tag || frame.payload_length != a->base.tuple_size)
        return broken(a, "a frame out of step (not this round's PART) from", p->rank, STRAY);
    if (s->kind == ADD) ps_tuple_add(&a->base.format, a->sum, frame.payload);
    else memcpy(a->sum, frame.payload, a->base.tuple_size);
    return PS_OK;
}

/* Works through the round's schedule: its sends, and with `waits` its receives too, until the
 * deadline. */
static int advance(allreduce_stage *a, int waits, int64_t deadline) {
    for (; a->next_step < a->steps; a->next_step++) {
        const step *s = &a->schedule[a->next_step];
        if (s->kind != SEND && !waits) return PS_OK;
        int rc = s->kind == SEND ? send_part(a, s) : receive_part(a, s, deadline);
        if (rc != PS_OK) return rc;
    }
    return PS_OK;
}

/* Rank 0: the total goes down and comes back (an exchange; its observe may be left for later).
 * PS_ETIMEDOUT, or PS_OK with the round's status in *status. */
static int go_down(allreduce_stage *a, int64_t deadline, int *status) {
    ps_op op = {.kind = a->down ? PS_OP_OBSERVE : PS_OP_EXCHANGE, .in = a->sum, .out = a->echo,
                .timeout_ns = ps_remaining(deadline)};
    int rc = ps_link_call(&a->base.next, &op);
    if (!a->down && op.done) a->down = 1;
    if (rc == PS_ETIMEDOUT) return rc;
    a->down = 2;
    if (rc == PS_OK && memcmp(a->echo, a->sum, a->base.tuple_size) != 0) {
        explain(a, "the stage below answered another total than the one moved: allreduce must be the last sum "
                   "on its path");
        rc = PS_ESTATE;
    }
    *status = rc;
    return PS_OK;
}

static unsigned char *slot_of(allreduce_stage *a, unsigned char *slots, uint64_t round) {
    return slots + (round % ROUNDS_AHEAD) * a->base.tuple_size;
}

/* Starts round `completed`, moved already: its sends go out. */
static int start_round(allreduce_stage *a) {
    memcpy(a->sum, slot_of(a, a->partials, a->completed), a->base.tuple_size);
    a->started = 1;
    a->next_step = 0;
    a->down = a->rank == 0 ? 0 : 2;
    return advance(a, 0, 0);
}

/* Completes the rounds moved up to round `last`, joining the group first if need be: PS_OK once
 * its total is here (and, at rank 0, below), PS_ETIMEDOUT, or the group's failure. */
static int complete_until(allreduce_stage *a, uint64_t last, int64_t deadline) {
    int rc = join(a, deadline);
    while (rc == PS_OK && a->completed <= last) {
        int status = PS_OK;
        if (!a->started) rc = start_round(a);
        if (rc == PS_OK) rc = advance(a, 1, deadline);
        ps_error_mark began = ps_stage_error_mark();
        if (rc == PS_OK && a->down != 2) rc = go_down(a, deadline, &status);
        if (rc != PS_OK) return rc;
        memcpy(slot_of(a, a->totals, a->completed), a->sum, a->base.tuple_size);
        a->status[a->completed % ROUNDS_AHEAD] = status;
        if (status != PS_OK) ps_stage_said_since(began, a->why[a->completed % ROUNDS_AHEAD], PS_STAGE_ERROR_MAX);
        a->completed++;
        a->started = 0;
        atomic_store_explicit(&a->rounds, (int64_t)a->completed, memory_order_relaxed);
    }
    return rc;
}

static int refused_call(allreduce_stage *a, const char *why) {
    explain(a, "%s", why);
    return PS_ESTATE;
}

/* A failure met in an earlier call, told again to this one: the group's break, ... */
static int still_broken(allreduce_stage *a) {
    ps_stage_explain(&a->base, "%s", a->broke);
    return a->failed;
}

/* ... or a completed round's. */
static int round_status(allreduce_stage *a, uint64_t round) {
    int status = a->status[round % ROUNDS_AHEAD];
    const char *why = a->why[round % ROUNDS_AHEAD];
    if (status != PS_OK && why[0]) ps_stage_explain(&a->base, "%s", why);
    return status;
}

/* A move never waits: its partial goes out to the partners at once when the member has joined
 * its group and has no earlier round under way; else it waits its turn, for a later call. */
static int allreduce_move(allreduce_stage *a, const void *tuple) {
    if (a->failed) return still_broken(a);
    if (a->moved >= a->observed + ROUNDS_AHEAD)
        return refused_call(a, "a move more than 4 rounds ahead of this caller's observes: observe first");
    memcpy(slot_of(a, a->partials, a->moved), tuple, a->base.tuple_size);
    if (a->moved++ > a->completed) return PS_OK;
    int rc = join(a, ps_now_ns()); /* one look: no wait */
    if (rc == PS_ETIMEDOUT) return PS_OK;
    return rc == PS_OK ? start_round(a) : rc;
}

static int allreduce_observe(allreduce_stage *a, void *out, int64_t timeout_ns) {
    if (a->failed) return still_broken(a);
    if (a->observed == a->moved) return refused_call(a, "an observe with no move of its own before it: each "
                                                        "observe answers one");
    int rc = complete_until(a, a->observed, ps_deadline(timeout_ns));
    if (rc != PS_OK) return rc;
    memcpy(out, slot_of(a, a->totals, a->observed), a->base.tuple_size);
    return round_status(a, a->observed++);
}

/* A move_many is that many partials, of consecutive rounds: taken whole when they all fit in the
 * rounds a caller may move ahead, else refused, nothing moved. */
static int allreduce_move_many(ps_link *link, ps_op *op) {
    allreduce_stage *a = allreduce_of(link);
    if (a->moved + op->count > a->observed + ROUNDS_AHEAD)
        return refused_call(a, "a move_many further than 4 rounds ahead of this caller's observes: observe first");
    return ps_op_fallback(link, op);
}

/* A fence: the rounds the caller moved are completed (its observes then answer at once), then
 * the fence goes on down. */
static int allreduce_fence(ps_link *link, ps_op *op) {
    allreduce_stage *a = allreduce_of(link);
    int64_t deadline = ps_deadline(op->timeout_ns);
    if (a->failed) return still_broken(a);
    int rc = a->moved > a->completed ? complete_until(a, a->moved - 1, deadline) : PS_OK;
    for (uint64_t r = a->observed; rc == PS_OK && r < a->moved; r++) rc = round_status(a, r);
    if (rc != PS_OK) return rc;
    int64_t timeout_ns = op->timeout_ns;
    op->timeout_ns = ps_remaining(deadline);
    rc = ps_link_call(&a->base.next, op);
    op->timeout_ns = timeout_ns;
    return rc;
}

static int allreduce_call(ps_link *link, ps_op *op) {
    allreduce_stage *a = allreduce_of(link);
    if (a->size == 1) return ps_link_call(&a->base.next, op); /* a sum of one partial is that partial */
    switch (op->kind) {
    case PS_OP_MOVE: return allreduce_move(a, op->in);
    case PS_OP_OBSERVE: return allreduce_observe(a, op->out, op->timeout_ns);
    case PS_OP_EXCHANGE: return ps_op_fallback(link, op); /* a partial, then its round's total */
    case PS_OP_MOVE_MANY: return allreduce_move_many(link, op);
    case PS_OP_FENCE: return allreduce_fence(link, op);
    default: return ps_link_call(&a->base.next, op); /* the element's own operations */
    }
}

/* ---- the stage ----------------------------------------------------------------------------- */

static int allreduce_counters(ps_stage *stage, ps_counter *out, int max) {
    allreduce_stage *a = (allreduce_stage *)stage;
    if (max < 3) return 0;
    out[0] = (ps_counter){"rounds", atomic_load(&a->rounds)};
    out[1] = (ps_counter){"members", a->size};
    out[2] = (ps_counter){"refused", atomic_load(&a->refused)};
    return 3;
}

static void allreduce_destroy(ps_stage *stage) {
    allreduce_stage *a = (allreduce_stage *)stage;
    hang_up(a);
    unlist(a);
    free(a->partners);
    free(a->watched);
    free(a->schedule);
    free(a->servers);
    free(a->server_keys);
    free(a->sum);
    free(a->echo);
    free(a->partials);
    free(a->totals);
    free(a->frame);
}

/* The members named in a comma-separated list: how many, and each one into `out` (when given),
 * a bare name as a TCP endpoint. 0 for an empty list. */
static uint32_t split_list(const char *list, char (*out)[PS_PEER_ENDPOINT_MAX], int endpoints) {
    uint32_t n = 0;
    if (!*list) return 0;
    for (const char *item = list;; n++) {
        const char *comma = strchr(item, ',');
        int length = (int)(comma ? (size_t)(comma - item) : strlen(item));
        if (out) {
            const char *scheme = endpoints && length && !memmem(item, (size_t)length, "://", 3) ? "tcp://" : "";
            snprintf(out[n], PS_PEER_ENDPOINT_MAX, "%s%.*s", scheme, length, item);
        }
        if (!comma) return n + 1;
        item = comma + 1;
    }
}

/* Where this member listens: its own server's host (loopback for a server not on TCP). */
static void own_host(const char *server, char *out, size_t size) {
    const char *colon = strrchr(server, ':');
    if (strncmp(server, "tcp://", 6) == 0 && colon > server + 6) snprintf(out, size, "%.*s", (int)(colon - server - 6), server + 6);
    else snprintf(out, size, "127.0.0.1");
}

static size_t frame_max_of(size_t tuple_size) {
    return PS_WIRE_HEADER + (tuple_size > PS_WIRE_SECRET ? tuple_size : PS_WIRE_SECRET);
}

static size_t allreduce_footprint(const ps_params *params, size_t tuple_size) {
    uint32_t size = split_list(ps_params_str(params, "nodes"), NULL, 0);
    uint32_t links = size > 1 ? size : 1; /* at most this many partners, at most twice as many steps */
    return sizeof(allreduce_stage) + size * (PS_PEER_ENDPOINT_MAX + 41) +
           links * (sizeof(partner) + sizeof(struct pollfd)) +
           2 * (links + 64) * sizeof(step) + 3 * frame_max_of(tuple_size) + 2 * ROUNDS_AHEAD * tuple_size +
           (size_t)(size > 1 ? size - 1 : 0) * 2 * ps_channel_buffer_bytes(frame_max_of(tuple_size));
}

/* Checks the group's parameters; fills servers, keys. */
static int take_members(allreduce_stage *a, const ps_params *params, const ps_build_context *context, char *error,
                        size_t error_size) {
    const char *nodes = ps_params_str(params, "nodes"), *keys = ps_params_str(params, "curve_server_keys");
    uint32_t size = split_list(nodes, NULL, 0);
    a->size = size ? size : 1;
    a->rank = (uint32_t)ps_params_int(params, "rank");
    snprintf(a->group, sizeof a->group, "%s", ps_params_str(params, "group"));
    if (size > MAX_MEMBERS || a->rank >= a->size) {
        snprintf(error, error_size, "stage 'allreduce': rank %u of a group of %u member(s) (nodes '%.200s'): expected "
                 "0 <= rank < the members named in nodes, at most %d", a->rank, size, nodes, MAX_MEMBERS);
        return PS_EINVAL;
    }
    if (size > 1 && (!*a->group || strlen(ps_params_str(params, "group")) > PS_GROUP_MAX)) {
        snprintf(error, error_size, "stage 'allreduce': a group of several members needs a group name of 1 to %d "
                 "characters, the same at every member", PS_GROUP_MAX);
        return PS_EINVAL;
    }
    a->servers = calloc(a->size, sizeof *a->servers);
    a->server_keys = calloc(a->size, sizeof *a->server_keys);
    char (*key_list)[PS_PEER_ENDPOINT_MAX] = calloc(a->size, sizeof *key_list);
    if (!a->servers || !a->server_keys || !key_list) {
        free(key_list);
        return PS_ENOMEM;
    }
    split_list(nodes, a->servers, 1);
    uint32_t key_count = split_list(keys, key_list, 0);
    int rc = PS_OK;
    if (key_count && key_count != size) {
        snprintf(error, error_size, "stage 'allreduce': curve_server_keys names %u key(s) for %u member(s): expected "
                 "one per member of nodes ('' for none)", key_count, size);
        rc = PS_EINVAL;
    }
    for (uint32_t i = 0; rc == PS_OK && i < key_count; i++) {
        if (*key_list[i] && strlen(key_list[i]) != 40) {
            snprintf(error, error_size, "stage 'allreduce': curve_server_keys: key %u is not 40 Z85 characters", i);
            rc = PS_EINVAL;
        }
        snprintf(a->server_keys[i], sizeof a->server_keys[i], "%s", key_list[i]);
    }
    free(key_list);
    for (uint32_t i = 0; rc == PS_OK && i < size; i++) { /* one server may list several members (by rank) */
        if (!ps_endpoint_whole(a->servers[i])) {
            snprintf(error, error_size, "stage 'allreduce': member %u of nodes, '%.200s', names no server to reach: "
                     "expected tcp://HOST:PORT (or HOST:PORT; PORT 1 to 65535), ipc://NAME, inproc://NAME, or in a run "
                     "the name of a node of its map", i, a->servers[i]);
            rc = PS_EINVAL;
        }
        if (rc == PS_OK && i != a->rank && !ps_endpoint_trusted(context, a->servers[i])) {
            snprintf(error, error_size, "stage 'allreduce': this server reaches only the endpoints it trusts (the nodes "
                     "of its map, paths serve --allow-remote PATTERN), and member %u's '%.200s' is not one", i,
                     a->servers[i]);
            rc = PS_EINVAL;
        }
    }
    if (context->curve_client_public && context->curve_client_secret) {
        snprintf(a->client_public, sizeof a->client_public, "%s", context->curve_client_public);
        snprintf(a->client_secret, sizeof a->client_secret, "%s", context->curve_client_secret);
    }
    return rc;
}

/* Listens for the partners of higher rank and lists the member where its server finds it. */
static int start_listening(allreduce_stage *a, char *error, size_t error_size) {
    int higher = 0;
    for (uint32_t i = 0; i < a->partner_count; i++) higher |= a->partners[i].rank > a->rank;
    if (!higher) return PS_OK;
    char host[PS_PEER_ENDPOINT_MAX], endpoint[PS_PEER_ENDPOINT_MAX];
    own_host(a->servers[a->rank], host, sizeof host);
    if (getrandom(a->secret, sizeof a->secret, 0) != (ssize_t)sizeof a->secret ||
        ps_channel_listen(a->transport, host, &a->listener, endpoint, sizeof endpoint) != PS_OK) {
        snprintf(error, error_size, "stage 'allreduce': cannot listen for its peers on '%s'", host);
        return PS_EREMOTE;
    }
    int rc = ps_peer_list(a, a->group, a->rank, endpoint, a->secret, a->shape);
    if (rc == PS_ESTATE)
        snprintf(error, error_size, "stage 'allreduce': member %u of group '%s' is in this process already (give each "
                 "group a name of its own)", a->rank, a->group);
    a->listed = rc == PS_OK;
    return rc;
}

static int allreduce_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                            ps_stage **out, char *error, size_t error_size) {
    const ps_tuple_format *format;
    int checked = ps_summed_format("allreduce", below, &format, error, error_size);
    if (checked != PS_OK) return checked;
    allreduce_stage *a = calloc(1, sizeof *a);
    if (!a) return PS_ENOMEM;
    a->listener = -1;
    a->transport = strcmp(ps_params_str(params, "proto"), "ipc") == 0 ? PS_TRANSPORT_IPC : PS_TRANSPORT_TCP;
    a->timeout_ns = ps_params_int(params, "timeout_ms") * MS;
    a->frame_max = frame_max_of(format->size);
    int rc = ps_stage_init(&a->base, &ps_kind_allreduce, format, 1, below);
    if (rc == PS_ESTATE) snprintf(error, error_size, "stage 'allreduce': the stage below has no free caller slot");
    if (rc == PS_OK) rc = take_members(a, params, context, error, error_size);
    schedule_builder builder = {a, NULL, 0};
    if (rc == PS_OK) {
        int tree = strcmp(ps_params_str(params, "algorithm"), "tree") == 0;
        uint32_t fanin = (uint32_t)ps_params_int(params, "fanin");
        a->fanin = !tree ? 0 : fanin < a->size ? fanin : a->size;
        a->shape = group_shape(a);
        a->partners = calloc(a->size, sizeof *a->partners); /* at most size - 1 partners */
        a->watched = calloc(a->size, sizeof *a->watched);
        build_schedule(&builder); /* counts */
        a->schedule = calloc(builder.count + 1, sizeof *a->schedule);
        builder.out = a->schedule;
        if (a->partners && a->schedule) build_schedule(&builder);
        a->steps = builder.count;
        for (uint32_t i = 0; a->partners && i < a->partner_count; i++)
            a->partners[i].channel = a->partners[i].attempt = (ps_channel){.fd = -1};
        a->sum = malloc(format->size);
        a->echo = malloc(format->size);
        a->partials = malloc(ROUNDS_AHEAD * format->size);
        a->totals = malloc(ROUNDS_AHEAD * format->size);
        a->frame = malloc(a->frame_max);
        if (!a->partners || !a->watched || !a->schedule || !a->sum || !a->echo || !a->partials || !a->totals || !a->frame)
            rc = PS_ENOMEM;
    }
    if (rc == PS_OK) rc = start_listening(a, error, error_size);
    a->joined = a->partner_count == 0;
    if (rc != PS_OK) {
        allreduce_destroy(&a->base);
        ps_stage_abandon(&a->base);
        return rc;
    }
    *out = &a->base;
    return PS_OK;
}

static const ps_param_spec ALLREDUCE_PARAMS[] = {
    {"group", PS_PARAM_STR, 0, "", 0, -1, NULL,
     "the group's name, the same at every member (unique among the groups of a process)", PS_PARAM_GIVEN},
    {"nodes", PS_PARAM_STR, 0, "", 0, -1, NULL,
     "the members in rank order, comma-separated: nodes of the map (or their servers' endpoints); '' for a group "
     "of one", PS_PARAM_NODES},
    {"rank", PS_PARAM_INT, 0, "0", 0, MAX_MEMBERS - 1, NULL, "this member's place in nodes", PS_PARAM_GIVEN},
    {"algorithm", PS_PARAM_STR, 0, "doubling", 0, -1, "doubling|tree",
     "doubling: recursive doubling (log2 N steps, every member adds); tree: up a tree of fan-in `fanin` to rank 0, "
     "the total back down", PS_PARAM_GIVEN},
    {"fanin", PS_PARAM_INT, 0, "2", 2, MAX_MEMBERS, NULL, "algorithm tree: the members a member adds up per level",
     PS_PARAM_GIVEN},
    {"proto", PS_PARAM_STR, 0, "tcp", 0, -1, "tcp|ipc",
     "how partials travel between members: a direct TCP or Unix-socket connection per pair (not encrypted)",
     PS_PARAM_GIVEN},
    {"timeout_ms", PS_PARAM_INT, 0, "10000", 1, 3600000, NULL,
     "a member not joined this long after the first operation is taken as gone", PS_PARAM_WAIT_MS},
    {"curve_server_keys", PS_PARAM_STR, 0, "", 0, -1, NULL,
     "the members' servers' CURVE public keys, comma-separated in rank order, for PEER ('' for none)", PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_allreduce = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "allreduce",
    .doc = "A global sum whose members (one per node) send their partials to each other directly, as "
           "MPI_Allreduce's ranks do; each member's caller observes the round's total.",
    .params = ALLREDUCE_PARAMS,
    .param_count = sizeof ALLREDUCE_PARAMS / sizeof ALLREDUCE_PARAMS[0],
    .role = PS_JOINING,
    .needs_below = 1,
    .create = allreduce_create,
    .call = allreduce_call,
    .footprint = allreduce_footprint,
    .counters = allreduce_counters,
    .destroy = allreduce_destroy,
};
