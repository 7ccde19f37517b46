/* remote.c — the `remote` stage: the rest of the path lives on a server.
 *
 * Each caller of the stage gets its own connection: when it attaches, it sends the path
 * remainder (a BUILD) to the server's main endpoint over ZeroMQ, the server builds it into its
 * own stage table and answers with a way in that serves only this caller's link, on the
 * transport `proto` asked for: a direct TCP or Unix-socket connection (tcp, ipc), which the
 * caller's own thread writes and reads, presenting the link's secret from the BUILD answer
 * first; or the link's own ZeroMQ socket (zmq, inproc), the transport CURVE can protect. Every
 * operation is then one request and one answer there. A blocking operation is sent in slices of
 * at most timeout_ms / 2, so a live server always answers well within timeout_ms and one silent
 * for timeout_ms is taken as gone; a slice that ends at the server (status: timed out, nothing
 * done) is simply sent again.
 * With window > 1, moves and move_many are pipelined: up to `window` requests go out before their
 * answers are read, each kept until it is answered. Every request sent while others are not
 * answered yet goes marked behind them, and the server runs none of those after one that did not
 * take effect whole: a slice that ended sends them all again, in order (a timeout never drops a
 * pipelined move); a failure drops them, and the caller's next operation, not run, says so.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "control_plane.h"
#include "direct_channel.h"
#include "forks.h"
#include "pipeline.h"
#include "server.h"
#include "stage_base.h"
#include "stage_kinds.h"
#include "wire.h"
#include "zmq_context.h"

enum { MAX_ENDPOINT = 256, RELEASE_WAIT_MS = 500, ANSWER_TEXT_MAX = 1024 };
enum { RANGE_READ_BYTES = 256 * 1024 }; /* direct: a range's answer is read this much at a time, at most */

typedef struct connection {
    void *socket;           /* zmq: DEALER to the caller's own link socket on the server */
    ps_channel channel;     /* direct: the caller's own connection to its link */
    zmq_msg_t message;      /* zmq: the last answer received (what a decoded answer points into) */
    uint64_t handle_id;
    uint64_t next_request;  /* the id of the last request sent */
    ps_pipeline pipeline;   /* pipelined requests whose answers are not read yet, oldest first */
    uint64_t oldest_pending;/* the request id of the oldest of them (the others' follow it by one) */
    uint64_t answered;      /* tuples of pipelined requests that took effect so far */
    int64_t last_pipelined; /* when the last pipelined request was sent (ps_now_ns) */
    int held;               /* the pipelined requests kept were not sent again after a slice ended
                               (their caller's time was up): they are not on their way */
    int failed;             /* a status that broke the connection, 0 while it works */
    const char *broke_at;   /* then: what failed (broken's `what`), and the status of its receive or send */
    int broke_on;
    unsigned forks;         /* ps_forks() when it was made: another count, and it is a parent's */
    unsigned char *request; /* the encoded request: a BUILD's path spec, or a frame of tuples */
    size_t capacity;        /* its bytes */
} connection;

typedef struct remote_stage {
    ps_stage base;
    char endpoint[MAX_ENDPOINT];     /* the server's main endpoint */
    int transport;                   /* ps_wire_transport: how operations travel */
    char *path_spec;                 /* the remainder, sent at BUILD */
    int64_t timeout_ns;
    uint32_t window;
    uint32_t batch;                  /* direct: pipelined moves that leave together */
    char server_key[41];             /* CURVE: the server's public key, "" for none */
    char client_public[41];          /* CURVE: this process's key pair, "" for a fresh one per socket */
    char client_secret[41];
    connection *connections;         /* one per caller slot */
    _Atomic int64_t requests, answers, failures;
    _Atomic int64_t streams_cut;     /* move_many streams a frame cut short (the frames after it not run) */
    _Atomic int64_t resent;          /* pipelined requests sent again after a slice ended at the server */
    _Atomic int64_t dropped;         /* tuples of pipelined requests dropped after a failure */
    int64_t axe_known;               /* the highest axe point of the element known here: what every answer
                                        says, an axe sent (its answer lost), a read refused as axed
                                        (base.axe_point: a cache above looks at it) */
} remote_stage;

static remote_stage *remote_of(ps_link *link) { return (remote_stage *)link->stage; }

/* ps_remote_attach_spec: the stage and the spec this thread's next links send at BUILD. */
static _Thread_local const ps_stage *spec_stage;
static _Thread_local const char *spec_given;

void ps_remote_attach_spec(const ps_stage *remote, const char *spec) {
    spec_stage = spec ? remote : NULL;
    spec_given = spec;
}

/* "remote ENDPOINT: WHAT[: DETAIL]", cut to the stage's error buffer. */
static void explain(remote_stage *r, const char *what, const char *detail) {
    ps_stage_explain(&r->base, "remote %s: %s%s%s", r->endpoint, what, detail ? ": " : "", detail ? detail : "");
}

/* The caller's own socket to its link. */
static void *open_socket(remote_stage *r, const char *endpoint) {
    ps_curve_client keys = {r->server_key, r->client_public, r->client_secret};
    return ps_control_socket(endpoint, &keys);
}

/* Sends a request on the link's ZeroMQ socket. While its queue is full (a server that does not
 * read, or over inproc a link whose socket has closed, which leaves it nowhere to queue) it waits
 * for room at most timeout_ms, in slices that ask whether the caller gave up (Ctrl-C) or the
 * process is exiting. Whether it was sent. */
static int send_zmq(const remote_stage *r, void *socket, const void *bytes, size_t length) {
    int64_t deadline = ps_now_ns() + r->timeout_ns;
    for (;;) {
        if (zmq_send(socket, bytes, length, ZMQ_DONTWAIT) == (int)length) return 1;
        if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) return 0;
        int64_t end = ps_interruptible_slice_end(deadline), left = end - ps_now_ns();
        if (!end || left <= 0) return 0;
        zmq_pollitem_t item = {socket, 0, ZMQ_POLLOUT, 0};
        zmq_poll(&item, 1, (long)((left + 999999) / 1000000));
    }
}

/* Sends an encoded request on the direct connection. A pipelined request followed by more (one of
 * a burst) leaves marked so (TCP holds it back for the next request, at most 200 ms), and with
 * batch > 1 it waits in the caller's buffer until `batch` moves do. Whatever waits goes out as soon as the
 * caller sends any other request or waits for an answer. */
