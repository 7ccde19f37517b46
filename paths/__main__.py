"""`python -m paths ...` is the `paths` command."""

import sys

from .cli import main

sys.exit(main())
