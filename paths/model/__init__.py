"""The model: paths as specs, stage kinds and their roles, cluster maps, placement, plans.

Pure descriptions; nothing here builds a stage or starts a process.
"""