static int send_direct(remote_stage *r, connection *c, size_t length, int pipelined) {
    if (!pipelined) return ps_channel_send(&c->channel, c->request, length, 0);
    if (ps_channel_write(&c->channel, c->request, length) != PS_OK) return PS_EREMOTE;
    return c->channel.out_length >= r->batch * length ? ps_channel_flush(&c->channel, 1) : PS_OK;
}

/* Sends one request on the link's ZeroMQ `socket` or, when it is NULL, on the caller's direct
 * connection (`pipelined`: see send_direct); `behind` requests not answered yet (wire.md,
 * Pipelining). Returns its id, or 0 when it could not be sent. */
static uint64_t send_request(remote_stage *r, connection *c, void *socket, uint8_t op, int64_t argument,
                             int64_t server_timeout, const void *payload, size_t payload_length, int pipelined,
                             int behind) {
    ps_frame request = {op, behind ? PS_WIRE_BEHIND : 0, ++c->next_request, c->handle_id, argument, server_timeout,
                        payload, (uint32_t)payload_length};
    size_t length = ps_wire_encode(&request, c->request, c->capacity);
    if (!length) return 0;
    int sent = socket ? send_zmq(r, socket, c->request, length) : send_direct(r, c, length, pipelined) == PS_OK;
    if (!sent) return 0;
    atomic_fetch_add_explicit(&r->requests, 1, memory_order_relaxed);
    return request.request_id;
}

/* A live server answers a request within its longest slice (1 s, server.c) of running it: an
 * answer this late is overdue. */
static const int64_t ANSWER_DUE_NS = 1500000000LL;

/* Waits up to wait_ns for the answer to request `id` on `socket` (NULL: the direct connection);
 * answers to older requests are skipped. Every answer's argument is the element's axe point as
 * the server's path shows it: the stage keeps the highest. On PS_OK, *answer is valid until the
 * next receive on the connection; else the status says why none came (ps_channel_receive's).
 * Once the answer is overdue, the wait asks between slices whether its caller gave up (Ctrl-C)
 * or the process is exiting (PS_EINTR): a silent server holds neither for all of wait_ns. */
static int wait_answer(remote_stage *r, connection *c, void *socket, uint64_t id, int64_t wait_ns, ps_frame *answer) {
    int64_t now = ps_now_ns(), deadline = now + wait_ns;
    int64_t end = wait_ns > ANSWER_DUE_NS ? now + ANSWER_DUE_NS : deadline;
    for (;;) {
        int rc = socket ? ps_zmq_receive_frame(socket, end, &c->message, answer)
                        : ps_channel_receive(&c->channel, end, answer);
        if (rc == PS_ETIMEDOUT && end < deadline) { /* overdue: on in slices, asking */
            if (!(end = ps_interruptible_slice_end(deadline))) return PS_EINTR;
            continue;
        }
        if (rc != PS_OK) return rc;
        atomic_fetch_add_explicit(&r->answers, 1, memory_order_relaxed);
        ps_axe_point_raise(&r->axe_known, answer->argument);
        if (answer->request_id == id) return PS_OK;
    }
}

/* Why no answer came, for a message. */
static void describe_failure(const remote_stage *r, int why, char *detail, size_t size) {
    if (why == PS_ETIMEDOUT) snprintf(detail, size, "within %lld ms", (long long)(r->timeout_ns / 1000000));
    else if (why == PS_EINVAL) snprintf(detail, size, "a malformed answer");
    else if (why == PS_EINTR) snprintf(detail, size, "the wait was given up (interrupted, or this process is exiting)");
    else snprintf(detail, size, "the connection closed or failed");
}

/* Forgets every pipelined request kept; returns the tuples they carried. */
static uint64_t forget_pipeline(connection *c) {
    uint64_t tuples = c->pipeline.tuples;
    while (c->pipeline.count) ps_pipeline_pop(&c->pipeline);
    return tuples;
}

/* The connection is broken for good: this and every later operation on it fail with
 * PS_EREMOTE, naming the server and `why` (the status of the receive or send that failed). The
 * pipelined moves not answered yet are given up on (counted `dropped`): their answers are lost,
 * so they may or may not have taken effect, and the message says how many tuples they carried. */
static int broken(remote_stage *r, connection *c, const char *what, int why) {
    c->failed = PS_EREMOTE;
    c->broke_at = what;
    c->broke_on = why;
    atomic_fetch_add_explicit(&r->failures, 1, memory_order_relaxed);
    char detail[192];
    describe_failure(r, why, detail, sizeof detail);
    uint64_t unanswered = forget_pipeline(c);
    if (unanswered) {
        size_t n = strlen(detail);
        snprintf(detail + n, sizeof detail - n, "; the %llu tuples of pipelined moves sent before it were not answered "
                 "(they may not have taken effect)", (unsigned long long)unanswered);
        atomic_fetch_add_explicit(&r->dropped, (int64_t)unanswered, memory_order_relaxed);
    }
    explain(r, what, detail);
    return PS_EREMOTE;
}

/* An operation on a connection broken before: refused, nothing of it sent, so its `done` is exact. */
static int refuse_broken(remote_stage *r, connection *c, ps_op *op) {
    char detail[128], why[192];
    describe_failure(r, c->broke_on, detail, sizeof detail);
    snprintf(why, sizeof why, "the connection broke earlier (%s: %s)", c->broke_at, detail);
    explain(r, "not sent", why);
    op->sent_nothing = 1;
    return c->failed;
}

/* The longest the server may wait inside one request: half of timeout_ms, so that its answer
 * is due well within timeout_ms and silence for timeout_ms means the server is gone. */
static int64_t server_slice(const remote_stage *r) { return r->timeout_ns / 2; }

/* A slice that also ends by the caller's deadline. */
static int64_t slice_by(const remote_stage *r, int64_t deadline) {
    int64_t slice = server_slice(r), left = ps_remaining(deadline);
    return left != PS_FOREVER && left < slice ? left : slice;
}

/* An answer's payload as text (a refusal's reason, a failure's explanation), cut to fit. */
static const char *answer_text(const ps_frame *answer, char *text, size_t size) {
    snprintf(text, size, "%.*s", (int)answer->payload_length, answer->payload ? (const char *)answer->payload : "");
    return text;
}

/* ---- pipelining ----------------------------------------------------------------------------- */

