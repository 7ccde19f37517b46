/* peer_directory.h — the allreduce members this process hosts, by group and rank: where each one
 * listens for the peers of its group, the secret they present, and the group's shape as the
 * member was made (what its partners must agree on: allreduce.c). A member lists itself when
 * it is made and unlists itself once its peers are in (or when it goes); one that breaks its group
 * lists itself as broken instead, with the news of why, until it goes (one that had joined, for
 * as long as a member of its group may still be joining: a new group of that name, built later,
 * finds nothing of it). The process's server
 * answers a PEER request from here (wire.md), so a peer learns all this on the control plane.
 */
#ifndef WRAPPERS_PEER_DIRECTORY_H
#define WRAPPERS_PEER_DIRECTORY_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PS_GROUP_MAX = 255,
    PS_PEER_ENDPOINT_MAX = 256,
    PS_PEER_NEWS = 16, /* why a member broke its group, as its peers pass it on (wire.md, "Allreduce") */
};

/* Lists member `rank` of `group`, made by `owner`: PS_OK, PS_ESTATE when the process lists it
 * already (a member that broke its group gives its place up), PS_ENOMEM. */
int ps_peer_list(const void *owner, const char *group, uint32_t rank, const char *endpoint,
                 const unsigned char secret[PS_WIRE_SECRET], uint64_t shape);
/* Lists owner's member as one that broke its group, with its news, in place of what it listed or
 * where none is (until `until`, ps_now_ns; 0: until it goes): PS_OK, PS_ESTATE when another
 * member holds the place, or PS_ENOMEM. */
int ps_peer_list_broken(const void *owner, const char *group, uint32_t rank, uint64_t shape,
                        const unsigned char news[PS_PEER_NEWS], int64_t until);
/* Takes owner's member off the list (nothing if it is not on it). */
void ps_peer_unlist(const void *owner, const char *group, uint32_t rank);
/* Member `rank` of `group`: its shape and PS_OK with where it listens and its secret, PS_EREMOTE
 * with its news when it broke its group, or PS_ESTATE when it is not listed. */
int ps_peer_find(const char *group, uint32_t rank, char endpoint[PS_PEER_ENDPOINT_MAX],
                 unsigned char secret[PS_WIRE_SECRET], unsigned char news[PS_PEER_NEWS], uint64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
