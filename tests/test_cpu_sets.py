"""CPU sets: the Linux list syntax both ways, and a machine's CPUs shared out among nodes."""

import argparse

import pytest

from paths.model.cpu_sets import cpu_list, cpu_shares, format_cpu_list


def test_lists_parse_and_format_both_ways():
    assert cpu_list("0-3,8") == {0, 1, 2, 3, 8}
    assert cpu_list("5") == {5}
    assert format_cpu_list({8, 0, 1, 2, 3}) == "0-3,8"
    assert format_cpu_list([4, 6]) == "4,6"
    assert cpu_list(format_cpu_list({0, 2, 3, 4, 9, 10})) == {0, 2, 3, 4, 9, 10}


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", "1-", "1,,2", "65536", "0-99999999999"])  # no huge sets made
def test_bad_lists_are_usage_errors_that_quote_them(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected"):
        cpu_list(text)


def test_each_node_gets_its_own_share_while_cpus_last():
    assert cpu_shares(2, [0, 1, 2, 3]) == [[0, 1], [2, 3]]
    assert cpu_shares(3, [0, 1, 2, 3, 4, 5, 6]) == [[0, 1], [2, 3], [4, 5, 6]]
    assert cpu_shares(1, [4, 7]) == [[4, 7]]


def test_more_nodes_than_cpus_share_them_evenly():
    shares = cpu_shares(5, [0, 1])
    assert shares == [[0], [0], [0], [1], [1]]