/* Returned by drain when the caller's own request, sent behind pipelined ones, was not run and
 * those went again: the caller sends it again too. */
enum { SEND_AGAIN = -1 };

/* Whether an answer says its request was not run (one sent behind a request that did not take
 * effect whole, or a stream's frame after a cut one). */
static int not_run(const ps_frame *answer) { return answer->status == PS_ESTATE && answer->value == 0; }

/* Sends a pipelined request on its way, behind the ones before it, if any; marked to be followed
 * by `more` (see send_direct), or sent now with what waits before it. */
static int send_pending(remote_stage *r, connection *c, const ps_pending *e, int64_t argument, int behind,
                        int more) {
    uint64_t id = send_request(r, c, c->socket, e->op, argument, server_slice(r), e->payload, e->length, more,
                               behind);
    return id ? PS_OK : broken(r, c, "cannot send", PS_EREMOTE);
}

/* Sends every pipelined request kept again, in order, the first starting anew (a move_many's frame
 * as a stream's first), the others behind it. */
static int send_again(remote_stage *r, connection *c) {
    c->oldest_pending = c->next_request + 1;
    for (uint32_t i = 0; i < c->pipeline.count; i++) {
        const ps_pending *e = ps_pipeline_at(&c->pipeline, i);
        int rc = send_pending(r, c, e, i == 0 && e->argument == PS_WIRE_STREAM_CONTINUES ? PS_WIRE_STREAM_STARTS
                                                                                          : e->argument, i > 0,
                              i + 1 < c->pipeline.count);
        if (rc != PS_OK) return rc;
    }
    atomic_fetch_add_explicit(&r->resent, c->pipeline.count, memory_order_relaxed);
    return PS_OK;
}

/* Sends the pipelined requests held back on their way again, before any other request. */
static int resume(remote_stage *r, connection *c) {
    if (!c->held) return PS_OK;
    c->held = 0;
    return send_again(r, c);
}

/* Reads the answers of every pipelined request after the oldest, and of the caller's own request
 * `own` (0: none), all sent behind the oldest, which did not take effect whole: none may have run. */
static int read_not_run(remote_stage *r, connection *c, uint64_t own) {
    for (uint32_t i = 1; i <= c->pipeline.count; i++) {
        uint64_t id = i < c->pipeline.count ? c->oldest_pending + i : own;
        ps_frame answer;
        if (!id) break;
        int rc = wait_answer(r, c, c->socket, id, r->timeout_ns, &answer);
        if (rc != PS_OK) return broken(r, c, "no answer to a pipelined move", rc);
        if (!not_run(&answer)) return broken(r, c, "a request behind a pipelined one that did not take effect ran",
                                             PS_EINVAL);
    }
    return PS_OK;
}

/* The oldest pipelined request failed (`answer`): it and those after it are dropped, and the
 * caller is told, with the status. */
static int drop_pipeline(remote_stage *r, connection *c, const ps_frame *answer, const char *why) {
    uint32_t requests = c->pipeline.count;
    uint64_t tuples = forget_pipeline(c) - (uint64_t)(answer->value > 0 ? answer->value : 0);
    atomic_fetch_add_explicit(&r->dropped, (int64_t)tuples, memory_order_relaxed);
    ps_stage_explain(&r->base, "remote %s: a pipelined move sent before this call failed (%s%s%s); it and the %u "
                     "sent after it did not take effect (%llu tuples)", r->endpoint, ps_status_name(answer->status),
                     *why ? ": at the server: " : "", why, requests - 1, (unsigned long long)tuples);
    return answer->status;
}

/* Reads the answers of pipelined requests, oldest first, until at most `keep` are not answered,
 * and, when `own` is not 0, the answer to the caller's own request sent behind them. At the first
 * that did not take effect whole, the server ran none after it: after a slice that ended, all go
 * again (SEND_AGAIN when `own` was among them), or, once `deadline` passed, are held back until
 * the caller's next operation (PS_ETIMEDOUT); after a failure, all are dropped (its status).
 * PS_OK: own's answer is still to read. */
static int drain(remote_stage *r, connection *c, uint32_t keep, uint64_t own, int64_t deadline) {
    while (c->pipeline.count > keep) {
        ps_frame answer;
        int rc = wait_answer(r, c, c->socket, c->oldest_pending, r->timeout_ns, &answer);
        if (rc != PS_OK) return broken(r, c, "no answer to a pipelined move", rc);
        if (answer.status == PS_OK) {
            c->answered += ps_pipeline_at(&c->pipeline, 0)->tuples;
            ps_pipeline_pop(&c->pipeline);
            c->oldest_pending++;
            continue;
        }
        char why[ANSWER_TEXT_MAX + 1];
        answer_text(&answer, why, ps_status_is_explained(answer.status) ? sizeof why : 1);
        ps_frame failed = answer; /* its payload is gone with the next answer read */
        if ((rc = read_not_run(r, c, own)) != PS_OK) return rc;
        c->answered += failed.value > 0 ? (uint64_t)failed.value : 0; /* a first part of a frame */
        if (failed.status != PS_ETIMEDOUT) return drop_pipeline(r, c, &failed, why);
        ps_pipeline_took(&c->pipeline, failed.value > 0 ? (uint32_t)failed.value : 0, r->base.tuple_size);
        if (!ps_remaining(deadline)) {
            c->held = 1;
            return PS_ETIMEDOUT;
        }
        if ((rc = send_again(r, c)) != PS_OK) return rc;
        if (own) return SEND_AGAIN;
    }
    return PS_OK;
}

/* A failed operation's answer says why, as the server's path explained it: the stage keeps it. */
static void take_explanation(remote_stage *r, const ps_frame *answer) {
    char text[ANSWER_TEXT_MAX + 1];
    if (ps_status_is_explained(answer->status) && answer->payload_length)
        explain(r, "at the server", answer_text(answer, text, sizeof text));
}

/* The tuples of a range's answer, frame after frame (`answer` is its first), into op->out; each
 * frame's value is 0 in the last and else at most the tuples still to come. PS_OK with op->value
 * set, or broken. */
