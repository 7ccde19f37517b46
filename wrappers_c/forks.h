/* forks.h — which process made something: a connection or a socket made before fork() is the
 * parent's, and a child's calls on its copy would mix the two processes' frames and answers.
 * ps_forks() counts the forks that made this process, from the library's load on (each child
 * counts its own, at the fork): what was made when it said N is this process's while it still says N. */
#ifndef WRAPPERS_FORKS_H
#define WRAPPERS_FORKS_H

#ifdef __cplusplus
extern "C" {
#endif

unsigned ps_forks(void);

#ifdef __cplusplus
}
#endif

#endif
