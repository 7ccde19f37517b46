"""The allreduce stage (wrappers_c/allreduce.c, docs/semantics.md "allreduce"): members, one per
node, that send their partial sums to each other directly. Members in threads of this process
(each with a server and a PastSet of its own) and in processes of their own: every round's total
exact at every member and the same bits, one total per round in rank 0's element, rounds up to
four ahead, waits that time out and are taken up again, a member that never joins or dies named,
PEER answers and hostile connections, the checks on a misplaced or duplicated member; and the
maps and plans that put the node partial sums of a run into one allreduce group, run for real.
"""

from __future__ import annotations

import csv
import gc
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import wire_frames
from child_processes import ChildProcesses

import paths
from paths import build_path, make_path, stage
from paths.experiments.experiment import RunSettings, run_experiment
from paths.model.cluster_map import builtin_map, load_map_text
from paths.model.reduction_tree import plan_reduction
from paths.runtime.build import BuildContext
from paths.runtime.server import PathServer
from paths.runtime.server_policy import ServerPolicy

TIMEOUT_S = 10.0   # no call below comes near it unless it is meant to
SHORT_S = 0.05     # a call meant to time out


class Group:
    """`size` members, each with a server and a PastSet of its own in this process; the element
    (name, format) on member 0's, reached from the others through a remote stage."""

    def __init__(self, size: int, name: str = "G", format: str = "qd", **params):
        self.name, self.format = name, format
        self.servers = [PathServer("tcp://127.0.0.1:*", context=BuildContext(paths.PastSet())).start()
                        for _ in range(size)]
        self.nodes = ",".join(server.endpoint for server in self.servers)
        self.params = params
        self.handles = []

    def path(self, rank: int):
        below = [] if rank == 0 else [stage("remote", host=self.servers[0].endpoint)]
        return make_path(stage("allreduce", group=self.name, nodes=self.nodes, rank=rank, **self.params), *below,
                         stage("core", name=self.name, format=self.format))

    def build(self, ranks=None):
        ranks = range(len(self.servers)) if ranks is None else ranks
        self.handles = [build_path(self.path(rank), context=self.servers[rank].context) for rank in ranks]
        return self.handles

    def element(self):
        return self.servers[0].pastset.enter(self.name, self.format)

    def each(self, work):
        """work(rank, handle) in a thread per member; its results, or the first exception raised."""
        results, errors = [None] * len(self.handles), []

        def run(rank):
            try:
                results[rank] = work(rank, self.handles[rank])
            except Exception as e:  # noqa: BLE001 - handed to the test
                errors.append(e)

        threads = [threading.Thread(target=run, args=(rank,)) for rank in range(len(self.handles))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), "a member hung"
        if errors:
            raise errors[0]
        return results

    def close(self):
        self.handles.clear()
        gc.collect()
        for server in self.servers:
            server.close()


@pytest.fixture
def group():
    made = []

    def make(size, **kwargs):
        made.append(Group(size, **kwargs))
        return made[-1]

    yield make
    for g in made:
        g.close()


def one_round(refusal: type):
    """A member's work for Group.each: one round, its total, or the text of the `refusal` it raised."""
    def run(rank, handle):
        try:
            handle.move((rank + 1,), timeout=TIMEOUT_S)
            return handle.observe(timeout=TIMEOUT_S)
        except refusal as e:
            return str(e)
    return run


def partial(rank: int, r: int) -> tuple:
    return (1000 * r + rank, 1.0 / (3 + rank + r % 7))  # a share whose sum's bits show the order of its additions


@pytest.mark.parametrize("size, params", [
    (2, {}), (3, {}), (4, {}), (6, {}),
    (5, {"algorithm": "tree", "fanin": 2}), (7, {"algorithm": "tree", "fanin": 3}), (4, {"proto": "ipc"}),
], ids=["doubling-2", "doubling-3", "doubling-4", "doubling-6", "tree2-5", "tree3-7", "ipc-4"])
def test_every_member_gets_every_rounds_total_with_the_same_bits(group, size, params):
    g = group(size, **params)
    g.build()
    rounds = 200

    def run(rank, handle):
        totals = []
        for r in range(rounds):
            handle.move(partial(rank, r), timeout=TIMEOUT_S)
            totals.append(handle.observe(timeout=TIMEOUT_S))
        return totals

    results = g.each(run)
    for r in range(rounds):
        assert results[0][r][0] == sum(partial(k, r)[0] for k in range(size))
    assert all(totals == results[0] for totals in results), "every member gets the same bits"
    element = g.element()
    assert element.last() == rounds and [element.observe(i) for i in range(rounds)] == results[0]
    assert g.handles[0].stage.counters()["rounds"] == rounds


def test_a_member_moves_up_to_four_rounds_ahead_and_no_further(group):
    g = group(2)
    g.build()

    def run(rank, handle):
        for r in range(4):
            handle.move(partial(rank, r), timeout=TIMEOUT_S)
        with pytest.raises(RuntimeError, match="more than 4 rounds ahead"):
            handle.move(partial(rank, 4), timeout=TIMEOUT_S)
        first = [handle.observe(timeout=TIMEOUT_S) for _ in range(2)]
        handle.move_many([partial(rank, 4), partial(rank, 5)], timeout=TIMEOUT_S)
        with pytest.raises(RuntimeError, match="further than 4 rounds ahead"):
            handle.move_many([partial(rank, 6)] * 3, timeout=TIMEOUT_S)
        paths.fence(handle, timeout=TIMEOUT_S)  # every round moved is complete: the observes answer at once
        rest = [handle.observe(timeout=0) for _ in range(4)]
        with pytest.raises(RuntimeError, match="each observe answers one"):
            handle.observe(timeout=TIMEOUT_S)
        return [t[0] for t in first + rest]

    assert g.each(run) == [[sum(partial(k, r)[0] for k in range(2)) for r in range(6)]] * 2


