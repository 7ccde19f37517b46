/* zap_handler.c — the process's ZAP handler: admits a CURVE client to a server that authenticates
 * its clients only with a key that server lists (see zap_handler.h). */
#include "zap_handler.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "pastset.h"
#include "zmq_context.h"

enum {
    KEY_BYTES = 32,
    POLL_MS = 100,     /* how often the handler looks at its stop flag */
    PARTS_MAX = 8,     /* a CURVE request has 7 parts (RFC 27); more are refused */
    BIND_TRIES = 100,  /* the endpoint of a handler just stopped may take a moment to be free */
};
static const char ENDPOINT[] = "inproc://zeromq.zap.01"; /* where ZeroMQ asks, by RFC 27 */

typedef struct domain {
    char name[PS_ZAP_DOMAIN_MAX];
    size_t count;
    unsigned char (*keys)[KEY_BYTES];  /* decoded, as the handshake presents them */
    char (*names)[PS_CLIENT_NAME_MAX];
    struct domain *next;
} domain;

/* lifecycle: held while the handler starts or stops. lock: guards the domains (the handler
 * takes it for each request; never held while waiting for the handler). */
static pthread_mutex_t lifecycle = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static domain *domains;
static pthread_t thread;
static int running;
static _Atomic int stopping;

static domain *find(const char *name) {
    for (domain *d = domains; d; d = d->next)
        if (strcmp(d->name, name) == 0) return d;
    return NULL;
}

static void free_domain(domain *d) {
    free(d->keys);
    free(d->names);
    free(d);
}

/* The answer to one request: status code, text, and the user id of an admitted client. */
static const char *decide(zmq_msg_t *parts, int count, const char **text, char *user_id) {
    *user_id = 0;
    if (count < 6 || zmq_msg_size(&parts[0]) != 3 || memcmp(zmq_msg_data(&parts[0]), "1.0", 3) != 0) {
        *text = "malformed ZAP request";
        return "500";
    }
    char name[PS_ZAP_DOMAIN_MAX];
    size_t length = zmq_msg_size(&parts[2]);
    if (length == 0) { /* a server that only proves itself: every client is admitted */
        *text = "OK";
        return "200";
    }
    snprintf(name, sizeof name, "%.*s", (int)(length < sizeof name ? length : sizeof name - 1),
             (const char *)zmq_msg_data(&parts[2]));
    int curve = zmq_msg_size(&parts[5]) == 5 && memcmp(zmq_msg_data(&parts[5]), "CURVE", 5) == 0;
    const char *status = "400";
    *text = "client key not allowed";
    pthread_mutex_lock(&lock);
    domain *d = length < sizeof name ? find(name) : NULL;
    if (d && curve && count == 7 && zmq_msg_size(&parts[6]) == KEY_BYTES) {
        for (size_t i = 0; i < d->count; i++) {
            if (memcmp(d->keys[i], zmq_msg_data(&parts[6]), KEY_BYTES) == 0) {
                snprintf(user_id, PS_CLIENT_NAME_MAX, "%s", d->names[i]);
                *text = "OK";
                status = "200";
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return status;
}

static void *serve(void *socket) {
    while (!atomic_load(&stopping)) {
        zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, POLL_MS) <= 0) continue;
        zmq_msg_t parts[PARTS_MAX];
        int count = 0, more = 1;
        while (more) { /* every part is read; beyond PARTS_MAX the request is refused */
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, socket, 0) < 0) {
                zmq_msg_close(&part);
                break;
            }
            more = zmq_msg_more(&part);
            if (count < PARTS_MAX) parts[count++] = part;
            else {
                zmq_msg_close(&part);
                count = PARTS_MAX + 1;
            }
        }
        int kept = count > PARTS_MAX ? PARTS_MAX : count;
        const char *text;
        char user_id[PS_CLIENT_NAME_MAX];
        const char *status = decide(parts, count > PARTS_MAX ? 0 : count, &text, user_id);
        const char *reply[6] = {"1.0", "", status, text, user_id, ""};
        size_t lengths[6] = {3, 0, 3, strlen(text), strlen(user_id), 0};
        zmq_msg_t *request_id = kept > 1 ? &parts[1] : NULL;
        for (int i = 0; i < 6; i++) {
            const void *data = i == 1 && request_id ? zmq_msg_data(request_id) : reply[i];
            size_t size = i == 1 && request_id ? zmq_msg_size(request_id) : lengths[i];
            zmq_send(socket, data, size, i < 5 ? ZMQ_SNDMORE : 0);
        }
        for (int i = 0; i < kept; i++) zmq_msg_close(&parts[i]);
    }
    zmq_close(socket);
    return NULL;
}

