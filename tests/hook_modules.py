"""Sources of user modules of hooks, for the user_module fixture (tests/conftest.py)."""

# Hooks that change nothing: acquire gives the default path, release does nothing.
PASS_THROUGH_HOOKS = """
    import paths

    @paths.acquire_hook
    def acquire(request):
        return request.default()

    @paths.release_hook
    def release(request, handle):
        pass
"""