static int take_range(remote_stage *r, connection *c, uint64_t id, ps_frame *answer, ps_op *op) {
    size_t tuple_size = r->base.tuple_size;
    uint32_t got = 0;
    for (;;) {
        uint32_t n = answer->payload_length / (uint32_t)tuple_size;
        if (answer->status != PS_OK || answer->payload_length % tuple_size || n == 0 || n > op->count - got ||
            answer->value < 0 || answer->value > op->count - got - n)
            return broken(r, c, "a malformed answer to observe_range", PS_EINVAL);
        memcpy((unsigned char *)op->out + (size_t)got * tuple_size, answer->payload, answer->payload_length);
        got += n;
        if (answer->value == 0) break;
        int rc = wait_answer(r, c, c->socket, id, r->timeout_ns, answer);
        if (rc != PS_OK) return broken(r, c, "no answer", rc);
    }
    op->value = got;
    return PS_OK;
}

/* After a failure dropped the pipelined requests (or a broken connection gave them up): of the
 * `kept` tuples of earlier calls not answered when a call began, with `answered` answered, those
 * that did not take effect (op->dropped: its caller, a move_many waiting in slices or a batch,
 * counts off those it had counted). */
static void count_dropped_before(const connection *c, ps_op *op, uint64_t kept, uint64_t answered) {
    uint64_t since = c->answered - answered;
    op->dropped = since < kept ? (int64_t)(kept - since) : 0;
}

/* The same for a call that pipelined `sent` tuples of its own after them: op->done becomes those of
 * them that took effect, the first ones. */
static void count_dropped(const connection *c, ps_op *op, uint64_t kept, uint64_t answered, uint32_t sent) {
    uint64_t since = c->answered - answered;
    op->done = since > kept ? (uint32_t)(since - kept < sent ? since - kept : sent) : 0;
    count_dropped_before(c, op, kept, answered);
}

/* One operation of at most one tuple in: sent in slices of at most timeout_ms, each answered,
 * until it is done or the caller's timeout ends. The table says what travels: the tuple it takes
 * in, how many it asks back (an observe_range: its answer streams in frames), the one it gives
 * back, its value. An answer's value is the kind's value, or else the tuples of the request that
 * took effect: a slice that ended with its move done goes on with the rest (an exchange whose
 * move is done, with its observe). */
static int round_trips(ps_link *link, ps_op *op) {
    remote_stage *r = remote_of(link);
    connection *c = &r->connections[link->slot];
    if (c->failed) return refuse_broken(r, c, op);
    size_t tuple_size = r->base.tuple_size;
    ps_op_kind sending = op->kind;
    int64_t deadline = ps_deadline(op->timeout_ns);
    int64_t moves_due = ps_held_moves_due(op); /* pipelined moves before it */
    uint64_t kept = c->pipeline.tuples, answered = c->answered;
    for (;;) {
        int rc = resume(r, c);
        uint32_t shape = ps_op_kinds[sending].shape;
        uint32_t n = shape & PS_OP_TUPLE_IN ? 1 - op->done : 0;
        int64_t slice = shape & PS_OP_WAITS ? slice_by(r, deadline) : server_slice(r);
        const void *payload = n ? op->in : NULL;
        size_t payload_length = (size_t)n * tuple_size;
        unsigned char count[PS_WIRE_COUNT];
        if (shape & PS_OP_TUPLES_OUT) {
            ps_wire_put_u32(op->count, count);
            payload = count;
            payload_length = sizeof count;
        }
        int behind = c->pipeline.count > 0;
        uint64_t id = 0;
        if (rc == PS_OK && !(id = send_request(r, c, c->socket, ps_op_kinds[sending].wire, op->argument, slice,
                                               payload, payload_length, 0, behind)))
            rc = broken(r, c, "cannot send", PS_EREMOTE);
        /* Pipelined moves went first: their answers come first. Sending before reading them
         * lets a move and the observe after it share one round trip. */
        if (rc == PS_OK && behind) rc = drain(r, c, 0, id, moves_due);
        if (rc == SEND_AGAIN) continue;
        if (rc != PS_OK && rc != PS_ETIMEDOUT) count_dropped_before(c, op, kept, answered);
        if (rc != PS_OK) return rc;
        ps_frame answer;
        rc = wait_answer(r, c, c->socket, id, r->timeout_ns, &answer);
        if (rc != PS_OK) return broken(r, c, "no answer", rc);
        int status = answer.status;
        if (shape & PS_OP_TUPLE_OUT && status == PS_OK) {
            if (answer.payload_length != tuple_size)
                return broken(r, c, "an answer whose tuple is not of the element's size", PS_EINVAL);
            memcpy(op->out, answer.payload, tuple_size);
        }
        if (shape & PS_OP_TUPLES_OUT && status == PS_OK && (rc = take_range(r, c, id, &answer, op)) != PS_OK)
            return rc;
        take_explanation(r, &answer);
        if (shape & PS_OP_VALUE_OUT || status == PS_EAXED || (shape & PS_OP_TUPLES_OUT && status != PS_OK))
            op->value = answer.value; /* EAXED: the first live index */
        if (status == PS_EAXED)
            ps_axe_point_raise(&r->axe_known, answer.value);
        else if (n && (status == PS_OK || answer.value == 1)) op->done = 1;
        if (sending == PS_OP_EXCHANGE && op->done) sending = PS_OP_OBSERVE; /* what is left of it */
        if (status == PS_ETIMEDOUT && ps_remaining(deadline) != 0) continue; /* time is left */
        return status;
    }
}

/* Tuples in (a move_many), streamed: frames of at most ps_wire_batch_tuples go out up to
 * STREAM_FRAMES ahead of their answers, each after a stream's first marked as continuing it, all
 * with the stream's one slice: the server ends the whole stream within it. It runs a continuing
 * frame only when the frame before it took effect whole (wire.md, MOVE_MANY), so the tuples take
 * effect in order, each once: at the first frame that did not (a slice that ended, a failure),
 * the frames after it come back not run, and what is left starts a new stream while the caller's
 * timeout lasts. So n tuples cost one round trip, not one per frame. */
enum { STREAM_FRAMES = 4 };

