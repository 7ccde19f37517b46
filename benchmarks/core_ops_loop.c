/* core_ops_loop.c — tight single-thread move+observe loops: on an element, and through a path. */
#include "kernels.h"

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

double ps_kernel_link_pairs_ns(ps_link *link, int64_t pairs, int64_t timeout_ns) {
    int64_t out = 0;
    int64_t start = ps_now_ns();
    for (int64_t i = 0; i < pairs; i++) {
        if (ps_link_move(link, &i, timeout_ns) != PS_OK) return -1.0;
        if (ps_link_observe(link, &out, timeout_ns) != PS_OK || out != i) return -1.0;
    }
    return (double)(ps_now_ns() - start) / (double)pairs;
}

double ps_kernel_link_moves_ns(ps_link *link, int64_t moves, int64_t timeout_ns) {
    int64_t before = 0, after = 0;
    if (moves <= 0 || ps_link_last(link, &before) != PS_OK) return -1.0;
    int64_t start = ps_now_ns();
    for (int64_t i = 0; i < moves; i++)
        if (ps_link_move(link, &i, timeout_ns) != PS_OK) return -1.0;
    /* last() answers after every earlier move: through a remote stage, once all pipelined moves
     * are acknowledged. */
    if (ps_link_last(link, &after) != PS_OK) return -1.0;
    int64_t elapsed = ps_now_ns() - start;
    if (after - before < moves) return -1.0;
    return (double)elapsed / (double)moves;
}
