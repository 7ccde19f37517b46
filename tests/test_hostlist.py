"""Slurm-style host list expansion."""

import pytest

from paths.model.hostlist import expand_hostlist


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("login", ["login"]),
        ("n[0-3]", ["n0", "n1", "n2", "n3"]),
        ("n[0-3,8,10-11]", ["n0", "n1", "n2", "n3", "n8", "n10", "n11"]),
        ("a[01-03]b", ["a01b", "a02b", "a03b"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("n[0-1],login", ["n0", "n1", "login"]),
        ("n[0-1], m[2-3] ,login", ["n0", "n1", "m2", "m3", "login"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("[1-2].cluster.org", ["1.cluster.org", "2.cluster.org"]),
        ("node-7_a", ["node-7_a"]),
    ],
)
def test_expands(text, hosts):
    assert expand_hostlist(text) == hosts


def test_eight_nodes():
    assert expand_hostlist("n[0-7]") == [f"n{i}" for i in range(8)]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty"),
        ("n[0-3", "never closed"),
        ("n0-3]", "without '['"),
        ("n[0-[1]]", "nested"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "not a number"),
        ("n[]", "not a number"),
        ("n[1-]", "not a number"),
        ("n0,,n1", "empty name"),
        ("n0,", "empty name"),
        ("n 0", "characters other than"),
        ("n[\u0661-\u0663]", "not a number"),               # digits are ASCII digits, as Slurm's
        ("n[0-9999999]", "more than 65536 hosts"),
        ("a[0-65535]b[0-1]", "more than 65536 hosts"),       # counted before the product is made
        ("n[0-40000,0-40000]", "more than 65536 hosts"),     # spans counted together
        ("n[0-40000],m[0-40000]", "more than 65536 hosts"),  # names counted together
    ],
)
def test_malformed_lists_name_the_text_and_the_expectation(text, problem):
    with pytest.raises(ValueError) as info:
        expand_hostlist(text)
    message = str(info.value)
    assert repr(text) in message
    assert problem in message
    assert "expected names like 'n[0-7]'" in message


def test_hosts_are_counted_before_they_are_made():
    with pytest.raises(ValueError, match="it names more than 65536 hosts"):
        expand_hostlist("a[0-65535]b[0-65535]c[0-65535]")  # 2^48 names: never made


def test_a_long_host_list_is_shown_cut():
    with pytest.raises(ValueError) as info:
        expand_hostlist("n" * 10_000 + "[")
    assert len(str(info.value)) < 300 and "never closed" in str(info.value)


def test_a_number_too_long_to_read_is_refused_before_it_is_read():
    with pytest.raises(ValueError, match=r"^bad host list 'n\[0-9999.*has a number of more than 18 digits; expected"):
        expand_hostlist("n[0-" + "9" * 5000 + "]")