def test_an_observe_that_times_out_is_taken_up_again(group):
    g = group(2, format="q")
    first, second = g.build()
    first.move((1,), timeout=TIMEOUT_S)  # a move never waits: the partial waits for the group
    with pytest.raises(TimeoutError):
        first.observe(timeout=SHORT_S)  # the other member has not come yet
    assert g.element().last() == 0
    other = threading.Thread(target=lambda: (second.move((2,), timeout=TIMEOUT_S), second.observe(timeout=TIMEOUT_S)))
    other.start()
    assert first.observe(timeout=TIMEOUT_S) == (3,)
    other.join(TIMEOUT_S)
    assert g.element().last() == 1


class Interrupted(Exception):
    """What the test's signal handler raises, as Ctrl-C's raises KeyboardInterrupt."""


def test_a_signal_while_a_member_looks_its_partners_up_leaves_the_group_whole(group):
    """A signal whose handler raises (Ctrl-C) while member 1 waits for member 0, not built yet, to
    be listed (its PEER question asked over and over): the call raises it, and the group goes on
    once member 0 comes, its total whole; it is not given up as if the process were exiting."""
    g = group(2, format="q", timeout_ms=20_000)
    second = build_path(g.path(1), context=g.servers[1].context)
    second.move((2,), timeout=TIMEOUT_S)

    def interrupt(signum, frame):
        raise Interrupted

    before = signal.signal(signal.SIGALRM, interrupt)
    try:
        for _ in range(10):  # each lands wherever the wait is: in a look-up or between slices
            signal.setitimer(signal.ITIMER_REAL, 0.03)
            with pytest.raises(Interrupted):
                second.observe(timeout=TIMEOUT_S)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    first = build_path(g.path(0), context=g.servers[0].context)
    other = threading.Thread(target=lambda: (first.move((1,), timeout=TIMEOUT_S), first.observe(timeout=TIMEOUT_S)))
    other.start()
    assert second.observe(timeout=TIMEOUT_S) == (3,)
    other.join(TIMEOUT_S)


def test_a_member_that_never_joins_is_named_and_its_partners_learn_it(group):
    g = group(3, format="q", timeout_ms=300)
    g.build(ranks=[0, 1])  # member 2 (rank 0's partner past the largest power of two) never comes
    begun = time.monotonic()

    def run(rank, handle):
        handle.move((rank + 1,), timeout=TIMEOUT_S)
        with pytest.raises(ConnectionError) as failed:
            handle.observe(timeout=TIMEOUT_S)
        with pytest.raises(ConnectionError):
            handle.move((rank + 1,), timeout=TIMEOUT_S)  # broken for good
        return str(failed.value)

    zero, one = g.each(run)
    assert time.monotonic() - begun < 3
    assert "1 member(s) did not join within 300 ms, among them member 2 (its server " in zero
    assert g.servers[2].endpoint in zero
    assert f"member 2 (its server {g.servers[2].endpoint}) did not join in time (heard from member 0)" in one, \
        "member 0's partners learn it at once, and who broke the group"


SAME = "every member needs the same nodes, algorithm, fanin and element format; "


@pytest.mark.parametrize("made, says", [
    ({0: {"nodes": 2}}, {0: "this one has 2 members, 3 at member "}),  # 1 or 2: the first to present itself
    ({2: {"algorithm": "tree"}}, {0: "this one has doubling and format 'q', another at member 2",
                                  2: "this one has a tree of fan-in 2 and format 'q', another at member 0"}),
    ({1: {"algorithm": "tree", "fanin": 3}, 2: {"algorithm": "tree", "fanin": 3}, 0: {"algorithm": "tree"}},
     {0: "this one has a tree of fan-in 2 and format 'q', another at member "}),  # 1 or 2, whichever came first
    ({1: {"format": "d"}}, {0: "this one has doubling and format 'q', another at member 1",
                            1: "this one has doubling and format 'd', another at member 0"}),
    ({0: {"nodes": 2}, 1: {"nodes": 2}}, {}),  # member 2 says so if it meets member 0 before 1 does
], ids=["nodes", "algorithm", "fanin", "format", "an outsider"])
def test_members_made_for_groups_of_other_shapes_sum_nothing_and_say_how_they_differ(group, made, says):
    """Members given other nodes (a group of 2 inside a group of 3), another algorithm or fan-in,
    or an element of another format of the same size: no round completes in a group whose
    members disagree (the members of 2 would sum 1 + 2 and call it the total), and the members
    that meet say how they differ. Two members that agree on a group of 2 are one: the third,
    which would make them 3, fails, and breaks their group too if it presents itself before
    they have joined (else they sum as the group of 2 they were made)."""
    g = group(3, name="G-shapes", format="q", timeout_ms=3000)

    def path(rank):
        own = made.get(rank, {})
        nodes = ",".join(server.endpoint for server in g.servers[:own.get("nodes", 3)])
        params = {k: v for k, v in own.items() if k in ("algorithm", "fanin")}
        element = stage("core", name="G-shapes" if rank == 0 else f"G-shapes-{rank}", format=own.get("format", "q"))
        return make_path(stage("allreduce", group="G-shapes", nodes=nodes, rank=rank, timeout_ms=3000, **params),
                         element)

    g.handles = [build_path(path(rank), context=g.servers[rank].context) for rank in range(3)]
    results = g.each(one_round(ConnectionError))
    agreeing = [rank for rank in range(3) if made.get(rank, {}).get("nodes") == 2 and len(made) == 2]
    for rank, result in enumerate(results):
        assert isinstance(result, str) or rank in agreeing and result == (3,), (rank, results)
    for rank, text in says.items():
        assert SAME + text in results[rank], (rank, results[rank])