static int stream_tuples(ps_link *link, ps_op *op) {
    remote_stage *r = remote_of(link);
    connection *c = &r->connections[link->slot];
    if (c->failed) return refuse_broken(r, c, op);
    size_t tuple_size = r->base.tuple_size;
    uint32_t per_frame = (uint32_t)ps_wire_batch_tuples(tuple_size);
    int64_t deadline = ps_deadline(op->timeout_ns);
    for (;;) {
        uint32_t start = op->done, sent = start, answered = start, in_flight = 0;
        uint64_t oldest = 0; /* the request id of the oldest frame not answered yet (ids run on by one) */
        int status = PS_OK, cut = 0;
        int64_t slice = slice_by(r, deadline);
        while (in_flight || (!cut && sent < op->count)) {
            while (!cut && sent < op->count && in_flight < STREAM_FRAMES) {
                uint32_t n = op->count - sent < per_frame ? op->count - sent : per_frame;
                uint64_t id = send_request(r, c, c->socket, ps_op_kinds[op->kind].wire,
                                           sent == start ? PS_WIRE_STREAM_STARTS : PS_WIRE_STREAM_CONTINUES, slice,
                                           (const unsigned char *)op->in + (size_t)sent * tuple_size,
                                           (size_t)n * tuple_size, 0, 0);
                if (!id) return broken(r, c, "cannot send", PS_EREMOTE);
                if (in_flight++ == 0) oldest = id;
                sent += n;
            }
            uint32_t n = op->count - answered < per_frame ? op->count - answered : per_frame;
            ps_frame answer;
            int rc = wait_answer(r, c, c->socket, oldest++, r->timeout_ns, &answer);
            if (rc != PS_OK) return broken(r, c, "no answer", rc);
            in_flight--;
            answered += n;
            if (cut) { /* a frame after the cut one: the server must not have run it */
                if (answer.status != PS_ESTATE || answer.value != 0)
                    return broken(r, c, "a frame after a cut one of move_many was run", PS_EINVAL);
                continue;
            }
            if (answer.status == PS_OK ? answer.value != n : answer.value < 0 || answer.value > n)
                return broken(r, c, "a malformed answer to move_many", PS_EINVAL);
            op->done += (uint32_t)answer.value;
            status = answer.status;
            take_explanation(r, &answer);
            cut = status != PS_OK;
            if (cut) atomic_fetch_add_explicit(&r->streams_cut, 1, memory_order_relaxed);
        }
        if (!cut) return PS_OK;
        if (status == PS_ETIMEDOUT && ps_remaining(deadline) != 0) continue; /* time is left */
        return status;
    }
}

/* A pipelined request this soon after the one before is taken as one of a burst: it leaves marked
 * to be followed by more (see send_direct), which may hold it back until the next one. One that
 * comes alone leaves at once (a batch's timed send), and takes what waits before it along. */
static const int64_t BURST_NS = 100000;

/* One request sent without waiting for its answer, kept until it is answered, once fewer than
 * `window` are not answered yet, by `deadline` (pipelining: moves, and the frames of a move_many,
 * with window > 1); any other operation reads their answers first. `more`: the call sends more
 * (a move_many's frames but its last). PS_ETIMEDOUT: not sent. */
static int send_pipelined(remote_stage *r, connection *c, uint8_t op, int64_t argument, int64_t deadline,
                          const void *payload, uint32_t tuples, int more) {
    int rc = resume(r, c);
    if (rc == PS_OK) rc = drain(r, c, r->window - 1, 0, deadline);
    if (rc != PS_OK) return rc;
    size_t length = (size_t)tuples * r->base.tuple_size;
    if (ps_pipeline_push(&c->pipeline, r->window, op, argument, payload, length, tuples) != PS_OK) return PS_ENOMEM;
    if (c->pipeline.count == 1) c->oldest_pending = c->next_request + 1;
    int64_t now = ps_now_ns(), before = c->last_pipelined;
    c->last_pipelined = now;
    return send_pending(r, c, ps_pipeline_at(&c->pipeline, c->pipeline.count - 1), argument, c->pipeline.count > 1,
                        more || now - before < BURST_NS);
}

/* A move with window > 1. */
static int pipelined_move(ps_link *link, ps_op *op) {
    remote_stage *r = remote_of(link);
    connection *c = &r->connections[link->slot];
    if (c->failed) return refuse_broken(r, c, op);
    uint64_t kept = c->pipeline.tuples, answered = c->answered;
    int rc = send_pipelined(r, c, ps_op_kinds[PS_OP_MOVE].wire, 0, ps_deadline(op->timeout_ns), op->in, 1, 0);
    if (rc != PS_OK && rc != PS_ETIMEDOUT) count_dropped(c, op, kept, answered, 0);
    return rc;
}

/* A move_many with window > 1: its frames go out as one stream, pipelined (an asynchronous call,
 * ARMI's), each kept until it is answered. A frame that could not be sent by the caller's deadline
 * returns PS_ETIMEDOUT with the tuples of those before it taken (they will take effect in order, or
 * a failure will say they did not). */
static int pipelined_stream(ps_link *link, ps_op *op) {
    remote_stage *r = remote_of(link);
    connection *c = &r->connections[link->slot];
    uint32_t frame_tuples = (uint32_t)ps_wire_batch_tuples(r->base.tuple_size);
    int64_t deadline = ps_deadline(op->timeout_ns);
    uint64_t kept = c->pipeline.tuples, answered = c->answered;
    if (c->failed) return refuse_broken(r, c, op);
    int rc = PS_OK;
    while (rc == PS_OK && op->done < op->count) {
        uint32_t n = op->count - op->done < frame_tuples ? op->count - op->done : frame_tuples;
        rc = send_pipelined(r, c, ps_op_kinds[op->kind].wire, op->done ? PS_WIRE_STREAM_CONTINUES : PS_WIRE_STREAM_STARTS,
                            deadline, (const unsigned char *)op->in + (size_t)op->done * r->base.tuple_size, n,
                            op->done + n < op->count);
        if (rc == PS_OK) op->done += n;
    }
    if (rc != PS_OK && rc != PS_ETIMEDOUT) count_dropped(c, op, kept, answered, op->done);
    return rc;
}

/* A range larger than one answer may carry is refused before it is sent. */
static int range_refused(remote_stage *r, const ps_op *op) {
    uint32_t most = ps_op_range_max(r->base.tuple_size);
    if (op->count >= 1 && op->count <= most) return 0;
    char detail[160];
    snprintf(detail, sizeof detail, "asked for %u tuples; one answer carries 1 to %u tuples of %zu bytes (%d MiB)",
             op->count, most, r->base.tuple_size, PS_OP_RANGE_MAX_BYTES >> 20);
    explain(r, "observe_range", detail);
    return 1;
}

