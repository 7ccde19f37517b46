"""The runtime: building paths, serving them, the acquire hook, kernels, traces, and how a
process of a run finds its map, its node servers and its peers.
"""