@pytest.mark.parametrize("size, made", [
    (6, {rank: {"algorithm": "tree", "fanin": fanin} for rank, fanin in enumerate([2, 2, 4, 2, 3, 4])}),
    (5, {1: {"nodes": 2}}),
    (6, {rank: {"algorithm": "tree"} for rank in (0, 3, 4)}),
], ids=["fanins", "nodes", "algorithms"])
def test_every_member_of_a_group_whose_shapes_differ_fails_at_once_saying_so(group, size, made):
    """Members that never meet the one that differs, or ask a member that broke the group already,
    or wait for a partner that counts them as no partner of its: each fails well within
    timeout_ms, saying that the shapes differ (and how, where it knows), never that a live member
    did not join."""
    name = f"G-differ-{size}-{len(made)}"
    g = group(size, name=name, format="q", timeout_ms=20_000)

    def path(rank):
        own = made.get(rank, {})
        nodes = ",".join(server.endpoint for server in g.servers[:own.get("nodes", size)])
        params = {k: v for k, v in own.items() if k in ("algorithm", "fanin")}
        element = stage("core", name=name if rank == 0 else f"{name}-{rank}", format="q")
        return make_path(stage("allreduce", group=name, nodes=nodes, rank=rank, timeout_ms=20_000, **params), element)

    g.handles = [build_path(path(rank), context=g.servers[rank].context) for rank in range(size)]
    begun = time.monotonic()
    results = g.each(one_round(ConnectionError))
    assert time.monotonic() - begun < 10, results
    for rank, text in enumerate(results):
        assert isinstance(text, str) and SAME + "this one has " in text, (rank, results)


def test_members_whose_differences_build_the_same_rounds_sum_together(group):
    """A tree's fan-in past the member count builds the one same tree, and formats of one layout
    ('qq', 'lq', '=qq' here) add alike: no disagreement."""
    g = group(3, name="G-alike", format="qq", timeout_ms=3000)
    own = [("qq", 3), ("lq", 8), ("=qq", 3)]

    def path(rank):
        format_, fanin = own[rank]
        element = stage("core", name="G-alike" if rank == 0 else f"G-alike-{rank}", format=format_)
        return make_path(stage("allreduce", group="G-alike", nodes=g.nodes, rank=rank, algorithm="tree", fanin=fanin),
                         element)

    g.handles = [build_path(path(rank), context=g.servers[rank].context) for rank in range(3)]

    def run(rank, handle):
        handle.move((rank + 1, 10), timeout=TIMEOUT_S)
        return handle.observe(timeout=TIMEOUT_S)

    assert g.each(run) == [(6, 30)] * 3


def test_a_member_that_comes_after_its_partners_group_joined_is_told_its_server_lists_none(group):
    """Members 0 and 1 are a group of 2 and have joined; a member 2 made for 3 asks member 0's
    server, which is up and answers that it lists no such member: the message says that, not
    "is it up?"."""
    g = group(3, name="G-late", format="q")
    two = ",".join(server.endpoint for server in g.servers[:2])
    g.handles = [build_path(make_path(stage("allreduce", group="G-late", nodes=two, rank=rank),
                                      stage("core", name="G-late" if rank == 0 else "G-late-1", format="q")),
                            context=g.servers[rank].context) for rank in range(2)]
    assert g.each(one_round(ConnectionError)) == [(3,), (3,)]
    late = build_path(make_path(stage("allreduce", group="G-late", nodes=g.nodes, rank=2, timeout_ms=300),
                                stage("core", name="G-late-2", format="q")), context=g.servers[2].context)
    late.move((3,), timeout=TIMEOUT_S)
    with pytest.raises(ConnectionError, match=r"1 member\(s\) did not join within 300 ms \(its server answers PEER "
                                              r"that it lists no such member: not made, made for other nodes, or in "
                                              r"its group already\), among them member 0 "):
        late.observe(timeout=TIMEOUT_S)


def test_a_member_process_that_dies_is_named_at_once():
    rounds = 50
    with ChildProcesses() as children:
        other = children.peer("member", "G-dies", 1, rounds)
        endpoint = other.expect("READY ")
        server = PathServer("tcp://127.0.0.1:*", context=BuildContext(paths.PastSet())).start()
        try:
            nodes = f"{server.endpoint},{endpoint}"
            other.send(nodes)
            handle = build_path(make_path(stage("allreduce", group="G-dies", nodes=nodes, rank=0),
                                          stage("core", name="G-dies", format="q")), context=server.context)
            for _ in range(rounds):
                handle.move((1,), timeout=TIMEOUT_S)
                assert handle.observe(timeout=TIMEOUT_S) == (3,)
            assert other.expect("TOTALS ") == str([3] * rounds)
            handle.move((1,), timeout=TIMEOUT_S)
            other.send("die")
            assert other.wait(TIMEOUT_S) == 0
            begun = time.monotonic()
            with pytest.raises(ConnectionError) as lost:
                handle.observe(timeout=TIMEOUT_S)
            assert time.monotonic() - begun < 2
            assert f"lost member 1 (its server {endpoint})" in str(lost.value)
            del handle
        finally:
            server.close()