/* A direct connection reads a range's frames into a buffer of up to RANGE_READ_BYTES (kept for the
 * caller's later ranges), so that they cost fewer reads; without one, they come a frame a read. */
static void widen_for_range(remote_stage *r, connection *c, uint32_t count) {
    size_t per_frame = ps_wire_batch_tuples(r->base.tuple_size), frames = (count + per_frame - 1) / per_frame;
    size_t bytes = (size_t)count * r->base.tuple_size + frames * PS_WIRE_HEADER;
    if (!c->socket && !c->failed) ps_channel_widen(&c->channel, bytes < RANGE_READ_BYTES ? bytes : RANGE_READ_BYTES);
}

static int remote_call(ps_link *link, ps_op *op) {
    if (remote_of(link)->connections[link->slot].forks != ps_forks()) {
        explain(remote_of(link), "this process did not make the handle", "a forked child inherits its parent's "
                "connections, which stay the parent's: the child builds paths of its own");
        return PS_ESTATE; /* nothing was sent: not a failure of the remote, whose answer could be lost */
    }
    if (op->kind == PS_OP_MOVE && remote_of(link)->window > 1) return pipelined_move(link, op);
    if (ps_op_kinds[op->kind].shape & PS_OP_TUPLES_OUT) {
        if (range_refused(remote_of(link), op)) return PS_EINVAL;
        widen_for_range(remote_of(link), &remote_of(link)->connections[link->slot], op->count);
    }
    if (ps_op_kinds[op->kind].shape & PS_OP_TUPLES_IN)
        return !op->count ? PS_OK : remote_of(link)->window > 1 ? pipelined_stream(link, op) : stream_tuples(link, op);
    int rc = round_trips(link, op);
    if (op->kind == PS_OP_AXE && ps_axe_may_have_taken_effect(rc)) /* done, or its answer lost */
        ps_axe_point_raise(&remote_of(link)->axe_known, op->argument);
    return rc;
}

/* BUILD at the main endpoint: on PS_OK, c->handle_id is the link, link_endpoint its way in and
 * secret (direct transports) what its connection presents. */
static int build_link(remote_stage *r, connection *c, char *link_endpoint, unsigned char *secret) {
    const char *spec = spec_stage == &r->base ? spec_given : r->path_spec;
    if (strlen(spec) > PS_SPEC_MAX) {
        explain(r, "the path remainder is too long", "more than a BUILD carries");
        return PS_EINVAL;
    }
    ps_curve_client keys = {r->server_key, r->client_public, r->client_secret};
    ps_frame request = {PS_WIRE_BUILD, 0, ++c->next_request, 0, r->transport, 0, (const unsigned char *)spec,
                        (uint32_t)strlen(spec)}, answer;
    unsigned char payload[PS_WIRE_SECRET + MAX_ENDPOINT + ANSWER_TEXT_MAX];
    atomic_fetch_add_explicit(&r->requests, 1, memory_order_relaxed);
    int rc = ps_control_request(r->endpoint, &keys, &request, ps_now_ns() + r->timeout_ns, &answer, payload,
                                sizeof payload);
    if (rc == PS_OK) atomic_fetch_add_explicit(&r->answers, 1, memory_order_relaxed);
    size_t secret_length = r->transport == PS_TRANSPORT_ZMQ ? 0 : PS_WIRE_SECRET;
    if (rc == PS_EINTR) {
        explain(r, "no answer to BUILD", "the wait was given up (interrupted, or this process is exiting)");
        rc = PS_EREMOTE;
    } else if (rc == PS_EREMOTE || rc == PS_ENOMEM) {
        explain(r, "cannot send BUILD", zmq_strerror(zmq_errno()));
    } else if (rc != PS_OK) {
        char detail[96];
        snprintf(detail, sizeof detail, "within %lld ms (is the server up, and are the CURVE keys right?)",
                 (long long)(r->timeout_ns / 1000000));
        explain(r, "no answer to BUILD", detail);
        rc = PS_EREMOTE;
    } else if (answer.status != PS_OK) {
        char text[PS_STAGE_ERROR_MAX];
        explain(r, "the server refused the path", answer_text(&answer, text, sizeof text));
        rc = answer.status;
    } else if (answer.payload_length <= secret_length || answer.payload_length - secret_length >= MAX_ENDPOINT) {
        explain(r, "a malformed answer to BUILD", NULL);
        rc = PS_EREMOTE;
    } else {
        memcpy(secret, answer.payload, secret_length);
        snprintf(link_endpoint, MAX_ENDPOINT, "%.*s", (int)(answer.payload_length - secret_length),
                 (const char *)answer.payload + secret_length);
        ps_reachable_endpoint(r->endpoint, link_endpoint, MAX_ENDPOINT);
        c->handle_id = answer.handle_id;
    }
    return rc;
}

/* Opens the direct connection to the link and presents its secret: the transport's own
 * handshake, like ZeroMQ's, so not counted among the stage's requests. */
static int connect_direct(remote_stage *r, connection *c, const char *link_endpoint, const unsigned char *secret) {
    char error[300];
    int64_t deadline = ps_now_ns() + r->timeout_ns;
    if (ps_channel_connect(link_endpoint, ps_wire_link_frame_max(r->base.tuple_size), r->timeout_ns, deadline,
                           &c->channel, error, sizeof error) != PS_OK) {
        explain(r, "the link's direct connection", error);
        return PS_EREMOTE;
    }
    ps_frame hello = {PS_WIRE_CONNECT, 0, ++c->next_request, c->handle_id, 0, 0, secret, PS_WIRE_SECRET}, answer;
    size_t length = ps_wire_encode(&hello, c->request, c->capacity);
    int rc = ps_channel_send(&c->channel, c->request, length, 0) == PS_OK ? PS_ETIMEDOUT : PS_EREMOTE;
    for (int64_t end = 1; rc == PS_ETIMEDOUT && end < deadline;) {
        end = ps_interruptible_slice_end(deadline);
        rc = end ? ps_channel_receive(&c->channel, end, &answer) : PS_EINTR;
    }
    if (rc == PS_OK && answer.request_id == hello.request_id && answer.status == PS_OK) return PS_OK;
    char detail[200];
    if (rc == PS_OK) {
        explain(r, "the server refused the link's direct connection", answer_text(&answer, detail, sizeof detail));
    } else {
        describe_failure(r, rc, detail, sizeof detail);
        explain(r, "no answer to CONNECT", detail);
    }
    return PS_EREMOTE;
}

