/* core_ops_loop.c — tight single-thread loops of moves and observes: on an element, and through a
 * path. */
#include "kernels.h"
#include "latencies.h"

#include <stdlib.h>

#include "pastset.h"

double ps_kernel_core_pairs_ns(int64_t pairs) {
    ps_space *space = ps_space_new();
    ps_element *e = NULL;
    if (!space || ps_enter(space, "core-ops", "q", &e) != PS_OK || pairs <= 0) {
        ps_space_free(space);
        return -1.0;
    }
    int64_t out = 0, checksum = 0;
    int64_t start = ps_now_ns();
    for (int64_t i = 0; i < pairs; i++) {
        ps_move(e, &i, PS_FOREVER);
        ps_observe(e, &out, NULL, PS_FOREVER);
        checksum += out;
        /* Keep the log from growing without bound, as a long-running consumer would. */
        if ((i & 4095) == 4095) ps_axe(e, i + 1);
    }
    int64_t elapsed = ps_now_ns() - start;
    ps_space_free(space);
    if (checksum != pairs * (pairs - 1) / 2) return -1.0;
    return (double)elapsed / (double)pairs;
}

/* The element's last() through the link, or -1. */
static int64_t last_of(ps_link *link) {
    ps_op last = {.kind = PS_OP_LAST};
    return ps_link_call(link, &last) == PS_OK ? last.value : -1;
}

/* Moves i, then observes it back, through the link: a fresh operation each, as paths_move makes
 * one. Whether both went and the tuple was i. */
static inline int pair_through(ps_link *link, int64_t i, int64_t timeout_ns) {
    int64_t out = 0;
    ps_op move = {.kind = PS_OP_MOVE, .in = &i, .timeout_ns = timeout_ns};
    if (ps_link_call(link, &move) != PS_OK) return 0;
    ps_op observe = {.kind = PS_OP_OBSERVE, .out = &out, .timeout_ns = timeout_ns};
    return ps_link_call(link, &observe) == PS_OK && out == i;
}

/* Pairs through the link, each `axe_every` (a power of two; 0: never) followed by an axe of the
 * log, as ps_kernel_core_pairs_ns does every 4096. */
static double link_pairs_ns(ps_link *link, int64_t pairs, int64_t axe_every, int64_t timeout_ns) {
    int64_t base = axe_every ? last_of(link) : 0; /* the index of this call's first move */
    if (base < 0) return -1.0;
    int64_t start = ps_now_ns();
    for (int64_t i = 0; i < pairs; i++) {
        if (!pair_through(link, i, timeout_ns)) return -1.0;
        if (axe_every && (i & (axe_every - 1)) == axe_every - 1) {
            ps_op axe = {.kind = PS_OP_AXE, .argument = base + i + 1, .timeout_ns = timeout_ns};
            if (ps_link_call(link, &axe) != PS_OK) return -1.0;
        }
    }
    return (double)(ps_now_ns() - start) / (double)pairs;
}

double ps_kernel_link_pairs_ns(ps_link *link, int64_t pairs, int64_t timeout_ns) {
    return link_pairs_ns(link, pairs, 0, timeout_ns);
}

double ps_kernel_link_axed_pairs_ns(ps_link *link, int64_t pairs, int64_t timeout_ns) {
    return link_pairs_ns(link, pairs, 4096, timeout_ns);
}

double ps_kernel_link_pair_median_ns(ps_link *link, int64_t pairs, int64_t timeout_ns) {
    double *latencies = malloc((size_t)pairs * sizeof *latencies);
    if (!latencies) return -1.0;
    for (int64_t i = 0; i < pairs; i++) {
        int64_t begin = ps_now_ns();
        if (!pair_through(link, i, timeout_ns)) {
            free(latencies);
            return -1.0;
        }
        latencies[i] = (double)(ps_now_ns() - begin);
    }
    double median = median_of(latencies, pairs);
    free(latencies);
    return median;
}

double ps_kernel_link_moves_ns(ps_link *link, int64_t moves, int64_t timeout_ns) {
    int64_t before = last_of(link);
    if (moves <= 0 || before < 0) return -1.0;
    int64_t start = ps_now_ns();
    for (int64_t i = 0; i < moves; i++) {
        ps_op move = {.kind = PS_OP_MOVE, .in = &i, .timeout_ns = timeout_ns};
        if (ps_link_call(link, &move) != PS_OK) return -1.0;
    }
    /* last() answers after every earlier move: through a remote stage, once all pipelined moves
     * are acknowledged. */
    int64_t after = last_of(link);
    int64_t elapsed = ps_now_ns() - start;
    if (after - before < moves) return -1.0;
    return (double)elapsed / (double)moves;
}

double ps_kernel_link_batches_ns(ps_link *link, int64_t moves, uint32_t batch, int64_t timeout_ns) {
    int64_t before = last_of(link);
    int64_t *tuples = malloc((size_t)batch * sizeof *tuples);
    if (moves <= 0 || batch == 0 || before < 0 || !tuples) {
        free(tuples);
        return -1.0;
    }
    int64_t start = ps_now_ns(), sent = 0;
    int rc = PS_OK;
    while (sent < moves && rc == PS_OK) {
        uint32_t n = moves - sent < batch ? (uint32_t)(moves - sent) : batch;
        for (uint32_t k = 0; k < n; k++) tuples[k] = sent + k;
        ps_op many = {.kind = PS_OP_MOVE_MANY, .in = tuples, .count = n, .timeout_ns = timeout_ns};
        rc = ps_link_call(link, &many);
        sent += n;
    }
    int64_t after = last_of(link);
    int64_t elapsed = ps_now_ns() - start;
    free(tuples);
    if (rc != PS_OK || after - before < moves) return -1.0;
    return (double)elapsed / (double)moves;
}

double ps_kernel_link_moves_then_observe_ns(ps_link *link, int64_t k, int64_t rounds, int64_t timeout_ns) {
    int64_t next = last_of(link), out = -1;
    if (k <= 0 || rounds <= 0 || next < 0) return -1.0;
    int64_t start = ps_now_ns();
    for (int64_t r = 0; r < rounds; r++) {
        for (int64_t i = 0; i < k; i++, next++) {
            ps_op move = {.kind = PS_OP_MOVE, .in = &next, .timeout_ns = timeout_ns};
            if (ps_link_call(link, &move) != PS_OK) return -1.0;
        }
        ps_op observe = {.kind = PS_OP_OBSERVE_AT, .argument = next - 1, .out = &out, .timeout_ns = timeout_ns};
        if (ps_link_call(link, &observe) != PS_OK || out != next - 1) return -1.0;
    }
    return (double)(ps_now_ns() - start) / (double)rounds;
}

double ps_kernel_link_indexed_reads_ns(ps_link *link, int64_t reads, int64_t tuples, int64_t timeout_ns) {
    if (reads <= 0 || tuples <= 0) return -1.0;
    int64_t out = -1, start = ps_now_ns();
    for (int64_t r = 0, i = 0; r < reads; r++, i = i + 1 == tuples ? 0 : i + 1) {
        ps_op read = {.kind = PS_OP_OBSERVE_AT, .argument = i, .out = &out, .timeout_ns = timeout_ns};
        if (ps_link_call(link, &read) != PS_OK || out != i) return -1.0;
    }
    return (double)(ps_now_ns() - start) / (double)reads;
}