def test_survivors_of_a_killed_member_name_it_not_the_partner_that_told_them(group):
    """Member 3 of 4 (recursive doubling) is killed mid-run. Member 0 never speaks to it: it hears
    of the break from member 1 or 2, alive, which it must not blame as if they had failed; every
    survivor names member 3, and those that heard of it name who told them."""
    g = group(3, name="G-killed", format="q")
    with ChildProcesses() as children:
        killed = children.peer("member", "G-killed", 3, 1_000_000)
        endpoint = killed.expect("READY ")
        g.nodes = f"{g.nodes},{endpoint}"
        killed.send(g.nodes)
        g.build()

        def run(rank, handle):
            with pytest.raises(ConnectionError) as failed:
                for r in range(1_000_000):
                    handle.move((rank + 1,), timeout=TIMEOUT_S)
                    assert handle.observe(timeout=TIMEOUT_S) == (10,)
                    if rank == 0 and r == 20:
                        killed.signal(signal.SIGKILL)
            return str(failed.value)

        results = g.each(run)
    named = f"member 3 (its server {endpoint})"
    for rank, text in enumerate(results):
        assert named in text and "lost member 0" not in text and "lost member 1" not in text \
            and "lost member 2" not in text, (rank, results)
    assert f"{named} left the group (heard from member " in results[0], results[0]


def test_a_member_waiting_for_a_stalled_partner_learns_its_other_partners_broke_the_group(group):
    """Recursive doubling of 4: member 0 waits for member 1, alive but stalled (its caller makes no
    call), when member 3 goes mid-run and member 2, its partner, breaks the group. Member 2 is
    member 0's partner of the next step: member 0 hears it from member 2 and fails at once,
    naming member 3, instead of timing out, call after call, waiting for member 1."""
    g = group(4, name="G-stalled", format="q", timeout_ms=60_000)
    g.build()
    assert g.each(one_round(ConnectionError)) == [(10,)] * 4
    zero, two = g.handles[0], g.handles[2]
    zero.move((1,), timeout=TIMEOUT_S)
    with pytest.raises(TimeoutError):
        zero.observe(timeout=SHORT_S)  # member 1 makes no call
    del g.handles[3]
    gc.collect()  # member 3's stage goes: its connections close
    two.move((3,), timeout=TIMEOUT_S)
    with pytest.raises(ConnectionError, match="member 3 "):
        two.observe(timeout=TIMEOUT_S)
    begun = time.monotonic()
    with pytest.raises(ConnectionError) as failed:
        zero.observe(timeout=TIMEOUT_S)
    assert time.monotonic() - begun < TIMEOUT_S / 2
    assert f"member 3 (its server {g.servers[3].endpoint}) left the group (heard from member 2)" in str(failed.value)
    for later in (lambda: zero.move((2,), timeout=TIMEOUT_S), lambda: two.observe(timeout=TIMEOUT_S)):
        with pytest.raises(ConnectionError) as told_again:  # a later call is told why, too
            later()
        assert f"member 3 (its server {g.servers[3].endpoint})" in str(told_again.value)


def test_partners_that_finish_their_last_round_and_go_leave_the_others_round_whole(group):
    """Members 1 and 3 complete the round and are released while member 0 still waits for member
    2's part (member 2 has moved, not observed): their connections closing is no break of the
    group, for neither has a part left in member 0's round; the round completes at 0 and 2."""
    g = group(4, name="G-done", format="q")
    g.build()
    assert g.each(one_round(ConnectionError)) == [(10,)] * 4  # joined: a move's parts go out at once
    for rank, handle in enumerate(g.handles):
        handle.move((rank + 1,), timeout=TIMEOUT_S)
    done = [None] * 4
    finishing = [threading.Thread(target=lambda r=r: done.__setitem__(r, g.handles[r].observe(timeout=TIMEOUT_S)))
                 for r in (1, 3)]
    for thread in finishing:
        thread.start()
    for thread in finishing:
        thread.join(TIMEOUT_S * 2)
    assert done[1] == done[3] == (10,)
    zero, two = g.handles[0], g.handles[2]
    del g.handles[3], g.handles[1]
    gc.collect()
    with pytest.raises(TimeoutError):
        zero.observe(timeout=0.5)  # still waiting for member 2, which has not observed yet
    assert two.observe(timeout=TIMEOUT_S) == (10,)
    assert zero.observe(timeout=TIMEOUT_S) == (10,)