/* A connection's request buffer: a BUILD's path spec, or the longest frame of its link. */
static size_t request_capacity(size_t tuple_size) {
    size_t link_frame = ps_wire_link_frame_max(tuple_size);
    return link_frame > PS_WIRE_HEADER + PS_SPEC_MAX ? link_frame : PS_WIRE_HEADER + PS_SPEC_MAX;
}

/* Connects a new caller: BUILD at the main endpoint, then its own way to its link. */
static int remote_attach(ps_stage *stage, uint32_t slot) {
    remote_stage *r = (remote_stage *)stage;
    connection *c = &r->connections[slot];
    c->capacity = request_capacity(r->base.tuple_size);
    c->request = malloc(c->capacity);
    if (!c->request) return PS_ENOMEM;
    c->channel = (ps_channel){.fd = -1};
    c->forks = ps_forks();
    zmq_msg_init(&c->message);
    char link_endpoint[MAX_ENDPOINT];
    unsigned char secret[PS_WIRE_SECRET];
    int rc = build_link(r, c, link_endpoint, secret);
    if (rc != PS_OK) return rc;
    if (r->transport != PS_TRANSPORT_ZMQ) return connect_direct(r, c, link_endpoint, secret);
    c->socket = open_socket(r, link_endpoint);
    if (!c->socket) {
        explain(r, "cannot connect to the link endpoint", link_endpoint);
        return PS_EREMOTE;
    }
    return PS_OK;
}

static int remote_counters(ps_stage *stage, ps_counter *out, int max) {
    remote_stage *r = (remote_stage *)stage;
    if (max < 6) return 0;
    out[0] = (ps_counter){"requests", atomic_load(&r->requests)};
    out[1] = (ps_counter){"answers", atomic_load(&r->answers)};
    out[2] = (ps_counter){"failures", atomic_load(&r->failures)};
    out[3] = (ps_counter){"streams_cut", atomic_load(&r->streams_cut)};
    out[4] = (ps_counter){"resent", atomic_load(&r->resent)};
    out[5] = (ps_counter){"dropped", atomic_load(&r->dropped)};
    return 6;
}

/* Tells the server the caller's link is done (best effort), then closes the connection; the
 * slot is then ready for a new caller. */
static void remote_detach(ps_stage *stage, uint32_t slot) {
    remote_stage *r = (remote_stage *)stage;
    connection *c = &r->connections[slot];
    if (!c->request) return; /* never attached, or detached already */
    /* A forked child's copy of its parent's connection only closes: the link is the parent's. */
    int open = (c->socket || c->channel.fd >= 0) && c->forks == ps_forks();
    int rc = open && !c->failed ? resume(r, c) : PS_OK;
    if (rc == PS_OK && open && !c->failed) rc = drain(r, c, 0, 0, ps_deadline(RELEASE_WAIT_MS * 1000000LL));
    if (rc != PS_OK && !c->failed) { /* nobody is left to tell */
        char why[PS_STAGE_ERROR_MAX];
        if (rc == PS_ETIMEDOUT) /* held back: not sent again */
            ps_stage_explain(&r->base, "remote %s: %llu tuples of pipelined moves did not take effect: they still "
                             "waited at the server %d ms after release", r->endpoint,
                             (unsigned long long)c->pipeline.tuples, RELEASE_WAIT_MS);
        ps_stage_error(&r->base, why, sizeof why);
        fprintf(stderr, "paths: on release, %s\n", why);
    }
    if (open && rc == PS_OK) {
        uint64_t id = send_request(r, c, c->socket, PS_WIRE_RELEASE, 0, 0, NULL, 0, 0, 0);
        ps_frame answer;
        if (id) wait_answer(r, c, c->socket, id, (int64_t)RELEASE_WAIT_MS * 1000000, &answer);
    }
    if (c->socket) zmq_close(c->socket);
    ps_channel_close(&c->channel);
    zmq_msg_close(&c->message);
    free(c->request);
    ps_pipeline_free(&c->pipeline);
    memset(c, 0, sizeof *c);
}

static void remote_destroy(ps_stage *stage) {
    remote_stage *r = (remote_stage *)stage;
    uint32_t slots = atomic_load(&r->base.links);
    for (uint32_t i = 0; r->connections && i < slots && i < PS_PASS_THROUGH_CALLERS; i++) remote_detach(stage, i);
    free(r->connections);
    free(r->path_spec);
}

/* What the stage holds from its creation: a connection per caller slot and the path spec. Each
 * caller that attaches adds its own buffers (a request, and a direct link's two channel
 * buffers): they come with that caller, as its link, which a server holds its clients to by
 * number (a share of links per client), not in the stage's footprint. */
static size_t remote_footprint(const ps_params *params, size_t tuple_size) {
    (void)tuple_size;
    return sizeof(remote_stage) + strlen(ps_params_str(params, "path")) + 1 +
           PS_PASS_THROUGH_CALLERS * sizeof(connection);
}

