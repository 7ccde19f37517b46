"""The `paths` command line: one module per subcommand family.
"""
