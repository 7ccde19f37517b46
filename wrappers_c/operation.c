/* operation.c — the table of operation kinds: the one place a kind is listed. */
#include "operation.h"

const ps_op_info ps_op_kinds[PS_OP_KIND_COUNT] = {
    [PS_OP_MOVE] = {"move", 2, PS_OP_TUPLE_IN | PS_OP_WAITS},
    [PS_OP_OBSERVE] = {"observe", 3, PS_OP_TUPLE_OUT | PS_OP_WAITS},
    [PS_OP_OBSERVE_AT] = {"observe_at", 4, PS_OP_INDEX | PS_OP_TUPLE_OUT | PS_OP_WAITS},
    [PS_OP_FIRST] = {"first", 5, PS_OP_VALUE_OUT},
    [PS_OP_LAST] = {"last", 6, PS_OP_VALUE_OUT},
    [PS_OP_DELTA] = {"delta", 7, PS_OP_BOUND | PS_OP_VALUE_OUT},
    [PS_OP_AXE] = {"axe", 8, PS_OP_INDEX},
    [PS_OP_EXCHANGE] = {"exchange", 11, PS_OP_TUPLE_IN | PS_OP_TUPLE_OUT | PS_OP_WAITS | PS_OP_COMPOSED,
                        1u << PS_OP_MOVE | 1u << PS_OP_OBSERVE},
    [PS_OP_MOVE_MANY] = {"move_many", 13, PS_OP_TUPLES_IN | PS_OP_WAITS | PS_OP_COMPOSED, 1u << PS_OP_MOVE},
    [PS_OP_OBSERVE_RANGE] = {"observe_range", 14, PS_OP_INDEX | PS_OP_TUPLES_OUT | PS_OP_WAITS},
    [PS_OP_FLUSH] = {"flush", 15, PS_OP_WAITS},
    [PS_OP_FENCE] = {"fence", 16, PS_OP_WAITS},
};

int ps_op_kind_of_wire(unsigned code) {
    for (int k = 0; k < PS_OP_KIND_COUNT; k++)
        if (ps_op_kinds[k].wire == code) return k;
    return -1;
}
