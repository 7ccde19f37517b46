/* own_clock.c — a program's own function named as one of libpaths' internal ones (the clock its
 * waits read): libpaths keeps calling its own. */
#include <stdint.h>

int64_t ps_now_ns(void);
int64_t ps_now_ns(void) { return 42; }
