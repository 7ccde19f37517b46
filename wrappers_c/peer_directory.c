/* peer_directory.c — the listed allreduce members: a short list under a lock (a few per run). */
#include "peer_directory.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pastset.h"

typedef struct member {
    char group[PS_GROUP_MAX + 1];
    uint32_t rank;
    char endpoint[PS_PEER_ENDPOINT_MAX];
    unsigned char secret[PS_WIRE_SECRET];
    uint64_t shape;
    struct member *next;
} member;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static member *members;

static member **place_of(const char *group, uint32_t rank) {
    member **at = &members;
    while (*at && ((*at)->rank != rank || strcmp((*at)->group, group) != 0)) at = &(*at)->next;
    return at;
}

int ps_peer_list(const char *group, uint32_t rank, const char *endpoint, const unsigned char secret[PS_WIRE_SECRET],
                 uint64_t shape) {
    member *m = calloc(1, sizeof *m);
    if (!m) return PS_ENOMEM;
    strncpy(m->group, group, PS_GROUP_MAX);
    m->rank = rank;
    strncpy(m->endpoint, endpoint, PS_PEER_ENDPOINT_MAX - 1);
    memcpy(m->secret, secret, PS_WIRE_SECRET);
    m->shape = shape;
    pthread_mutex_lock(&lock);
    member **at = place_of(m->group, rank);
    int taken = *at != NULL;
    if (!taken) *at = m;
    pthread_mutex_unlock(&lock);
    if (taken) free(m);
    return taken ? PS_ESTATE : PS_OK;
}

void ps_peer_unlist(const char *group, uint32_t rank) {
    pthread_mutex_lock(&lock);
    member **at = place_of(group, rank);
    member *gone = *at;
    if (gone) *at = gone->next;
    pthread_mutex_unlock(&lock);
    free(gone);
}

int ps_peer_find(const char *group, uint32_t rank, char endpoint[PS_PEER_ENDPOINT_MAX],
                 unsigned char secret[PS_WIRE_SECRET], uint64_t *shape) {
    pthread_mutex_lock(&lock);
    member *m = *place_of(group, rank);
    if (m) {
        memcpy(endpoint, m->endpoint, PS_PEER_ENDPOINT_MAX);
        memcpy(secret, m->secret, PS_WIRE_SECRET);
        *shape = m->shape;
    }
    pthread_mutex_unlock(&lock);
    return m ? PS_OK : PS_ESTATE;
}
