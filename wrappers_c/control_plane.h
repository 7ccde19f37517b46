/* control_plane.h — one request at a server's main endpoint and its answer (wire.md: the control
 * plane), on a ZeroMQ DEALER of the caller's own, a CURVE client where the server is a CURVE
 * server: a remote stage's BUILD, an allreduce stage's PEER. A wait to set something up (and one
 * for an overdue answer, remote.c) goes in slices, so that a process that is exiting
 * (ps_remote_abandon_waits), or a caller that gave up (Ctrl-C), does not wait for one.
 */
#ifndef WRAPPERS_CONTROL_PLANE_H
#define WRAPPERS_CONTROL_PLANE_H

#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "stage.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CURVE keys (Z85, 40 characters) a client socket uses: none when server_key is "" (or
 * NULL); its own pair, or a fresh one per socket when public_key is "" (or NULL). */
typedef struct ps_curve_client {
    const char *server_key;
    const char *public_key;
    const char *secret_key;
} ps_curve_client;

/* A DEALER connected to `endpoint`, with the keys; NULL on failure (zmq_errno() says why). */
void *ps_control_socket(const char *endpoint, const ps_curve_client *keys);

/* Receives the next message on a ZeroMQ socket by `deadline` into `message` (closed and
 * re-initialised here; the caller closes it at the end) and decodes it into *out: PS_OK,
 * PS_ETIMEDOUT, PS_EINVAL for a malformed frame, PS_EREMOTE when the socket failed. */
int ps_zmq_receive_frame(void *socket, int64_t deadline, zmq_msg_t *message, ps_frame *out);

/* The end of the next slice of a wait for a server (a set-up's answer, or an operation's overdue
 * one) that ends at `deadline`: at most 100 ms away; 0 once the process is exiting, or the calling
 * thread's interrupt check says its caller gave up. */
int64_t ps_interruptible_slice_end(int64_t deadline);
/* The calling thread's check between the slices of such waits (NULL: none): nonzero ends the
 * wait, as the process's exit does (the Python binding's: a signal whose handler raised, Ctrl-C).
 * Returns the check it replaces. */
typedef int (*ps_interrupt_check)(void);
ps_interrupt_check ps_interrupt_check_set(ps_interrupt_check check);

/* One request at a main endpoint, on a socket of its own, whose answer may be waited for in
 * several goes (an allreduce member looks its peers up between its caller's short calls). */
typedef struct ps_control_call {
    void *socket;           /* NULL: none under way */
    uint64_t id;
    zmq_msg_t message;      /* the answer, once received */
} ps_control_call;

/* Opens the call's socket to `endpoint` and sends `request`: PS_OK, PS_EREMOTE (no socket, not
 * sent: the call is closed), PS_ENOMEM. */
int ps_control_send(ps_control_call *call, const char *endpoint, const ps_curve_client *keys, const ps_frame *request);
/* Waits for the answer until `deadline` (an absolute time, ps_now_ns()), in slices: PS_OK with
 * *answer decoded (its payload valid until the call is closed), PS_ETIMEDOUT (the call goes on),
 * PS_EINTR (the process is exiting), PS_EINVAL (a malformed answer), PS_EREMOTE. */
int ps_control_answer(ps_control_call *call, int64_t deadline, ps_frame *answer);
/* Closes the call's socket (nothing if none is open). */
void ps_control_close(ps_control_call *call);

/* A whole call: sends `request` to `endpoint` and waits for its answer until `deadline`. PS_OK:
 * *answer is decoded, its payload copied into `payload` (room for `capacity` bytes; a longer
 * one is PS_EINVAL); else as the calls above say. */
int ps_control_request(const char *endpoint, const ps_curve_client *keys, const ps_frame *request, int64_t deadline,
                       ps_frame *answer, unsigned char *payload, size_t capacity);

/* Whether an endpoint names something to connect to: tcp://HOST:PORT, PORT 1 to 65535 (a source
 * address first, too), or ipc:// or inproc:// and a name. */
int ps_endpoint_whole(const char *endpoint);

/* Whether a build in `context` may reach `endpoint`: any, unless the context names the ones it
 * trusts (a server's build for a client); then it must match one of their patterns whole (a
 * wildcard within one label of a host, its port, or one part of a path), and choose no source
 * address of its own ("tcp://SOURCE;DESTINATION"). */
int ps_endpoint_trusted(const ps_build_context *context, const char *endpoint);

/* A TCP endpoint a server hands out (a link's, a member's) is on its own host: `endpoint` (size
 * bytes) is rewritten to the host of `server` (the endpoint we reached it at) with its own port.
 * So a server bound to every interface (which names 0.0.0.0) is reached as it was, and one that
 * names another host cannot send this process's connection there. */
void ps_reachable_endpoint(const char *server, char *endpoint, size_t size);

#ifdef __cplusplus
}
#endif

#endif