/* Binds the handler's socket and starts its thread; with `lifecycle` held. */
static int start(char *error, size_t error_size) {
    void *socket = zmq_socket(ps_zmq_context(), ZMQ_REP);
    int zero = 0, bound = -1;
    if (socket) zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    for (int i = 0; socket && i < BIND_TRIES && (bound = zmq_bind(socket, ENDPOINT)) != 0 && zmq_errno() == EADDRINUSE;
         i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    if (bound != 0) {
        snprintf(error, error_size, "cannot start the ZAP handler at %s: %s", ENDPOINT, zmq_strerror(zmq_errno()));
        if (socket) zmq_close(socket);
        return PS_EREMOTE;
    }
    atomic_store(&stopping, 0);
    if (pthread_create(&thread, NULL, serve, socket) != 0) {
        zmq_close(socket);
        snprintf(error, error_size, "cannot start the ZAP handler's thread");
        return PS_ENOMEM;
    }
    running = 1;
    return PS_OK;
}

int ps_zap_allow(const char *name, const ps_client_key *keys, size_t count, char *error, size_t error_size) {
    domain *fresh = calloc(1, sizeof *fresh);
    if (fresh) {
        fresh->keys = calloc(count ? count : 1, sizeof *fresh->keys);
        fresh->names = calloc(count ? count : 1, sizeof *fresh->names);
    }
    if (!fresh || !fresh->keys || !fresh->names) {
        if (fresh) free_domain(fresh);
        return PS_ENOMEM;
    }
    snprintf(fresh->name, sizeof fresh->name, "%s", name);
    fresh->count = count;
    for (size_t i = 0; i < count; i++) {
        if (strnlen(keys[i].public_key, 41) != 40 || !zmq_z85_decode(fresh->keys[i], keys[i].public_key)) {
            snprintf(error, error_size, "client key of '%s': expected 40 Z85 characters", keys[i].name);
            free_domain(fresh);
            return PS_EINVAL;
        }
        snprintf(fresh->names[i], PS_CLIENT_NAME_MAX, "%s", keys[i].name);
    }
    pthread_mutex_lock(&lifecycle);
    int rc = running ? PS_OK : start(error, error_size);
    if (rc == PS_OK) {
        pthread_mutex_lock(&lock);
        domain **at = &domains;
        while (*at && strcmp((*at)->name, name) != 0) at = &(*at)->next;
        fresh->next = *at ? (*at)->next : NULL;
        if (*at) free_domain(*at);
        *at = fresh;
        pthread_mutex_unlock(&lock);
    } else {
        free_domain(fresh);
    }
    pthread_mutex_unlock(&lifecycle);
    return rc;
}

void ps_zap_forget(const char *name) {
    pthread_mutex_lock(&lifecycle);
    pthread_mutex_lock(&lock);
    for (domain **at = &domains; *at; at = &(*at)->next) {
        if (strcmp((*at)->name, name) == 0) {
            domain *gone = *at;
            *at = gone->next;
            free_domain(gone);
            break;
        }
    }
    int last = domains == NULL;
    pthread_mutex_unlock(&lock);
    if (last && running) {
        atomic_store(&stopping, 1);
        pthread_join(thread, NULL);
        running = 0;
    }
    pthread_mutex_unlock(&lifecycle);
}