static int remote_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                         ps_stage **out, char *error, size_t error_size) {
    if (below) {
        snprintf(error, error_size, "stage 'remote': the rest of the path is built on the server, not below it");
        return PS_EINVAL;
    }
    ps_tuple_format format;
    if (ps_tuple_format_parse(ps_params_str(params, "format"), &format, error, error_size) != 0) return PS_EFORMAT;
    const char *host = ps_params_str(params, "host");
    const char *key = ps_params_str(params, "curve_server_key");
    uint8_t key_bytes[32];
    if (*key && (strlen(key) != 40 || !zmq_z85_decode(key_bytes, key))) {
        snprintf(error, error_size, "stage 'remote': curve_server_key must be 40 Z85 characters (a public key "
                 "that paths serve --keygen wrote), got '%.60s'", key);
        return PS_EINVAL;
    }
    /* Not given: direct, unless the link is to be encrypted (CURVE travels only over ZeroMQ). */
    const char *proto = *ps_params_str(params, "proto") ? ps_params_str(params, "proto") : *key ? "zmq" : "tcp";
    int in_process = strcmp(proto, "inproc") == 0;
    if (in_process && strstr(host, "://") && strncmp(host, "inproc://", 9) != 0) {
        snprintf(error, error_size, "stage 'remote': proto 'inproc' reaches a server in this process only: "
                                    "expected host inproc://NAME or NAME, got '%s'", host);
        return PS_EINVAL;
    }
    int64_t batch = ps_params_int(params, "batch");
    /* Refused where it would do nothing as the user wrote it (a proto a run's CURVE key implies
     * leaves it unused, as on any ZeroMQ link). */
    int direct = strcmp(proto, "tcp") == 0 || strcmp(proto, "ipc") == 0 || !*ps_params_str(params, "proto");
    if (batch > 1 && (!direct || ps_params_int(params, "window") == 1)) {
        snprintf(error, error_size, "stage 'remote': batch=%lld puts pipelined moves into one write, so it needs %s%s",
                 (long long)batch, direct ? "window > 1 (moves sent before their answers are read)"
                                          : "a direct transport: proto tcp or ipc, not ", direct ? "" : proto);
        return PS_EINVAL;
    }
    remote_stage *r = calloc(1, sizeof *r);
    if (!r) return PS_ENOMEM;
    r->transport = strcmp(proto, "tcp") == 0 ? PS_TRANSPORT_TCP : strcmp(proto, "ipc") == 0 ? PS_TRANSPORT_IPC
                                                                                            : PS_TRANSPORT_ZMQ;
    /* A bare host is reached by the ZeroMQ transport of the proto's name. */
    const char *scheme = in_process ? "inproc" : r->transport == PS_TRANSPORT_IPC ? "ipc" : "tcp";
    if (strstr(host, "://")) snprintf(r->endpoint, sizeof r->endpoint, "%s", host);
    else snprintf(r->endpoint, sizeof r->endpoint, "%s://%s", scheme, host);
    if (!ps_endpoint_whole(r->endpoint)) {
        snprintf(error, error_size, "stage 'remote': host '%.200s' names no server to reach: expected "
                 "tcp://HOST:PORT (or HOST:PORT; PORT 1 to 65535), ipc://NAME, inproc://NAME, or in a run the name "
                 "of a node of its map", host);
        free(r);
        return PS_EINVAL;
    }
    if (!ps_endpoint_trusted(context, r->endpoint)) {
        snprintf(error, error_size, "stage 'remote': this server reaches only the endpoints it trusts (the nodes "
                 "of its map, paths serve --allow-remote PATTERN), and '%.200s' is not one", r->endpoint);
        free(r);
        return PS_EINVAL;
    }
    if (context->curve_client_public && context->curve_client_secret) {
        snprintf(r->client_public, sizeof r->client_public, "%s", context->curve_client_public);
        snprintf(r->client_secret, sizeof r->client_secret, "%s", context->curve_client_secret);
    }
    r->timeout_ns = ps_params_int(params, "timeout_ms") * 1000000;
    r->window = (uint32_t)ps_params_int(params, "window");
    r->batch = r->transport == PS_TRANSPORT_ZMQ ? 1 : (uint32_t)batch;
    snprintf(r->server_key, sizeof r->server_key, "%s", key);
    r->path_spec = strdup(ps_params_str(params, "path"));
    r->connections = calloc(PS_PASS_THROUGH_CALLERS, sizeof *r->connections);
    int rc = ps_stage_init(&r->base, &ps_kind_remote, &format, PS_PASS_THROUGH_CALLERS, NULL);
    r->base.axe_point = &r->axe_known; /* every link reaches the one element the remainder names */
    if (rc == PS_OK && (!r->path_spec || !r->connections)) rc = PS_ENOMEM;
    if (rc == PS_OK && strlen(r->path_spec) > PS_SPEC_MAX) {
        snprintf(error, error_size, "stage 'remote': the path remainder is longer than %d bytes", PS_SPEC_MAX);
        rc = PS_EINVAL;
    }
    if (rc != PS_OK) {
        remote_destroy(&r->base);
        ps_stage_abandon(&r->base);
        return rc;
    }
    *out = &r->base;
    return PS_OK;
}

static const ps_param_spec REMOTE_PARAMS[] = {
    {"host", PS_PARAM_STR, 1, NULL, 0, -1, NULL,
     "the server's main (ZeroMQ) endpoint (tcp://127.0.0.1:7000), or host:port, or an ipc/inproc name", PS_PARAM_GIVEN},
    {"proto", PS_PARAM_STR, 0, NULL, 0, -1, "tcp|ipc|zmq|inproc",
     "how operations travel: tcp or ipc (a direct socket per link; not encrypted), zmq (ZeroMQ; with CURVE "
     "when curve_server_key is set), inproc (ZeroMQ to a server in this process). Not given: tcp, or zmq "
     "when curve_server_key is set", PS_PARAM_GIVEN},
    {"timeout_ms", PS_PARAM_INT, 0, "10000", 1, 3600000, NULL, "a server silent this long is taken as gone",
     PS_PARAM_WAIT_MS},
    {"window", PS_PARAM_INT, 0, "1", 1, 1024, NULL,
     "requests of moves and move_many sent before their answers are read (pipelining)", PS_PARAM_GIVEN},
    {"batch", PS_PARAM_INT, 0, "1", 1, 1024, NULL,
     "direct transports (tcp, ipc) with window > 1 (refused elsewhere): pipelined moves that leave in one write; "
     "a move waits in the caller's buffer until `batch` moves do, or until the caller's next other request or "
     "wait for an answer", PS_PARAM_GIVEN},
    {"curve_server_key", PS_PARAM_STR, 0, "", 0, -1, NULL, "the server's CURVE public key (Z85), '' for none",
     PS_PARAM_GIVEN},
    {"format", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the element's format (filled in by build_path)", PS_PARAM_BUILT},
    {"path", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the path remainder sent to the server (filled in by build_path)",
     PS_PARAM_BUILT},
};

const ps_stage_kind ps_kind_remote = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "remote",
    .doc = "Forwards operations to a server that hosts the rest of the path (direct TCP by default).",
    .params = REMOTE_PARAMS,
    .param_count = sizeof REMOTE_PARAMS / sizeof REMOTE_PARAMS[0],
    .role = PS_PASS_THROUGH,
    .needs_below = 0,
    .rest_at = "host",
    .create = remote_create,
    .call = remote_call,
    .footprint = remote_footprint,
    .counters = remote_counters,
    .destroy = remote_destroy,
    .attach = remote_attach,
    .detach = remote_detach,
};
