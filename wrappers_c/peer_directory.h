/* peer_directory.h — the allreduce members this process hosts, by group and rank: where each one
 * listens for the peers of its group, the secret they present, and the group's shape as the
 * member was made (what its partners must agree on: allreduce.c). A member lists itself when
 * it is made and unlists itself once its peers are in (or when it goes); the process's server
 * answers a PEER request from here (wire.md), so a peer learns both on the control plane.
 */
#ifndef WRAPPERS_PEER_DIRECTORY_H
#define WRAPPERS_PEER_DIRECTORY_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PS_GROUP_MAX = 255, PS_PEER_ENDPOINT_MAX = 256 };

/* Lists member `rank` of `group`: PS_OK, PS_ESTATE when the process lists it already, PS_ENOMEM. */
int ps_peer_list(const char *group, uint32_t rank, const char *endpoint, const unsigned char secret[PS_WIRE_SECRET],
                 uint64_t shape);
/* Takes the member off the list (nothing if it is not on it). */
void ps_peer_unlist(const char *group, uint32_t rank);
/* Where member `rank` of `group` listens, its secret and shape: PS_OK, or PS_ESTATE when it is not listed. */
int ps_peer_find(const char *group, uint32_t rank, char endpoint[PS_PEER_ENDPOINT_MAX],
                 unsigned char secret[PS_WIRE_SECRET], uint64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