def test_a_group_built_again_is_not_told_the_news_of_an_old_one_that_broke_after_joining(group):
    """A group of 2 (timeout_ms 1 s) joins and runs a round; member 1 is released, so member 0's
    next round breaks the group, after it had joined. With that broken member 0 still alive, the
    group is built again once its timeout_ms has passed, member 1 first: it waits for the new
    member 0, joins it and sums, instead of failing at once on the old member 0's news."""
    g = group(2, name="G-again", format="q", timeout_ms=1000)
    g.build()
    assert g.each(one_round(ConnectionError)) == [(3,)] * 2
    old_zero = g.handles[0]
    del g.handles[1]
    gc.collect()
    with pytest.raises(ConnectionError, match="lost member 1"):
        old_zero.move((1,), timeout=TIMEOUT_S)
        old_zero.observe(timeout=TIMEOUT_S)
    time.sleep(1.2)  # the old member 0's news is older than its group's timeout_ms

    def member(rank):  # a fresh stage tree (the old member 0's stays, broken)
        return build_path(g.path(rank), context=BuildContext(paths.PastSet()) if rank == 0 else g.servers[1].context)

    one = member(1)
    done = []
    first = threading.Thread(target=lambda: done.append(one_round(ConnectionError)(1, one)))
    first.start()
    time.sleep(0.3)  # member 1 looks for member 0 meanwhile
    assert one_round(ConnectionError)(0, member(0)) == (3,)
    first.join(TIMEOUT_S * 2)
    assert done == [(3,)]
    del old_zero


def peer_request(endpoint: str, group: str, rank: int) -> dict:
    context = wire_frames.zmq.Context.instance()
    dealer = wire_frames.dealer(context, endpoint)
    try:
        dealer.send(wire_frames.encode(wire_frames.PEER, group.encode(), request_id=7, argument=rank))
        return wire_frames.decode(wire_frames.zmq_answer(dealer), answer=True)
    finally:
        dealer.close()


def test_peer_tells_a_listed_member_only_and_hostile_connections_are_refused(group):
    g = group(2, name="G-hostile", format="q")
    zero, one = g.build()  # listed; neither has moved yet
    endpoint = g.servers[0].endpoint
    found = peer_request(endpoint, "G-hostile", 0)
    assert found["status"] == 0 and found["request_id"] == 7
    secret, listens = found["payload"][:32], found["payload"][32:].decode()
    assert listens.startswith("tcp://127.0.0.1:")
    unknown = peer_request(endpoint, "no-such-group", 0)
    assert unknown["status"] == 9 and b"no member 0 of allreduce group 'no-such-group'" in unknown["payload"]
    assert peer_request(endpoint, "G-hostile", 1)["status"] == 9, "member 1 waits for no partner: not listed"
    bad_before = g.servers[0].native.counters()["bad_frames"]
    assert peer_request(endpoint, "", 0)["status"] == 7
    assert g.servers[0].native.counters()["bad_frames"] == bad_before + 1

    host, port = listens[len("tcp://"):].rsplit(":", 1)
    wrong = bytes([secret[0] ^ 1]) + secret[1:]
    shape = found["value"]  # the group's shape: with another, a member that presents the secret breaks the group
    attempts = [b"\xff" * 40,  # garbage
                wire_frames.encode(wire_frames.CONNECT, wrong, handle_id=1, value=shape),  # a wrong secret
                wire_frames.encode(wire_frames.CONNECT, secret, handle_id=0, value=shape),  # no partner's rank
                wire_frames.encode(wire_frames.CONNECT, secret, handle_id=5, value=shape),
                # another shape, from a rank outside its own group of 2: no member (a rank of 2**32 + 1 read
                # as 1 blamed member 1 for the shape and broke the group)
                wire_frames.encode(wire_frames.CONNECT, secret, handle_id=2**32 + 1, value=shape ^ 1)]
    for frame in attempts:
        with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as hostile:
            hostile.sendall(frame)

    def run(rank, handle):
        handle.move((rank + 1,), timeout=TIMEOUT_S)
        return handle.observe(timeout=TIMEOUT_S)

    assert g.each(run) == [(3,), (3,)]
    assert zero.stage.counters()["refused"] == len(attempts)
    assert peer_request(endpoint, "G-hostile", 0)["status"] == 9, "with its partners in, it is no longer listed"


def test_a_total_that_comes_back_changed_fails_the_round(group):
    g = group(2, format="q")
    g.build()
    g.element().move((99,))  # an unread tuple: what rank 0 observes back is not the total it moved
    zero, one = g.each(one_round(RuntimeError))
    assert "allreduce must be the last sum on its path" in zero and one == (3,)


def test_a_group_member_is_made_once_per_process(group):
    g = group(2, format="q")
    g.build()
    twin = make_path(stage("allreduce", group=g.name, nodes=g.nodes, rank=0),
                     stage("core", name="OTHER", format="q"))
    with pytest.raises(ValueError, match="give each group a name of its own"):
        build_path(twin, context=g.servers[0].context)


def test_a_server_makes_a_clients_member_only_toward_endpoints_it_trusts():
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet()) as server:
        server.start()
        path = make_path(stage("remote", host=server.endpoint),
                         stage("allreduce", group="G-far", nodes=f"{server.endpoint},tcp://127.0.0.2:9", rank=0),
                         stage("core", name="G-far", format="q"))
        with pytest.raises(ValueError, match="member 1's 'tcp://127.0.0.2:9' is not one"):
            build_path(path, pastset=paths.PastSet())


@pytest.mark.parametrize("nodes, error", [
    ("tcp://127.0.0.1:9,garbage!!", "member 1 of nodes, 'tcp://garbage!!', names no server to reach: expected "
                                    "tcp://HOST:PORT"),
    ("tcp://127.0.0.1:9,n1", "member 1 of nodes, 'tcp://n1', names no server to reach"),  # a node's name, outside a run
    ("tcp://127.0.0.1:9,,tcp://127.0.0.1:8", "member 1 of nodes, '', names no server to reach"),
], ids=["no endpoint", "a bare name", "an empty one"])
def test_nodes_that_name_no_group_are_refused_at_build(nodes, error):
    """They were taken, and failed timeout_ms later saying a member did not join."""
    path = make_path(stage("allreduce", group="G-bad", nodes=nodes, rank=0), stage("core", name="G-bad", format="q"))
    with pytest.raises(ValueError) as refused:
        build_path(path, pastset=paths.PastSet())
    assert str(refused.value).startswith(f"stage 'allreduce': {error}"), refused.value


