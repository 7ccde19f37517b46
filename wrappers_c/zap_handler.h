/* zap_handler.h — the process's ZAP handler (ZeroMQ's authentication protocol, RFC 27): a
 * server that authenticates its clients admits a CURVE client only if it lists the client's
 * public key.
 *
 * Such a server gives its sockets a ZAP domain of its own (ps_zap_allow, before it binds them)
 * and the keys it admits, each with a name. Every CURVE handshake on a server socket of the
 * process's ZeroMQ context then asks the handler: a client of a listed domain is admitted only
 * with a listed key, and its messages carry the key's name as their "User-Id" (who the client
 * is, for the server's per-client limits); a client of a socket with no domain (a server that only
 * proves itself) is admitted as before. The handler is a thread of its own, bound before the
 * first domain's server binds, and runs while a domain is listed. It is process-wide because
 * ZeroMQ asks one handler per context, and the process has one context (zmq_context.h).
 */
#ifndef WRAPPERS_ZAP_HANDLER_H
#define WRAPPERS_ZAP_HANDLER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { PS_ZAP_DOMAIN_MAX = 64, PS_CLIENT_NAME_MAX = 64 };

typedef struct ps_client_key {
    char public_key[41];            /* Z85 */
    char name[PS_CLIENT_NAME_MAX];  /* who holds it: what messages about the client say */
} ps_client_key;

/* Lists `count` keys as the ones `domain` admits (replacing what it listed before), starting the
 * handler if it is not running. PS_OK; PS_EINVAL for a key that is not 40 Z85 characters
 * (error says which); PS_ENOMEM, or PS_EREMOTE when the handler could not start. */
int ps_zap_allow(const char *domain, const ps_client_key *keys, size_t count, char *error, size_t error_size);

/* Forgets the domain (its server has closed its sockets); the handler stops with the last one. */
void ps_zap_forget(const char *domain);

#ifdef __cplusplus
}
#endif

#endif
