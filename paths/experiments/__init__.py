"""Experiments: starting the processes of a run (launcher, nodes, ranks), running kernels
on a map, and measuring them.
"""