@pytest.mark.parametrize("target, trusted", [
    ("tcp://n01:7000", True), ("tcp://10.1.2.3:7000", True), ("tcp://10.9.8.7:7001", True),
    ("tcp://nx:7000", False), ("tcp://10.1.2.localhost:7000", False), ("tcp://10.1.2.300:7000", False),
    ("tcp://a.b.c.d:7001", False), ("tcp://10.1.evil:7002", False), ("tcp://10.1.7.9:7002", False),
    ("tcp://2130706433:7000", False), ("tcp://0x7f000001:7000", False),  # 127.0.0.1, as the resolver reads them
])
def test_a_pattern_of_addresses_trusts_addresses_only_and_a_pattern_of_names_names(target, trusted):
    """--allow-remote 'tcp://10.1.2.*:7000' and 'tcp://*.*.*.*:7001' are patterns of IPv4
    addresses: no host name (10.1.2.localhost resolves to this host), however many labels it
    has; 'tcp://*[0-9]:7000' is one of names. Member 0 connects to nobody when it is built."""
    policy = ServerPolicy(allow_remote=("tcp://*[0-9]:7000", "tcp://10.1.2.*:7000", "tcp://*.*.*.*:7001",
                                        "tcp://10.1.*:7002"))  # of addresses, which have four labels: none
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), policy=policy) as server:
        server.start()
        path = make_path(stage("remote", host=server.endpoint),
                         stage("allreduce", group="G-trust", nodes=f"{server.endpoint},{target}", rank=0),
                         stage("core", name="G-trust", format="q"))
        if trusted:
            assert build_path(path, pastset=paths.PastSet()).stage.format == "q"
        else:
            with pytest.raises(ValueError, match=f"member 1's '{target}' is not one"):
                build_path(path, pastset=paths.PastSet())


def test_a_group_of_one_passes_every_operation_down():
    handle = build_path(make_path(stage("allreduce"), stage("core", name="ONE", format="q")), pastset=paths.PastSet())
    with pytest.raises(TimeoutError):
        handle.observe(timeout=SHORT_S)  # as the element itself: nothing to read yet
    handle.move((5,))
    assert handle.observe(timeout=TIMEOUT_S) == (5,) and handle.last() == 1


# ---- maps and plans --------------------------------------------------------------------------

def emulated(nodes: int, cpus: int, form: str, extra: str = "") -> str:
    return (f"name: allreduce-{nodes}x{cpus}\nclusters:\n  c:\n    nodes: \"n[0-{nodes - 1}]\"\n    cpus: {cpus}\n"
            f"{extra}root: n0\ntree:\n  form: {form}\n  max_fanin: 2\n")


def test_the_plan_puts_the_node_sums_into_one_group_home_first():
    cluster_map = load_map_text(emulated(3, 2, "allreduce-tree").replace("root: n0", "root: n1"))
    plan = plan_reduction(cluster_map, 6, ("GSUM", "q"))
    group = dict(group="GSUM", nodes="n1,n0,n2", algorithm="tree", fanin=2)
    assert plan.paths[2] == make_path(stage("reduce-sum", num_threads=2, id="node:n1"),
                                      stage("allreduce", rank=0, **group), stage("core", name="GSUM", format="q"))
    assert plan.paths[0] == make_path(stage("reduce-sum", num_threads=2, id="node:n0"),
                                      stage("allreduce", rank=1, **group), stage("remote", host="n1"),
                                      stage("core", name="GSUM", format="q"))
    assert "form allreduce-tree" in plan.render()
    alone = plan_reduction(cluster_map, 2, ("GSUM", "q"))  # one node with threads: no group
    assert [s.kind for s in alone.paths[0].stages] == ["reduce-sum", "remote", "core"]
    doubling = plan_reduction(cluster_map, 3, ("GSUM", "q"), form="allreduce", policy="cyclic")
    assert doubling.paths[1].stages[0] == stage("allreduce", group="GSUM", nodes="n1,n0,n2", rank=0)


def test_the_group_goes_over_ipc_where_every_hop_does_and_refuses_links_it_cannot_carry():
    ipc = load_map_text(emulated(2, 1, "allreduce", extra="    proto: ipc\n"))
    assert plan_reduction(ipc, 2, ("G", "q")).paths[0].stages[0].param("proto") == "ipc"
    linked = load_map_text("name: linked\nclusters:\n  a: {nodes: \"a[0-1]\", cpus: 1}\n  b: {nodes: \"b[0-1]\", cpus: 1}\n"
                           "root: a0\nlinks:\n  - {between: [a, b], delay_ms: 1}\ntree: {form: allreduce}\n")
    with pytest.raises(ValueError, match="clusters 'a' and 'b' has a delay or a batch"):
        plan_reduction(linked, 4, ("G", "q"))
    assert plan_reduction(linked, 2, ("G", "q")).paths[1].stages[0].kind == "allreduce", "inside one cluster"
    spread = plan_reduction(builtin_map("multicluster"), 48, ("G", "q"), form="allreduce")  # no link joins 2w and 4w
    assert {next(s for s in path.stages if s.kind == "allreduce").param("nodes") for path in spread.paths} == \
        {",".join([f"w2n{i:02d}" for i in range(16)] + [f"w4n{i}" for i in range(4)])}
    zmq = load_map_text(emulated(2, 1, "allreduce", extra="    proto: zmq\n"))
    with pytest.raises(ValueError, match="on zmq"):
        plan_reduction(zmq, 2, ("G", "q"))


