/* peer_directory.c — the listed allreduce members: a short list under a lock (a few per run). */
#include "peer_directory.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pastset.h"

typedef struct member {
    const void *owner;
    char group[PS_GROUP_MAX + 1];
    uint32_t rank;
    char endpoint[PS_PEER_ENDPOINT_MAX];
    unsigned char secret[PS_WIRE_SECRET];
    uint64_t shape;
    int broken;
    int64_t until;          /* a broken listing made after its member had joined: it goes then */
    unsigned char news[PS_PEER_NEWS];
    struct member *next;
} member;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static member *members;

static member **place_of(const char *group, uint32_t rank) {
    member **at = &members;
    while (*at && ((*at)->rank != rank || strcmp((*at)->group, group) != 0)) at = &(*at)->next;
    return at;
}

/* Whether a listing is still what its member says (a broken one past its time is not). */
static int live(const member *m) { return m && (!m->until || ps_now_ns() < m->until); }

/* Puts m where its group and rank are listed: in place of a member that broke its group, or with
 * `own` of owner's own; PS_ESTATE (m freed) when another member holds the place. */
static int place(member *m, int own) {
    pthread_mutex_lock(&lock);
    member **at = place_of(m->group, m->rank), *was = *at;
    int taken = live(was) && (own ? was->owner != m->owner : !was->broken);
    if (!taken) {
        m->next = was ? was->next : NULL;
        *at = m;
    }
    pthread_mutex_unlock(&lock);
    free(taken ? m : was);
    return taken ? PS_ESTATE : PS_OK;
}

static member *made(const void *owner, const char *group, uint32_t rank, uint64_t shape) {
    member *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->owner = owner;
    strncpy(m->group, group, PS_GROUP_MAX);
    m->rank = rank;
    m->shape = shape;
    return m;
}

int ps_peer_list(const void *owner, const char *group, uint32_t rank, const char *endpoint,
                 const unsigned char secret[PS_WIRE_SECRET], uint64_t shape) {
    member *m = made(owner, group, rank, shape);
    if (!m) return PS_ENOMEM;
    strncpy(m->endpoint, endpoint, PS_PEER_ENDPOINT_MAX - 1);
    memcpy(m->secret, secret, PS_WIRE_SECRET);
    return place(m, 0);
}

int ps_peer_list_broken(const void *owner, const char *group, uint32_t rank, uint64_t shape,
                        const unsigned char news[PS_PEER_NEWS], int64_t until) {
    member *m = made(owner, group, rank, shape);
    if (!m) return PS_ENOMEM;
    m->broken = 1;
    m->until = until;
    memcpy(m->news, news, PS_PEER_NEWS);
    return place(m, 1);
}

void ps_peer_unlist(const void *owner, const char *group, uint32_t rank) {
    pthread_mutex_lock(&lock);
    member **at = place_of(group, rank);
    member *gone = *at && (*at)->owner == owner ? *at : NULL;
    if (gone) *at = gone->next;
    pthread_mutex_unlock(&lock);
    free(gone);
}

int ps_peer_find(const char *group, uint32_t rank, char endpoint[PS_PEER_ENDPOINT_MAX],
                 unsigned char secret[PS_WIRE_SECRET], unsigned char news[PS_PEER_NEWS], uint64_t *shape) {
    pthread_mutex_lock(&lock);
    member *m = *place_of(group, rank);
    if (!live(m)) m = NULL;
    int rc = !m ? PS_ESTATE : m->broken ? PS_EREMOTE : PS_OK;
    if (m) {
        memcpy(endpoint, m->endpoint, PS_PEER_ENDPOINT_MAX);
        memcpy(secret, m->secret, PS_WIRE_SECRET);
        memcpy(news, m->news, PS_PEER_NEWS);
        *shape = m->shape;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