@pytest.mark.parametrize("nodes, cpus, form", [(3, 1, "allreduce"), (4, 2, "allreduce-tree"), (2, 2, "allreduce")])
def test_gsum_on_an_emulated_map_with_its_node_sums_in_one_group(probe, nodes, cpus, form):
    cluster_map = load_map_text(emulated(nodes, cpus, form))
    settings = RunSettings("gsum", [nodes * cpus], repeat=2, rounds=300, timeout=60.0, collect_counters=True)
    report = run_experiment(cluster_map, settings)  # the kernel checks every total
    assert [m.threads for m in report.measurements] == [nodes * cpus] * 2
    counters = report.counters[nodes * cpus]
    members = [entry for stages in counters.values() for entry in stages
               if entry["stage"].startswith("allreduce(") and "name='GSUM." in entry["stage"]]
    assert len(members) == 2 * nodes, "a member per node and run"
    assert {entry["counters"]["rounds"] for entry in members} == {300}


def paths_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "paths", *args], capture_output=True, text=True, timeout=120)


def test_paths_run_and_show_take_the_tree_form_from_the_command_line(tmp_path):
    out = tmp_path / "run.csv"
    done = paths_command("run", "gsum", "--map", "paper-4w", "--threads", "8", "--tree-form", "allreduce-tree",
                         "--max-fanin", "2", "--repeat", "1", "--rounds", "200", "--csv", str(out))
    assert done.returncode == 0, done.stderr
    assert "(policy block, max fan-in 2, tree form allreduce-tree)" in done.stdout
    assert [row["tree_form"] for row in csv.DictReader(out.open())] == ["allreduce-tree"]
    shown = paths_command("show", "--map", "paper-4w", "--threads", "8", "--tree-form", "allreduce")
    assert shown.returncode == 0 and "form allreduce" in shown.stdout
    assert "allreduce(group='GSUM', nodes='n0,n1', rank=1)  on n1" in shown.stdout
    linked = tmp_path / "linked.yaml"
    linked.write_text("name: linked\nclusters:\n  a: {nodes: \"a[0-1]\", cpus: 1}\n  b: {nodes: \"b[0-1]\", cpus: 1}\n"
                      "root: a0\nlinks:\n  - {between: [a, b], delay_ms: 1}\n")
    refused = paths_command("run", "gsum", "--map", str(linked), "--threads", "4", "--tree-form", "allreduce")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "tree form allreduce: the link between clusters 'a' and 'b' has a delay or a batch" in refused.stderr
    unknown = paths_command("show", "--map", "paper-4w", "--threads", "8", "--tree-form", "exchange")
    assert unknown.returncode == 2 and "invalid choice: 'exchange'" in unknown.stderr


def test_a_map_whose_allreduce_crosses_a_delayed_link_is_one_line_for_every_command(tmp_path):
    linked = tmp_path / "linked.yaml"
    linked.write_text("name: linked\nclusters:\n  a: {nodes: \"a[0-1]\", cpus: 1}\n  b: {nodes: \"b[0-1]\", cpus: 1}\n"
                      "root: a0\ntree: {form: allreduce}\nlinks:\n  - {between: [a, b], delay_ms: 1}\n")
    for command in (("launch", "--map", str(linked), "--threads", "4", "--", "true"),
                    ("sbatch", "--map", str(linked), "--threads", "4", "--", "true"),
                    ("run", "gsum", "--map", str(linked), "--threads", "4"),
                    ("show", "--map", str(linked), "--threads", "4")):
        refused = paths_command(*command)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, (command, refused.stderr)
        assert refused.stderr.startswith(f"paths {command[0]}: {linked}:8: links[0]: map 'linked': tree form allreduce: "
                                         f"the link between clusters 'a' and 'b' has a delay or a batch"), refused.stderr
    assert paths_command("launch", "--map", str(linked), "--threads", "2", "--", "true").returncode == 0, \
        "two threads stay inside cluster a"


def test_a_hundred_hostile_connections_while_a_member_joins_change_nothing(group):
    g = group(2, name="G-flood", format="q")
    zero, one = g.build()
    found = peer_request(g.servers[0].endpoint, "G-flood", 0)
    secret, listens = found["payload"][:32], found["payload"][32:].decode()
    host, port = listens[len("tcp://"):].rsplit(":", 1)
    rng = random.Random(20261126)
    zero.move((1,), timeout=TIMEOUT_S)
    waiting = threading.Thread(target=lambda: results.append(zero.observe(timeout=60)))
    results = []
    waiting.start()  # member 0 joins: it admits or refuses every connection that comes

    def hostile(i: int) -> bytes:
        good = wire_frames.encode(wire_frames.CONNECT, secret, handle_id=1, value=found["value"])
        kinds = [lambda: rng.randbytes(rng.randrange(1, 200)),  # garbage
                 lambda: b"",  # silent: refused after 1 s, or when the member stops listening
                 lambda: wire_frames.encode(wire_frames.CONNECT, rng.randbytes(32), handle_id=1),  # a wrong secret
                 lambda: wire_frames.encode(wire_frames.CONNECT, secret, handle_id=rng.choice([0, 2, 1 << 40]),
                                            value=found["value"]),  # no partner's rank
                 lambda: good[:rng.randrange(1, len(good))],  # cut short, then closed
                 lambda: wire_frames.encode(wire_frames.PART, b"\0" * 8, handle_id=1),  # no CONNECT first
                 lambda: wire_frames.encode(wire_frames.CONNECT, secret, handle_id=1, length=1 << 30)]  # a lie
        return kinds[i % len(kinds)]()

    made = 140
    for i in range(made):
        with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as connection:
            connection.sendall(hostile(i))
    deadline = time.monotonic() + 20
    while zero.stage.counters()["refused"] < made and time.monotonic() < deadline:
        time.sleep(0.01)
    assert zero.stage.counters()["refused"] == made, "every hostile connection refused and counted"
    one.move((2,), timeout=TIMEOUT_S)
    assert one.observe(timeout=TIMEOUT_S) == (3,)
    waiting.join(TIMEOUT_S)
    assert results == [(3,)]
    for r in range(1, 50):  # and the group goes on
        g.each(lambda rank, h: h.move((rank + r,), timeout=TIMEOUT_S))
        assert g.each(lambda rank, h: h.observe(timeout=TIMEOUT_S)) == [(2 * r + 1,)] * 2


def test_connections_that_stall_over_and_over_do_not_keep_a_partner_out(group):
    """Connections that send part of a CONNECT and stall, kept at 24 (each refused one made anew),
    more than may present at once and than the listener's queue holds: member 1 still joins within
    the group's 1 s, before any of them is due to be refused (it waits in no queue behind them: a
    new connection takes the place of the one that has waited longest)."""
    g = group(2, name="G-stall", format="q", timeout_ms=1000)
    zero, one = g.build()
    found = peer_request(g.servers[0].endpoint, "G-stall", 0)
    secret, listens = found["payload"][:32], found["payload"][32:].decode()
    host, port = listens[len("tcp://"):].rsplit(":", 1)
    part = wire_frames.encode(wire_frames.CONNECT, secret, handle_id=1)[:20]
    stop, held = threading.Event(), []

    def stall():
        while not stop.is_set():
            for connection in select.select(held, [], [], 0.005)[0]:  # refused: closed by member 0
                held.remove(connection)
                connection.close()
            while len(held) < 24 and not stop.is_set():
                try:
                    connection = socket.create_connection((host, int(port)), timeout=0.2)
                    connection.sendall(part)
                except OSError:
                    break  # the listener's queue is full: look again
                held.append(connection)

    staller = threading.Thread(target=stall)
    staller.start()
    try:
        time.sleep(0.3)  # they stall at member 0 before member 1 comes
        assert g.each(lambda rank, h: (h.move((rank + 1,), timeout=TIMEOUT_S), h.observe(timeout=TIMEOUT_S))[1]) \
            == [(3,), (3,)]
    finally:
        stop.set()
        staller.join()
        for connection in held:
            connection.close()
    assert zero.stage.counters()["refused"] >= 8, "member 0 refused the stalled connections it took"


def test_a_root_with_more_partners_than_may_present_at_once_admits_them_all(group):
    g = group(12, name="G-wide", format="q", algorithm="tree", fanin=16)  # fan-in past the group: 11 children
    g.build()
    results = [None] * 12

    def run(rank):
        g.handles[rank].move((rank + 1,), timeout=TIMEOUT_S)
        try:
            results[rank] = g.handles[rank].observe(timeout=TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - checked below
            results[rank] = e

    children = [threading.Thread(target=run, args=(rank,)) for rank in range(1, 12)]
    for thread in children:
        thread.start()
    time.sleep(1.0)  # the children connect and present themselves before the root's first operation
    run(0)
    for thread in children:
        thread.join(TIMEOUT_S * 2)
    assert results == [(78,)] * 12
    assert g.handles[0].stage.counters()["refused"] == 0


def test_a_member_whose_partners_queue_is_full_still_returns_by_its_timeout(group):
    g = group(2, name="G-queue", format="q", timeout_ms=60000)
    zero, one = g.build()  # member 0 is made but does nothing yet: it accepts no connection
    found = peer_request(g.servers[0].endpoint, "G-queue", 0)
    host, port = found["payload"][32:].decode()[len("tcp://"):].rsplit(":", 1)
    idle = []
    for _ in range(40):  # more than its listener's queue holds: the later ones wait for room
        connection = socket.socket()
        connection.setblocking(False)
        connection.connect_ex((host, int(port)))
        idle.append(connection)
    begun = time.monotonic()
    one.move((2,), timeout=TIMEOUT_S)
    with pytest.raises(TimeoutError):
        one.observe(timeout=SHORT_S)  # finds member 0 and connects: its queue has no room yet
    assert time.monotonic() - begun < 20, "the observe returned by its timeout, not the group's (60 s)"
    for connection in idle:
        connection.close()
    zero.move((1,), timeout=TIMEOUT_S)
    other = threading.Thread(target=lambda: results.append(zero.observe(timeout=TIMEOUT_S)))
    results = []
    other.start()
    assert one.observe(timeout=TIMEOUT_S) == (3,)
    other.join(TIMEOUT_S)
    assert results == [(3,)]
